"""The peers' spellings of test-set generation (issue 51), with only the import changed: DeepEval's Synthesizer,
Ragas' TestsetGenerator and LlamaIndex's generate_question_context_pairs, each giving our checked goldens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from goldens_writer import ScriptedWriter
from langchain_core.documents import Document

from contextjudge.goldens import load_goldens
from contextjudge.testing import FakeJudge

TEXTS = {
    "pto": "Paid time off\n\nEmployees accrue twenty days of paid time off per year. Unused days carry over until "
           "March of the following year.",
    "parking": "Parking\n\nParking permits cost forty dollars per month and are sold at the front desk.",
    "expenses": "Expenses\n\nTravel expenses are reimbursed within ten business days of the claim.",
}


def test_deepeval_synthesizer_from_docs_and_contexts(tmp_path):
    from contextjudge.compat.deepeval.dataset import Golden
    from contextjudge.compat.deepeval.synthesizer import Synthesizer

    paths = []
    for name, text in TEXTS.items():
        (tmp_path / f"{name}.md").write_text(text)
        paths.append(str(tmp_path / f"{name}.md"))
    synth = Synthesizer(model=ScriptedWriter(), judge=FakeJudge())
    goldens = synth.generate_goldens_from_docs(document_paths=paths, include_expected_output=True,
                                               max_goldens_per_context=2)
    assert goldens and all(isinstance(g, Golden) for g in goldens)
    for g in goldens:
        assert g.expected_output and g.context and g.source_file and g.source_file.endswith(".md")
        assert g.expected_context_ids and g.expected_context_ids[0].startswith(g.source_file)
        assert g.additional_metadata["provenance"]["prompt_version"] == "goldens-1"
    from_contexts = synth.generate_goldens_from_contexts(
        contexts=[[TEXTS["pto"]], [TEXTS["parking"]]], source_files=["pto.md", "parking.md"],
        include_expected_output=False, max_goldens_per_context=1)
    assert {g.expected_context_ids[0] for g in from_contexts} == {"pto.md", "parking.md"}
    assert all(g.expected_output is None for g in from_contexts)
    path = synth.save_as("jsonl", str(tmp_path / "out"), quiet=True)
    loaded = load_goldens(path)
    assert len(loaded) == len(goldens) + len(from_contexts) and loaded.name == "goldens"
    first = Path(path).read_text().splitlines()[0]
    assert json.loads(first)["contextjudge_goldens"]["hash"] == loaded.fingerprint()["hash"]


def test_ragas_testset_generator_with_langchain_docs():
    from contextjudge.compat.ragas.llms import LangchainLLMWrapper
    from contextjudge.compat.ragas.testset import TestsetGenerator

    docs = [Document(id=f"doc-{k}", page_content=t, metadata={"source": k}) for k, t in TEXTS.items()]
    gen = TestsetGenerator(llm=LangchainLLMWrapper(ScriptedWriter()), embedding_model=None, judge=FakeJudge())
    testset = gen.generate_with_langchain_docs(docs, testset_size=4)
    assert 1 <= len(testset) <= 4
    rows = testset.to_list()
    for r in rows:
        assert r["user_input"] and r["reference"] and r["reference_context_ids"][0].startswith("doc-")
        assert r["synthesizer_name"].startswith("contextjudge_")
    ds = testset.to_evaluation_dataset()
    assert len(ds) == len(testset) and ds[0].reference_context_ids


def test_llama_index_generate_question_context_pairs(tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.schema import TextNode

    from contextjudge_llama_index.evaluation import EmbeddingQAFinetuneDataset, generate_question_context_pairs

    nodes = [TextNode(id_=f"node-{k}", text=t) for k, t in TEXTS.items()]
    ds = generate_question_context_pairs(nodes, llm=ScriptedWriter(), num_questions_per_chunk=2, judge=FakeJudge())
    assert type(ds).__name__ == "EmbeddingQAFinetuneDataset"  # LlamaIndex's own where it ships it, else ours
    assert set(ds.corpus) == {"node-pto", "node-parking", "node-expenses"}
    assert ds.queries and set(ds.queries) == set(ds.relevant_docs)
    for qid, q in ds.queries.items():
        assert q and ds.relevant_docs[qid][0] in ds.corpus
    path = tmp_path / "qa.json"
    ds.save_json(str(path))
    assert EmbeddingQAFinetuneDataset.from_json(str(path)).queries == ds.queries
    # a LlamaIndex LLM writes through its chat interface
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

    writer = ScriptedWriter()

    class ScriptLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="script-llm")

        def complete(self, prompt, formatted=False, **kwargs):
            return CompletionResponse(text=writer._reply(prompt))

        def stream_complete(self, prompt, formatted=False, **kwargs):
            yield self.complete(prompt)

    by_llama = generate_question_context_pairs(nodes, llm=ScriptLLM(), num_questions_per_chunk=1, judge=FakeJudge())
    assert len(by_llama.queries) == 3 and len(writer._calls) == 3
    # MockLLM answers "text text ...": no readable questions, and the error says so
    with pytest.raises(Exception, match="no golden"):
        generate_question_context_pairs(nodes, llm=MockLLM(max_tokens=5), num_questions_per_chunk=1)

"""``ragas.testset`` names: ``TestsetGenerator``, ``Testset``, ``TestsetSample``.

    from contextjudge.compat.ragas.testset import TestsetGenerator     # was: from ragas.testset import ...
    generator = TestsetGenerator(llm=LangchainLLMWrapper(ChatOpenAI(model="gpt-4o-mini")))
    testset = generator.generate_with_langchain_docs(docs, testset_size=20)
    testset.to_pandas()

The samples come from contextjudge's generator (``contextjudge.goldens.generate``), not from a knowledge graph: the
documents' own chunks (LangChain ``Document``\\ s or LlamaIndex nodes, under their ids) are asked for questions in
contextjudge's styles (short, conversational, multi-part, needs two chunks), near-duplicates are dropped and each is
checked by the judge (the embedded judge unless ``judge=`` says otherwise). Each sample carries
``reference_context_ids`` (the chunk ids), so Ragas' ID-based context precision and recall need no judge. No
embedding model is needed; ``embedding_model``, ``knowledge_graph``, ``persona_list``, transforms and query
distributions are accepted and not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..dataset_schema import EvaluationDataset, SingleTurnSample
from ..llms import judge_of

__all__ = ["Testset", "TestsetGenerator", "TestsetSample"]

_STYLES = ("short", "multi_part", "two_chunks", "conversational")


@dataclass
class TestsetSample:
    """One generated sample and the style that wrote it (Ragas: the synthesizer's name)."""

    __test__ = False  # not a pytest class

    eval_sample: SingleTurnSample
    synthesizer_name: str = ""


@dataclass
class Testset:
    """Generated samples: ``to_pandas``, ``to_list``, ``to_evaluation_dataset``, ``to_jsonl``; ``result`` is the
    generator's (what was dropped and why, calls and tokens)."""

    __test__ = False

    samples: list[TestsetSample] = field(default_factory=list)
    result: Any = None

    def to_list(self) -> list[dict[str, Any]]:
        """The samples as dicts, with their synthesizer's name."""
        return [{**s.eval_sample.to_dict(), "synthesizer_name": s.synthesizer_name} for s in self.samples]

    def to_pandas(self) -> Any:
        """The samples as a DataFrame (needs pandas)."""
        import pandas as pd  # noqa: PLC0415

        return pd.DataFrame(self.to_list())

    def to_evaluation_dataset(self) -> EvaluationDataset:
        """The samples as an ``EvaluationDataset`` (fill in ``response`` and ``retrieved_contexts`` from your app)."""
        return EvaluationDataset([s.eval_sample for s in self.samples])

    def to_jsonl(self, path: str) -> None:
        """contextjudge's goldens file (a name and content hash on the first line), readable by ``eval``."""
        from ....engine import write_goldens  # noqa: PLC0415

        write_goldens(path, self.result.goldens if self.result is not None else [])

    def __len__(self) -> int:
        return len(self.samples)


class TestsetGenerator:
    """Ragas' ``TestsetGenerator``: ``llm`` writes the questions (a ``LangchainLLMWrapper``, ``llm_factory(...)``
    or a LangChain chat model); ``judge`` (contextjudge's: default the embedded judge) checks them."""

    __test__ = False

    def __init__(self, llm: Any = None, embedding_model: Any = None, knowledge_graph: Any = None,
                 persona_list: Any = None, llm_context: str | None = None, *, judge: Any = "local") -> None:
        self.llm = llm
        self.embedding_model = embedding_model
        self.judge = judge

    @classmethod
    def from_langchain(cls, llm: Any, embedding_model: Any = None, knowledge_graph: Any = None,
                       **kwargs: Any) -> TestsetGenerator:
        """A generator from a LangChain (or LlamaIndex) model, as in Ragas."""
        return cls(llm=llm, embedding_model=embedding_model, knowledge_graph=knowledge_graph, **kwargs)

    from_llama_index = from_langchain

    def _generate(self, documents: Any, testset_size: int) -> Testset:
        from ....engine import generate_goldens, read_chunks  # noqa: PLC0415

        if testset_size < 1:
            raise ValueError("testset_size must be 1 or more.")
        chunks = read_chunks(list(documents))
        per = max(1, math.ceil(testset_size / max(1, len(chunks))))
        res = generate_goldens(chunks, model=judge_of(self.llm), per_chunk=per, styles=_STYLES, judge=self.judge)
        samples = []
        for row in res.goldens[:testset_size]:
            samples.append(TestsetSample(SingleTurnSample(
                user_input=row["input"], reference=row.get("expected_output"),
                reference_contexts=row.get("expected_context"),
                reference_context_ids=row.get("expected_context_ids"), query_style=row["style"]),
                synthesizer_name=f"contextjudge_{row['style']}"))
        return Testset(samples, result=res)

    def generate_with_langchain_docs(self, documents: Any, testset_size: int, transforms: Any = None,
                                     transforms_llm: Any = None, transforms_embedding_model: Any = None,
                                     query_distribution: Any = None, run_config: Any = None, callbacks: Any = None,
                                     with_debugging_logs: bool = False, raise_exceptions: bool = True,
                                     **_: Any) -> Testset:
        """``testset_size`` samples from LangChain ``Document``\\ s (each one chunk, under its id)."""
        return self._generate(documents, testset_size)

    def generate_with_llamaindex_docs(self, documents: Any, testset_size: int, **kwargs: Any) -> Testset:
        """``testset_size`` samples from LlamaIndex documents or nodes (each one chunk, under its id)."""
        return self._generate(documents, testset_size)

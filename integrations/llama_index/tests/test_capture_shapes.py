"""The shapes LlamaIndex's own docs teach, captured with the one instrument line.

The starter app (``SimpleDirectoryReader`` -> ``VectorStoreIndex.from_documents`` -> ``as_query_engine().query``),
a retriever called outside any query engine, a ``BaseRetriever`` of the user's own called by hand in a workflow
step, and a workflow that retrieves in a way capture cannot see (one warning, and counters that say so).
"""

from __future__ import annotations

import pytest
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step

import contextjudge_llama_index as cj
from contextjudge.cases.provenance import SOURCE_DOC_KEY, agent_of, no_retrieval_of, source_of
from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

QUESTION = "How many vacation days do employees get?"


@pytest.fixture()
def offline_settings():
    old = Settings._llm, Settings._embed_model  # noqa: SLF001 - restored as they were, unset included
    Settings.llm, Settings.embed_model = ExtractiveLLM(), KeywordEmbedding()
    yield
    Settings._llm, Settings._embed_model = old  # noqa: SLF001


@pytest.fixture()
def session():
    s = cj.instrument(metrics=[], mode="off", max_kept=None)  # the one line
    yield s
    cj.uninstrument()
    s.close(5)


def test_the_starter_app(index, tmp_path, offline_settings, session):
    for node in index.docstore.docs.values():  # the shared corpus, one file per document
        (tmp_path / f"{node.ref_doc_id}.txt").write_text(node.get_content(), encoding="utf-8")
    # the starter tutorial, as written there (with offline models in Settings)
    documents = SimpleDirectoryReader(str(tmp_path), filename_as_id=True).load_data()
    index = VectorStoreIndex.from_documents(documents)
    query_engine = index.as_query_engine(similarity_top_k=3)
    response = query_engine.query(QUESTION)
    second = query_engine.query("When does the office open?")

    first_case, second_case = session.ready_cases()
    tc = first_case.test_case
    assert tc.input == QUESTION and tc.name == QUESTION
    assert tc.actual_output == str(response)
    assert [n.id for n in tc.retrieval_context] == [n.node.node_id for n in response.source_nodes]
    assert [n.score for n in tc.retrieval_context] == [n.score for n in response.source_nodes]
    # both ids: the chunk's, and the user's document it came from (here its file), with its title
    top = tc.retrieval_context[0]
    assert top.metadata[SOURCE_DOC_KEY] == response.source_nodes[0].node.ref_doc_id
    assert top.metadata[SOURCE_DOC_KEY].endswith("vacation.txt")
    assert source_of(top.metadata) == (top.metadata[SOURCE_DOC_KEY], "vacation.txt")
    assert second_case.test_case.name == "When does the office open?"
    assert second_case.test_case.actual_output == str(second)
    assert session.counters["roots"] == 2 and session.counters["roots_without_retrieval"] == 0


def test_a_retriever_called_outside_a_query_engine(index, session):
    retriever = index.as_retriever(similarity_top_k=2)
    nodes = retriever.retrieve(QUESTION)
    [case] = session.ready_cases()
    tc = case.test_case
    assert tc.input == QUESTION and tc.name == QUESTION and tc.actual_output is None
    assert [(n.id, n.score) for n in tc.retrieval_context] == [(n.node.node_id, n.score) for n in nodes]
    assert tc.retrieval_context[0].metadata[SOURCE_DOC_KEY] == "vacation"  # the user's Document(id_=...)
    assert case.metadata["retriever"] == "VectorIndexRetriever"


class KeywordRetriever(BaseRetriever):
    """A retriever of the user's own: the index's nodes that share a word with the question, best first."""

    def __init__(self, index: VectorStoreIndex) -> None:
        super().__init__()
        self._nodes = list(index.docstore.docs.values())

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        words = set(query_bundle.query_str.lower().split())
        scored = [(len(words & set(n.get_content().lower().split())), n) for n in self._nodes]
        return [NodeWithScore(node=n, score=float(s)) for s, n in sorted(scored, key=lambda p: -p[0]) if s][:2]


async def test_a_base_retriever_called_by_hand_in_a_workflow_step(index, llm, session):
    retriever = KeywordRetriever(index)

    class RagFlow(Workflow):
        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            nodes = await retriever.aretrieve(ev.query)
            context = "\n".join(n.get_content() for n in nodes)
            done = await llm.acomplete(f"Context:\n{context}\n\nQuestion: {ev.query}")
            return StopEvent(result=done.text)

    result = await RagFlow(timeout=30).run(query="vacation days employees")
    [case] = session.ready_cases()
    tc = case.test_case
    assert tc.input == "vacation days employees" and tc.actual_output == result
    assert tc.retrieval_context[0].metadata[SOURCE_DOC_KEY] == "vacation"
    assert [n.score for n in tc.retrieval_context] == sorted((n.score for n in tc.retrieval_context), reverse=True)
    assert agent_of(tc)["tool"] == "answer" and tc.name == "answer: vacation days employees"


async def test_a_workflow_that_retrieves_nothing_capture_sees_warns_once(index, llm, caplog):
    nodes = list(index.docstore.docs.values())

    class LookupFlow(Workflow):
        @step
        async def lookup(self, ev: StartEvent) -> StopEvent:
            text = next(n.get_content() for n in nodes if "vacation" in n.get_content())  # no retriever
            done = await llm.acomplete(f"Context:\n{text}\n\nQuestion: {ev.query}")
            return StopEvent(result=done.text)

    session = cj.instrument(metrics=[], mode="off", max_kept=None, warn_after_roots=2)
    try:
        with caplog.at_level("WARNING", logger="contextjudge"):
            for _ in range(3):
                await LookupFlow(timeout=30).run(query="vacation days")
    finally:
        cj.uninstrument()
        session.close(5)
    said = [r.getMessage() for r in caplog.records if "none retrieved anything" in r.getMessage()]
    assert len(said) == 1, said
    assert "workflows: LookupFlow (2)" in said[0] and "steps: lookup (2)" in said[0]
    assert "LLM calls: 2" in said[0] and "as_retriever()" in said[0]
    assert session.counters["roots_without_retrieval"] == 3 and session.counters["seen"] == 0


def test_a_query_engine_call_without_retrieval_says_why(llm, session):
    from llama_index.core.chat_engine import SimpleChatEngine  # noqa: PLC0415

    SimpleChatEngine.from_defaults(llm=llm).chat("hello there")
    [case] = session.ready_cases()
    assert case.test_case.retrieval_context is None
    assert "SimpleChatEngine" in no_retrieval_of(case.test_case)
    assert session.counters["roots_without_retrieval"] == 1


async def test_a_web_search_tool_named_in_retrieval_tools_is_a_retrieval():
    import warnings  # noqa: PLC0415

    from llama_index.core.agent.workflow import FunctionAgent  # noqa: PLC0415
    from llama_index.core.tools import FunctionTool  # noqa: PLC0415

    from contextjudge_llama_index.testing import ScriptedAgentLLM  # noqa: PLC0415

    results = [{"url": "https://hr.example.com/pto", "title": "PTO", "content": "Employees get 25 vacation days."},
               {"url": "https://hr.example.com/remote", "title": "Remote", "content": "Remote work: two days."}]

    def web_search(query: str) -> list[dict]:
        """Search the intranet."""
        return results

    def clock(zone: str) -> str:
        """The time in a zone."""
        return "09:00"

    llm = ScriptedAgentLLM({QUESTION: [[("web_search", {"query": "vacation days"}), ("clock", {"zone": "UTC"})],
                                       "You get 25 vacation days."]})
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(web_search), FunctionTool.from_defaults(clock)], llm=llm)
    session = cj.instrument(metrics=[], mode="off", max_kept=None, retrieval_tools=["web_search"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            answer = await agent.run(user_msg=QUESTION)
        cases = session.ready_cases()
    finally:
        cj.uninstrument()
        session.close(5)
    [case] = cases
    tc = case.test_case
    assert tc.input == QUESTION and tc.actual_output == str(answer) == "You get 25 vacation days."
    assert [n.id for n in tc.retrieval_context] == ["https://hr.example.com/pto", "https://hr.example.com/remote"]
    assert tc.retrieval_context[0].text == "Employees get 25 vacation days."
    assert tc.retrieval_context[0].metadata["title"] == "PTO"
    assert agent_of(tc)["tool"] == "web_search" and tc.additional_metadata["tool_output_retrieval"] is True
    assert tc.name == f"web_search: {QUESTION}"

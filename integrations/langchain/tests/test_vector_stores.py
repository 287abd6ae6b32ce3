"""Vector stores called directly, as LangChain's RAG tutorial calls them: captured with the one instrument line.

The tutorial's graph (a ``StateGraph`` with ``retrieve`` and ``generate`` nodes over an ``InMemoryVectorStore``,
the retrieve node calling ``vector_store.similarity_search(question)``) and its agent form (a ``@tool`` that calls
``similarity_search`` with ``response_format="content_and_artifact"``), each case's input, ranked nodes, output and
name; the scored, async, MMR and by-vector forms; no second case for a retriever's own call; the patch off again
after ``uninstrument()``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
from typing_extensions import TypedDict

pytest.importorskip("langgraph", reason="these tests build the tutorial's LangGraph graph (pip install langgraph)")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

from contextjudge.cases.provenance import agent_of  # noqa: E402
from contextjudge_langchain import instrument, uninstrument  # noqa: E402
from contextjudge_langchain.testing import ExtractiveChatModel, ScriptedAgentModel  # noqa: E402

PROMPT = ChatPromptTemplate.from_template(
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to answer "
    "the question.\nQuestion: {question}\nContext: {context}\nAnswer:")
QUESTIONS = ["How many days of paid time off do full-time employees get?",
             "How do I report a phishing email?"]


class State(TypedDict):
    question: str
    context: list[Document]
    answer: str


def tutorial_graph(vector_store, llm):
    """LangChain's RAG tutorial (part 1), as it is written there."""

    def retrieve(state: State):
        retrieved_docs = vector_store.similarity_search(state["question"])
        return {"context": retrieved_docs}

    def generate(state: State):
        docs_content = "\n\n".join(doc.page_content for doc in state["context"])
        messages = PROMPT.invoke({"question": state["question"], "context": docs_content})
        response = llm.invoke(messages)
        return {"answer": response.content}

    graph_builder = StateGraph(State).add_sequence([retrieve, generate])
    graph_builder.add_edge(START, "retrieve")
    return graph_builder.compile()


@pytest.fixture()
def session():
    s = instrument(metrics=[], mode="off", max_kept=None)  # the one line
    try:
        yield s
    finally:
        uninstrument()
        s.close(5)


def test_the_rag_tutorial_graph_is_captured_case_for_case(store, session):
    graph = tutorial_graph(store, ExtractiveChatModel())
    answers = [graph.invoke({"question": q}) for q in QUESTIONS]
    cases = session.cases
    assert session.counters["seen"] == 2 and len(cases) == 2
    for case, question, out in zip(cases, QUESTIONS, answers, strict=True):
        tc = case.test_case
        assert tc.input == question
        assert [n.id for n in tc.retrieval_context] == [d.id for d in out["context"]]  # rank order, four by default
        assert len(tc.retrieval_context) == 4
        assert tc.actual_output == out["answer"] and tc.actual_output
        assert tc.name == f"retrieve: {question}"  # named after the graph node and the question
        assert agent_of(tc)["node"] == "retrieve"
        assert tc.additional_metadata["vector_store_call"] == "similarity_search"
        assert tc.additional_metadata["retriever"] == "InMemoryVectorStore"
        assert case.root_run_id  # attached to the graph's root run
    assert cases[0].test_case.retrieval_context[0].id == "pto-001"
    assert cases[1].test_case.retrieval_context[0].id.startswith("sec")


def test_async_graph_and_scores(store, session):
    """``ainvoke`` with ``asimilarity_search_with_score`` in the node: the store's scores come with the nodes."""
    seen: list[list[tuple[Document, float]]] = []

    async def retrieve(state: State):
        pairs = await store.asimilarity_search_with_score(state["question"], k=3)
        seen.append(pairs)
        return {"context": [d for d, _ in pairs]}

    def generate(state: State):
        return {"answer": ExtractiveChatModel().invoke(
            PROMPT.invoke({"question": state["question"],
                           "context": "\n\n".join(d.page_content for d in state["context"])})).content}

    builder = StateGraph(State).add_sequence([retrieve, generate])
    builder.add_edge(START, "retrieve")
    graph = builder.compile()

    async def main():
        return await asyncio.gather(*(graph.ainvoke({"question": q}) for q in QUESTIONS))

    outs = asyncio.run(main())
    by_input = {c.test_case.input: c.test_case for c in session.cases}
    assert set(by_input) == set(QUESTIONS)
    for out in outs:
        tc = by_input[out["question"]]
        pairs = next(p for p in seen if [d.id for d, _ in p] == [n.id for n in tc.retrieval_context])
        assert [n.score for n in tc.retrieval_context] == pytest.approx([s for _, s in pairs])
        assert tc.actual_output == out["answer"]
        assert tc.additional_metadata["vector_store_call"] == "asimilarity_search_with_score"


def test_mmr_and_by_vector_in_a_chain(store, session):
    """A plain function in an LCEL chain: MMR search, then a search by the question's vector (no query text: the
    case's input is the chain's question)."""
    emb = store.embedding

    def mmr(question: str) -> dict:
        return {"question": question, "docs": store.max_marginal_relevance_search(question, k=2, fetch_k=6)}

    def by_vector(question: str) -> dict:
        return {"question": question, "docs": store.similarity_search_by_vector(emb.embed_query(question), k=2)}

    answer = RunnableLambda(lambda x: ExtractiveChatModel().invoke(
        PROMPT.invoke({"question": x["question"], "context": "\n\n".join(d.page_content for d in x["docs"])})).content)
    for fn in (mmr, by_vector):
        (RunnableLambda(fn) | answer).invoke(QUESTIONS[0])
    mmr_case, vec_case = session.cases
    assert mmr_case.test_case.additional_metadata["vector_store_call"] == "max_marginal_relevance_search"
    assert vec_case.test_case.additional_metadata["vector_store_call"] == "similarity_search_by_vector"
    for case in (mmr_case, vec_case):
        tc = case.test_case
        assert tc.input == QUESTIONS[0] and tc.name == QUESTIONS[0]
        assert len(tc.retrieval_context) == 2 and tc.retrieval_context[0].id == "pto-001"
        assert tc.actual_output and "25 days" in tc.actual_output


def test_the_tutorials_retrieval_tool_in_an_agent(store, session):
    """The tutorial's part 2: a ``@tool`` calling ``similarity_search`` (content and artifact) in an agent."""
    from langchain.agents import create_agent  # noqa: PLC0415

    @tool(response_format="content_and_artifact")
    def retrieve(query: str):
        """Retrieve information related to a query."""
        retrieved_docs = store.similarity_search(query, k=2)
        serialized = "\n\n".join(f"Source: {doc.metadata}\nContent: {doc.page_content}" for doc in retrieved_docs)
        return serialized, retrieved_docs

    agent = create_agent(ScriptedAgentModel(plan=lambda user: [("retrieve", {"query": "paid time off days"})]),
                         [retrieve])
    out = agent.invoke({"messages": [{"role": "user", "content": QUESTIONS[0]}]})
    [case] = session.cases
    tc = case.test_case
    assert tc.input == QUESTIONS[0] and tc.actual_output == out["messages"][-1].content
    assert [n.id for n in tc.retrieval_context][:1] == ["pto-001"] and len(tc.retrieval_context) == 2
    meta = agent_of(tc)
    assert meta["tool"] == "retrieve" and meta["tool_input"] == "paid time off days"
    assert tc.name == f"retrieve: {QUESTIONS[0]}"


def test_a_retrievers_own_call_is_not_a_second_case(chain, session):
    out = chain.invoke(QUESTIONS[0])
    [case] = session.cases  # the VectorStoreRetriever's run only, not also its similarity_search
    tc = case.test_case
    assert tc.actual_output == out and tc.additional_metadata["retriever"] == "policy_retriever"
    assert "vector_store_call" not in tc.additional_metadata and "sub_retrievals" not in tc.additional_metadata


def test_a_direct_call_outside_any_run_is_a_case_of_its_own(store, session):
    docs = store.similarity_search(QUESTIONS[1], k=2)
    [case] = session.cases
    tc = case.test_case
    assert tc.input == QUESTIONS[1] and tc.actual_output is None
    assert [n.id for n in tc.retrieval_context] == [d.id for d in docs]


def test_uninstrument_and_close_take_the_patch_off():
    """In a fresh process: LangChain's own methods before instrument(), after uninstrument() and close(), and with
    no handler ever made; a handler's close() takes it off too."""
    script = textwrap.dedent("""
        from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
        from contextjudge_langchain import ContextJudgeCallbackHandler, instrument, uninstrument
        from contextjudge_langchain import _vectorstores as vs
        names = list(vs.SEARCH_METHODS)
        before = {(c, n): c.__dict__.get(n) for c in (VectorStore, InMemoryVectorStore) for n in names}
        hook = VectorStore.__dict__.get("__init_subclass__")
        assert not vs.is_patched()
        session = instrument(metrics=[], mode="off", max_kept=None)
        assert vs.is_patched()
        assert InMemoryVectorStore.similarity_search is not before[(InMemoryVectorStore, "similarity_search")]
        class Later(InMemoryVectorStore):  # defined while patched: wrapped too
            def similarity_search(self, query, k=4, **kw):
                return super().similarity_search(query, k=k, **kw)
        assert getattr(Later.__dict__["similarity_search"], "__contextjudge_wrapped__", False)
        uninstrument(); session.close(5)
        assert not vs.is_patched()
        after = {(c, n): c.__dict__.get(n) for c in (VectorStore, InMemoryVectorStore) for n in names}
        assert after == before and VectorStore.__dict__.get("__init_subclass__") is hook
        assert not getattr(Later.__dict__["similarity_search"], "__contextjudge_wrapped__", False)
        h = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
        assert vs.is_patched()
        h.close(5)
        assert not vs.is_patched()
        import gc
        h = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
        assert vs.is_patched()
        del h; gc.collect()  # dropped without close(): the patch goes with it
        assert not vs.is_patched()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_calls_that_retrieve_nothing_warn_once(caplog):
    """A graph that looks its context up without a retriever or a vector store: no case, and one warning after
    ``warn_after_roots`` calls that names the graph's nodes and the shapes that are captured."""
    notes = {"pto": "Full-time employees accrue 25 days of paid time off per year."}

    def retrieve(state: State):
        return {"context": [Document(notes["pto"])]}  # a lookup capture cannot see

    def generate(state: State):
        return {"answer": ExtractiveChatModel().invoke(
            PROMPT.invoke({"question": state["question"], "context": state["context"][0].page_content})).content}

    builder = StateGraph(State).add_sequence([retrieve, generate])
    builder.add_edge(START, "retrieve")
    graph = builder.compile()
    session = instrument(metrics=[], mode="off", max_kept=None, warn_after_roots=3)
    try:
        with caplog.at_level("WARNING", logger="contextjudge"):
            for _ in range(5):
                graph.invoke({"question": QUESTIONS[0]})
            session.handler.flush(10)
    finally:
        uninstrument()
        session.close(5)
    warnings = [r.getMessage() for r in caplog.records if "none retrieved anything" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "graph nodes: retrieve (3), generate (3)" in warnings[0] and "LLM calls: 3" in warnings[0]
    assert "similarity_search" in warnings[0] and "README.md#what-is-captured" in warnings[0]
    assert session.counters["roots_without_retrieval"] == 5 and session.counters["roots"] == 5
    assert session.counters["seen"] == 0


def test_eval_app_golden_that_retrieved_nothing_says_so(judge):
    """``contextjudge eval --app``: a golden whose run retrieved nothing is a case whose metrics say what the run
    did and which shapes are captured."""
    from contextjudge import evaluate  # noqa: PLC0415
    from contextjudge.cases.provenance import no_retrieval_of  # noqa: PLC0415
    from contextjudge.metrics import ContextualRelevancyMetric  # noqa: PLC0415
    from contextjudge_langchain._adapter import adapter, golden_input  # noqa: PLC0415

    def retrieve(state: State):
        return {"context": [Document("Full-time employees accrue 25 days of paid time off per year.")]}

    def generate(state: State):
        return {"answer": state["context"][0].page_content}

    builder = StateGraph(State).add_sequence([retrieve, generate])
    builder.add_edge(START, "retrieve")
    graph = builder.compile()
    assert golden_input(graph, "q") == {"question": "q"}
    assert golden_input(typed_dict_graph(), "q") == {"question": "q"}  # a typing.TypedDict state too
    [case] = adapter.collect(graph, [{"id": "pto", "input": QUESTIONS[0], "expected_output": "25 days."}])
    tc = case.test_case
    assert tc.input == QUESTIONS[0] and tc.retrieval_context is None and case.golden_id == "pto"
    assert tc.actual_output.startswith("Full-time employees accrue 25 days")
    said = no_retrieval_of(tc)
    assert "graph nodes: retrieve, generate" in said and "similarity_search" in said
    [result] = evaluate([tc], [ContextualRelevancyMetric(model=judge)], show_progress=False).test_results
    [metric] = result.metrics_data
    assert metric.score is None and "retrieved nothing that capture sees" in metric.error


def typed_dict_graph():
    import typing  # noqa: PLC0415

    class PlainState(typing.TypedDict):
        question: str
        answer: str

    builder = StateGraph(PlainState).add_sequence([lambda s: {"answer": s["question"]}])
    builder.add_edge(START, "<lambda>")
    return builder.compile()


SEARCH_RESULTS = [
    {"url": "https://hr.example.com/pto", "title": "PTO policy",
     "content": "Full-time employees accrue 25 days of paid time off per year."},
    {"url": "https://hr.example.com/holidays", "title": "Holidays", "content": "The company observes 10 holidays."},
]


def test_a_web_search_tool_named_in_retrieval_tools_is_a_retrieval():
    """Opt-in by name: the search tool's result list becomes ranked nodes (text, url as id, title kept); an
    unnamed tool in the same run is not a retrieval."""
    from langchain.agents import create_agent  # noqa: PLC0415

    @tool
    def web_search(query: str) -> list[dict]:
        """Search the company intranet."""
        return SEARCH_RESULTS

    @tool
    def clock(zone: str) -> str:
        """The time in a zone."""
        return "09:00"

    plan = [("web_search", {"query": "paid time off days"}), ("clock", {"zone": "UTC"})]
    agent = create_agent(ScriptedAgentModel(plan=lambda user: plan), [web_search, clock])
    session = instrument(metrics=[], mode="off", max_kept=None, retrieval_tools=["web_search"])
    try:
        out = agent.invoke({"messages": [{"role": "user", "content": QUESTIONS[0]}]})
        cases = session.cases
    finally:
        uninstrument()
        session.close(5)
    [case] = cases
    tc = case.test_case
    assert tc.input == QUESTIONS[0] and tc.actual_output == out["messages"][-1].content
    assert [n.id for n in tc.retrieval_context] == ["https://hr.example.com/pto", "https://hr.example.com/holidays"]
    assert tc.retrieval_context[0].text.startswith("Full-time employees accrue 25 days")
    assert tc.retrieval_context[0].metadata["title"] == "PTO policy"
    assert agent_of(tc)["tool"] == "web_search" and agent_of(tc)["tool_input"] == "paid time off days"
    assert tc.additional_metadata["tool_output_retrieval"] is True and tc.name == f"web_search: {QUESTIONS[0]}"


def test_a_tool_marked_by_metadata_a_string_output_is_one_node(store):
    """Opt-in by marker (a SQL-like tool returning one string): one node; and a retriever inside a marked tool is
    captured once, as the retriever it is."""
    from langchain.agents import create_agent  # noqa: PLC0415
    from langchain_core.tools import StructuredTool  # noqa: PLC0415

    def lookup(query: str) -> str:
        return "employee_count: 1200; pto_days: 25"

    def search(query: str) -> str:
        return "\n\n".join(d.page_content for d in store.as_retriever().invoke(query))

    sql = StructuredTool.from_function(lookup, name="sql", description="Query the HR database.",
                                       metadata={"contextjudge": "retrieval"})
    docs = StructuredTool.from_function(search, name="docs", description="Search the docs.",
                                        tags=["contextjudge:retrieval"])
    plan = [("sql", {"query": "select pto_days"}), ("docs", {"query": "paid time off"})]
    agent = create_agent(ScriptedAgentModel(plan=lambda user: plan), [sql, docs])
    session = instrument(metrics=[], mode="off", max_kept=None)
    try:
        agent.invoke({"messages": [{"role": "user", "content": QUESTIONS[0]}]})
        cases = sorted(session.cases, key=lambda c: agent_of(c.test_case)["call"])
    finally:
        uninstrument()
        session.close(5)
    assert [agent_of(c.test_case)["tool"] for c in cases] == ["sql", "docs"]
    [node] = cases[0].test_case.retrieval_context
    assert node.text == "employee_count: 1200; pto_days: 25"
    assert "tool_output_retrieval" not in cases[1].test_case.additional_metadata  # the retriever's own case
    assert cases[1].test_case.retrieval_context[0].id == "pto-001"


def test_result_events_of_both_case_shapes(store, judge):
    """The tutorial graph in a thread: single-turn cases and the conversation are scored, and the result events say
    which is which (``conversation``; a conversation's ``input`` is None)."""
    from langchain_core.callbacks import BaseCallbackHandler  # noqa: PLC0415

    from contextjudge import ConversationalTestCase  # noqa: PLC0415
    from contextjudge.metrics import ContextualRelevancyMetric, TurnContextualRelevancyMetric  # noqa: PLC0415
    from contextjudge_langchain import METRIC_RESULT_EVENT  # noqa: PLC0415

    class Listener(BaseCallbackHandler):
        def __init__(self) -> None:
            self.events: list[dict] = []

        def on_custom_event(self, name, data, **kwargs):
            if name == METRIC_RESULT_EVENT:
                self.events.append(data)

    seen = []

    def on_result(case, result):  # the README's pattern: both shapes
        tc = case.test_case
        seen.append(("conversation", len(tc.turns)) if isinstance(tc, ConversationalTestCase) else ("one", tc.input))

    listener = Listener()
    graph = tutorial_graph(store, ExtractiveChatModel())
    session = instrument(metrics=[ContextualRelevancyMetric(model=judge), TurnContextualRelevancyMetric(model=judge)],
                         on_result=on_result)
    try:
        for q in QUESTIONS:
            graph.invoke({"question": q}, config={"callbacks": [listener], "configurable": {"thread_id": "ana"}})
        assert session.flush(60)
    finally:
        uninstrument()
        session.close(10)
    assert sorted(seen) == sorted([("conversation", 4), ("one", QUESTIONS[0]), ("one", QUESTIONS[1])])
    shapes = sorted((e["conversation"], e["input"], e["metric"]) for e in listener.events)
    assert shapes == [(False, QUESTIONS[1], "Contextual Relevancy"), (False, QUESTIONS[0], "Contextual Relevancy"),
                      (True, None, "Turn Contextual Relevancy")]


# ---------------------------------------------------------------------------------------------------- one-pass results
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore  # noqa: E402

from contextjudge_langchain._vectorstores import SEARCH_METHODS  # noqa: E402

ONE_PASS_DOCS = [Document(f"Policy paragraph {i}.", id=f"doc-{i}") for i in range(5)]
ONE_PASS_SCORES = [0.9, 0.8, 0.7, 0.6, 0.5]


class OnePassStore(VectorStore):
    """A store whose every search hands back a one-pass iterator (a generator, ``zip(docs, scores)``), as some
    integrations' do; the async forms return them from a coroutine."""

    def add_texts(self, texts, metadatas=None, **kwargs):
        raise NotImplementedError

    @classmethod
    def from_texts(cls, texts, embedding, metadatas=None, **kwargs):
        raise NotImplementedError

    def similarity_search(self, query, k=4, **kwargs):
        yield from ONE_PASS_DOCS[:k]

    def similarity_search_with_score(self, query, k=4, **kwargs):
        return zip(ONE_PASS_DOCS[:k], ONE_PASS_SCORES[:k], strict=True)

    def similarity_search_with_relevance_scores(self, query, k=4, **kwargs):
        return ((d, s) for d, s in zip(ONE_PASS_DOCS[:k], ONE_PASS_SCORES[:k], strict=True))

    def similarity_search_by_vector(self, embedding, k=4, **kwargs):
        return (d for d in ONE_PASS_DOCS[:k])

    def max_marginal_relevance_search(self, query, k=4, fetch_k=20, lambda_mult=0.5, **kwargs):
        return iter(ONE_PASS_DOCS[:k])

    def max_marginal_relevance_search_by_vector(self, embedding, k=4, fetch_k=20, lambda_mult=0.5, **kwargs):
        return iter(ONE_PASS_DOCS[:k])

    async def asimilarity_search(self, query, k=4, **kwargs):
        return (d for d in ONE_PASS_DOCS[:k])

    async def asimilarity_search_with_score(self, query, k=4, **kwargs):
        return zip(ONE_PASS_DOCS[:k], ONE_PASS_SCORES[:k], strict=True)

    async def asimilarity_search_with_relevance_scores(self, query, k=4, **kwargs):
        return zip(ONE_PASS_DOCS[:k], ONE_PASS_SCORES[:k], strict=True)

    async def asimilarity_search_by_vector(self, embedding, k=4, **kwargs):
        return iter(ONE_PASS_DOCS[:k])

    async def amax_marginal_relevance_search(self, query, k=4, fetch_k=20, lambda_mult=0.5, **kwargs):
        return iter(ONE_PASS_DOCS[:k])

    async def amax_marginal_relevance_search_by_vector(self, embedding, k=4, fetch_k=20, lambda_mult=0.5, **kwargs):
        return iter(ONE_PASS_DOCS[:k])


@pytest.mark.parametrize("method", sorted(SEARCH_METHODS))
def test_a_one_pass_result_reaches_the_app_whole(session, method):
    """Capture read the iterator to record it and handed the app the spent original: 0 documents in the app, 3 in
    the case. Now the app gets every item the store yielded, in order, and the case records the same."""
    store = OnePassStore()
    query = [0.1, 0.2] if "by_vector" in method else QUESTIONS[0]

    def search(question):
        return list(getattr(store, method)(query, k=3))

    async def asearch(question):
        return list(await getattr(store, method)(query, k=3))

    app_got = (asyncio.run(RunnableLambda(asearch).ainvoke(QUESTIONS[0])) if method.startswith("a")
               else RunnableLambda(search).invoke(QUESTIONS[0]))
    expected = (list(zip(ONE_PASS_DOCS[:3], ONE_PASS_SCORES[:3], strict=True)) if SEARCH_METHODS[method] == "pairs"
                else ONE_PASS_DOCS[:3])
    assert app_got == expected
    [case] = session.cases
    tc = case.test_case
    assert [n.id for n in tc.retrieval_context] == ["doc-0", "doc-1", "doc-2"]
    assert tc.additional_metadata["vector_store_call"] == method
    if SEARCH_METHODS[method] == "pairs":
        assert [n.score for n in tc.retrieval_context] == pytest.approx(ONE_PASS_SCORES[:3])


def test_a_list_is_handed_over_as_the_same_object_and_a_failing_iterator_fails_where_it_did(store, session):
    """A list result is the very list the store made; an iterator that fails part-way gives the app the items before
    the failure, then the store's own error."""
    seen = []
    original = InMemoryVectorStore.__dict__["similarity_search"].__wrapped__

    class Spy(InMemoryVectorStore):
        def similarity_search(self, query, k=4, **kwargs):
            seen.append(original(self, query, k=k, **kwargs))
            return seen[-1]

    spy = Spy(store.embedding)
    spy.add_documents(ONE_PASS_DOCS)
    assert spy.similarity_search(QUESTIONS[0], k=2) is seen[0]

    class Broken(OnePassStore):
        def similarity_search(self, query, k=4, **kwargs):
            yield ONE_PASS_DOCS[0]
            raise ConnectionError("the store went away")

    got = []
    with pytest.raises(ConnectionError, match="went away"):
        for doc in Broken().similarity_search(QUESTIONS[0]):
            got.append(doc)
    assert got == ONE_PASS_DOCS[:1]


def test_reinstrumenting_captures_like_the_first_time_and_uninstrument_leaves_no_wrapper():
    """In a fresh process: a handler instrumented again after ``uninstrument()``, or reused in ``capture(handler=)``,
    captures direct searches again (it did not: its release was never undone); a subclass that copied the patched
    method while instrumented is unwrapped by ``uninstrument()`` (it kept the wrapper)."""
    script = textwrap.dedent("""
        from langchain_core.documents import Document
        from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
        from contextjudge_langchain import ContextJudgeCallbackHandler, capture, instrument, uninstrument
        from contextjudge_langchain import _vectorstores as vs
        from contextjudge_langchain.testing import BagOfWordsEmbeddings

        store = InMemoryVectorStore(BagOfWordsEmbeddings())
        store.add_documents([Document("Employees get 25 days of paid time off.", id="pto")])
        h = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
        for round in range(3):
            instrument(handler=h)
            store.similarity_search("paid time off", k=1)
            uninstrument()
            assert h.flush(10)
            assert len(h.session.cases) == round + 1, (round, len(h.session.cases))
        assert not vs.is_patched()
        with capture(handler=h):
            store.similarity_search("paid time off", k=1)
        assert len(h.session.cases) == 4, len(h.session.cases)
        h.close(5)
        assert not vs.is_patched()

        def wrappers():
            seen, todo = [], [VectorStore]
            while todo:
                cls = todo.pop(); todo.extend(cls.__subclasses__())
                seen += [(cls.__name__, n) for n, v in vars(cls).items() if hasattr(v, "__contextjudge_wrapped__")]
            return seen

        session = instrument(metrics=[], mode="off", max_kept=None)
        class Copy(InMemoryVectorStore):  # copies the patched method in its body
            similarity_search = InMemoryVectorStore.similarity_search
        class Later(InMemoryVectorStore):
            pass
        Later.search = InMemoryVectorStore.similarity_search  # and set on a class later
        assert wrappers()
        uninstrument(); session.close(5)
        assert not vs.is_patched() and wrappers() == [], wrappers()
        assert Copy.similarity_search is InMemoryVectorStore.similarity_search
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

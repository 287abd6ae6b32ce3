"""Issue 17: what LangChain capture records for sampling (chain, tags, metadata, retriever, thread) and for
OpenTelemetry (the request's and the retriever's spans), and results exported as evaluation spans into the app's trace.

The app is a real LCEL chain traced by the OpenTelemetry SDK (in-memory exporter): the request runs inside an app span
and the retriever inside a span of its own, as an instrumented app would have them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextjudge.capture import CHAIN_KEY, RETRIEVER_NAME_KEY, RUN_METADATA_KEY, TAGS_KEY, THREAD_KEY, Sampling
from contextjudge.cases.provenance import OTEL_KEY, otel_of
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.otel import OTelExporter
from contextjudge_langchain import ContextJudgeCallbackHandler, capture
from contextjudge_langchain.testing import ExtractiveChatModel

PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])


def fmt(docs: list[Any]) -> str:
    return "\n\n".join(d.page_content for d in docs)


@pytest.fixture()
def otel():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def traced_chain(retriever: Any, tracer: Any) -> Any:
    """The conftest chain, with the retrieval inside a span of the app's own (as an instrumented retriever is)."""

    def retrieve(question: str, config: Any) -> Any:
        with tracer.start_as_current_span("app.retrieve"):
            return retriever.invoke(question, config)

    return ({"context": RunnableLambda(retrieve) | fmt, "question": RunnablePassthrough()} | PROMPT
            | ExtractiveChatModel()).with_config(run_name="rag")


def by_name(spans: InMemorySpanExporter) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def test_eval_spans_land_in_the_request_trace_linked_to_the_retriever(retriever, judge, otel):
    provider, spans = otel
    tracer = provider.get_tracer("app")
    chain = traced_chain(retriever, tracer)
    # no goldens: precision has no expected_output, so it is an error result (status ERROR)
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge),
                                                   ContextualPrecisionMetric(model=judge)])
    exporter = OTelExporter(provider)
    exporter.attach(handler.session)
    with tracer.start_as_current_span("app.request") as request:
        chain.invoke("Can I bring my dog to the office?",
                     config={"callbacks": [handler], "tags": ["prod"], "metadata": {"tenant": "acme"}})
    assert handler.flush(30)
    handler.close()

    found = by_name(spans)
    request_span, retrieve_span = found["app.request"][0], found["app.retrieve"][0]
    case = handler.session.kept()[0]
    where = otel_of(case.test_case)
    assert where == {"trace_id": format(request.get_span_context().trace_id, "032x"),
                     "span_id": format(request_span.context.span_id, "016x"),
                     "retriever_span_id": format(retrieve_span.context.span_id, "016x"),
                     "trace_flags": int(request_span.context.trace_flags)}

    evals = {s.attributes["evaluations.0.evaluation.name"]: s for s in spans.get_finished_spans()
             if s.name.startswith("contextjudge.eval ")}
    assert len(evals) == 2
    for s in evals.values():
        assert s.context.trace_id == request_span.context.trace_id
        assert s.parent.span_id == request_span.context.span_id
        assert [link.context.span_id for link in s.links] == [retrieve_span.context.span_id]
        assert s.attributes["openinference.span.kind"] == "EVALUATOR"
        assert s.attributes["contextjudge.case_key"] == case.case_id
        assert s.attributes["contextjudge.run_id"] == handler.session.run_id
        assert s.attributes["evaluations.0.evaluation.annotator_kind"] == "LLM"
        assert json.loads(s.attributes["evaluations.0.evaluation.metadata"])["case_key"] == case.case_id
        assert s.events[0].name == "gen_ai.evaluation.result"
    results = {r.name: r for r in case.results}
    ok = next(s for n, s in evals.items() if results[n].error is None)
    bad = next(s for n, s in evals.items() if results[n].error is not None)
    good = results[ok.attributes["evaluations.0.evaluation.name"]]
    assert ok.attributes["evaluations.0.evaluation.score"] == pytest.approx(good.score)
    assert ok.attributes["evaluations.0.evaluation.label"] == ("pass" if good.success else "fail")
    assert ok.attributes["contextjudge.threshold"] == good.threshold
    assert ok.status.status_code is not StatusCode.ERROR
    assert bad.status.status_code is StatusCode.ERROR and "expected_output" in bad.status.description
    assert "evaluations.0.evaluation.score" not in bad.attributes  # missing fields are omitted
    assert "evaluations.0.evaluation.label" not in bad.attributes
    assert "expected_output" in bad.attributes["evaluations.0.evaluation.explanation"]
    assert exporter.exported == 2 and exporter.skipped == 0


def test_sampling_keys_are_recorded_on_every_case(chain, judge):
    with capture(metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None) as session:
        chain.invoke("Can I bring my dog to the office?",
                     config={"tags": ["prod", "beta"], "metadata": {"tenant": "acme"}, "run_name": "faq_chain"})
    case = session.cases[0]
    assert case.metadata[CHAIN_KEY] == "faq_chain"
    assert case.metadata[RETRIEVER_NAME_KEY] == "policy_retriever"
    assert case.metadata[TAGS_KEY] == ["prod", "beta"]
    assert case.metadata[RUN_METADATA_KEY] == {"tenant": "acme"}
    assert THREAD_KEY not in case.metadata
    assert OTEL_KEY not in case.test_case.additional_metadata  # no active span: nothing recorded
    s = Sampling(retrievers=["policy_retriever"], chains=["faq_chain"], tags=["beta"], metadata={"tenant": "acme"})
    assert s.sampled(case)
    assert not Sampling(chains=["other"]).sampled(case)
    session.close()


def test_a_langgraph_thread_is_sampled_whole(retriever, judge):
    langgraph = pytest.importorskip("langgraph.graph")
    from langgraph.checkpoint.memory import InMemorySaver
    from typing_extensions import TypedDict

    class State(TypedDict, total=False):
        question: str
        context: str
        answer: str

    def retrieve(state: State) -> State:
        return {"context": fmt(retriever.invoke(state["question"]))}

    def answer(state: State) -> State:
        return {"answer": state["context"][:80]}

    g = langgraph.StateGraph(State)
    g.add_node("retrieve", retrieve)
    g.add_node("answer", answer)
    g.add_edge(langgraph.START, "retrieve")
    g.add_edge("retrieve", "answer")
    g.add_edge("answer", langgraph.END)
    graph = g.compile(checkpointer=InMemorySaver(), name="support_graph")

    questions = ["Can I bring my dog to the office?", "How many PTO days do I get?", "Who approves expenses?"]
    with capture(metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None) as session:
        for t in range(8):
            for q in questions:
                graph.invoke({"question": q}, config={"configurable": {"thread_id": f"user-{t}"}})
    singles = [c for c in session.cases if c.source != f"thread:{c.metadata.get(THREAD_KEY)}"]
    assert len(singles) == 8 * 3
    for c in singles:
        assert c.metadata[THREAD_KEY].startswith("user-")
        assert c.metadata[CHAIN_KEY] == "support_graph"
        assert c.metadata[RETRIEVER_NAME_KEY] == "policy_retriever"
    sampling = Sampling(rate=0.5)
    by_thread: dict[str, set[bool]] = {}
    for c in session.cases:
        by_thread.setdefault(c.metadata[THREAD_KEY], set()).add(sampling.sampled(c))
    assert all(len(v) == 1 for v in by_thread.values())  # every turn (and the conversation) in, or none
    assert {True, False} == {next(iter(v)) for v in by_thread.values()}  # and the rate does pick some threads
    session.close()


def test_the_session_samples_a_thread_whole(chain, judge):
    """Through the session itself, when it takes sample_rate (the capture core's side of issue 17)."""
    try:
        handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)], mode="off",
                                              max_kept=None, sample_rate=0.5, conversations=False)
    except TypeError:
        pytest.skip("CaptureSession does not take sample_rate yet")
    questions = ["Can I bring my dog to the office?", "How many PTO days do I get?"]
    for t in range(12):
        for q in questions:
            # the thread id only in configurable (LangChain keeps it out of the runs' metadata): read from the config
            chain.invoke(q, config={"callbacks": [handler], "configurable": {"thread_id": f"t{t}"}})
    kept = handler.session.kept()
    per_thread: dict[str, int] = {}
    for c in kept:
        per_thread[c.metadata[THREAD_KEY]] = per_thread.get(c.metadata[THREAD_KEY], 0) + 1
    assert kept and set(per_thread.values()) == {2}  # a sampled thread keeps both of its turns
    assert len(per_thread) < 12
    handler.close()

"""Issue 17: what LlamaIndex capture records for sampling (engine, retriever, tags, conversation) and for
OpenTelemetry (the request's and the retriever's spans), and results exported as evaluation spans into the app's trace.

The app is a real query engine over a VectorStoreIndex, called inside a span of the OpenTelemetry SDK (in-memory
exporter), with its retriever inside a span of its own, as an instrumented retriever is.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.query_engine import CustomQueryEngine
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import contextjudge_llama_index as cj
from contextjudge.capture import CHAIN_KEY, RETRIEVER_NAME_KEY, RUN_METADATA_KEY, TAGS_KEY, THREAD_KEY
from contextjudge.cases.provenance import otel_of
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.otel import OTelExporter


@pytest.fixture()
def otel():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def traced_engine(index: Any, llm: Any, tracer: Any) -> Any:
    """A custom RAG engine that runs its retrieval inside an app span (as an app with its own spans does)."""

    class TracedRAG(CustomQueryEngine):
        retriever: Any
        synthesizer: Any

        def custom_query(self, query_str: str) -> Any:
            with tracer.start_as_current_span("app.retrieve"):
                nodes = self.retriever.retrieve(query_str)
            return self.synthesizer.synthesize(query_str, nodes)

    return TracedRAG(retriever=index.as_retriever(similarity_top_k=2), synthesizer=get_response_synthesizer(llm=llm))


def test_eval_spans_land_in_the_query_trace_linked_to_the_retriever(index, llm, judge, otel):
    provider, spans = otel
    tracer = provider.get_tracer("app")
    engine = cj.EvaluatedQueryEngine(traced_engine(index, llm, tracer),
                                     metrics=[ContextualRelevancyMetric(model=judge),
                                              ContextualPrecisionMetric(model=judge)])  # no golden: an error result
    exporter = OTelExporter(provider)
    exporter.attach(engine.scorer)
    with tracer.start_as_current_span("app.request"):
        engine.query("How many vacation days do employees get per year?")
    assert engine.flush(30)
    case = engine.cases[0]
    engine.close()

    finished = spans.get_finished_spans()
    request = next(s for s in finished if s.name == "app.request")
    retrieve = next(s for s in finished if s.name == "app.retrieve")
    assert otel_of(case.test_case) == {"trace_id": format(request.context.trace_id, "032x"),
                                       "span_id": format(request.context.span_id, "016x"),
                                       "retriever_span_id": format(retrieve.context.span_id, "016x"),
                                       "trace_flags": int(request.context.trace_flags)}
    evals = [s for s in finished if s.name.startswith("contextjudge.eval ")]
    assert len(evals) == 2
    for s in evals:
        assert s.context.trace_id == request.context.trace_id
        assert s.parent.span_id == request.context.span_id
        assert [link.context.span_id for link in s.links] == [retrieve.context.span_id]
        assert s.attributes["openinference.span.kind"] == "EVALUATOR"
        assert s.attributes["contextjudge.case_key"] == case.case_id
    errors = [s for s in evals if s.status.status_code is StatusCode.ERROR]
    assert len(errors) == 1 and errors[0].attributes["contextjudge.metric"] == "Contextual Precision"
    ok = next(s for s in evals if s is not errors[0])
    score = next(r.score for r in case.results if r.name == "Contextual Relevancy")
    assert ok.attributes["evaluations.0.evaluation.score"] == pytest.approx(score)


def test_sampling_keys_are_recorded(index, llm, judge):
    session = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    with cj.instrument_tags({"tenant": "acme"}, conversation_id="chat-7", golden_id="g1"):
        engine.query("How many vacation days do employees get per year?")
    engine.query("When must expense reports be filed?")
    first, second = session.cases
    assert first.metadata[CHAIN_KEY] == "RetrieverQueryEngine"
    assert first.metadata[RETRIEVER_NAME_KEY] == "VectorIndexRetriever"
    assert first.metadata[TAGS_KEY] == ["tenant"]
    assert first.metadata[RUN_METADATA_KEY] == {"tenant": "acme"}  # contextjudge's own tags left out
    assert first.metadata[THREAD_KEY] == "chat-7"
    assert THREAD_KEY not in second.metadata and second.metadata[TAGS_KEY] == []
    assert otel_of(first.test_case) is None  # no active span: nothing recorded
    session.close()


def test_a_chat_session_is_its_thread(index, llm, judge):
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="context", llm=llm),
                                  metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None)
    chat.chat("How many vacation days do employees get per year?")
    chat.chat("And contractors?")
    case = chat.end_session()
    assert case.metadata[THREAD_KEY] == chat.session_id
    assert case.metadata[RETRIEVER_NAME_KEY] == ["VectorIndexRetriever"]
    chat.close()

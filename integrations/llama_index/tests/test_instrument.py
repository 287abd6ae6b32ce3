"""Global capture through LlamaIndex's root dispatcher: every query, retrieval and chat call becomes a test case."""

from __future__ import annotations

import asyncio
import logging

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

import contextjudge_llama_index as cj
from contextjudge import LLMTestCase
from contextjudge.capture import JUDGE_TAG, CaptureSession, result_event
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
)
from contextjudge.testing import FakeJudge
from contextjudge_llama_index import _capture, _record
from contextjudge_llama_index.testing import ExtractiveLLM, KeywordReranker, ReverseReranker

QUESTIONS = {
    "vacation": "How many vacation days do employees get per year?",
    "expenses": "When must expense reports be filed?",
    "security": "Who do I report lost laptops to?",
    "remote": "How many days may employees work remotely?",
    "office": "When does the office open on weekdays?",
}


def _ours(handlers):
    return [h for h in handlers if type(h).__name__.startswith("ContextJudge")]


def test_instrument_adds_handlers_once_and_uninstrument_removes_them(judge):
    root = get_dispatcher()
    cj.instrument(model=judge)
    cj.instrument(model=judge)
    assert len(_ours(root.span_handlers)) == 1
    assert len(_ours(root.event_handlers)) == 1
    assert cj.is_instrumented()
    cj.uninstrument()
    cj.uninstrument()
    assert _ours(root.span_handlers) == [] and _ours(root.event_handlers) == []
    assert not cj.is_instrumented()


def test_every_query_becomes_a_test_case(index, llm, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    response = engine.query(QUESTIONS["vacation"])
    assert scorer.flush(10)

    [case] = scorer.cases
    tc = case.test_case
    assert isinstance(tc, LLMTestCase)
    assert tc.input == QUESTIONS["vacation"]
    assert tc.actual_output == str(response) == "Employees get 25 vacation days per year."
    ranked = [(n.node.node_id, n.score) for n in response.source_nodes]
    assert [(n.id, n.score) for n in tc.retrieval_context] == ranked
    # the chunk's id and the user's Document(id_=...) it came from
    assert tc.retrieval_context[0].metadata == {"topic": "vacation", "source_doc_id": "vacation"}
    assert "25 vacation days" in tc.retrieval_context[0].text
    assert tc.name == QUESTIONS["vacation"]
    assert tc.additional_metadata["engine"] == "RetrieverQueryEngine"
    assert case.metadata["query_span_id"].startswith("RetrieverQueryEngine.query-")
    [(_, result)] = scorer.results
    assert result.name == "Contextual Relevancy" and result.score is not None and result.error is None


def test_retriever_and_chat_engine_calls_are_captured_too(index, llm, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None)
    nodes = index.as_retriever(similarity_top_k=2).retrieve(QUESTIONS["expenses"])
    chat = index.as_chat_engine(chat_mode="condense_plus_context", llm=llm, similarity_top_k=2)
    chat.chat(QUESTIONS["vacation"])
    chat.chat("What about contractors?")

    retrieval, first, follow_up = scorer.cases
    assert retrieval.test_case.input == QUESTIONS["expenses"]
    assert retrieval.test_case.actual_output is None
    assert [n.id for n in retrieval.test_case.retrieval_context] == [n.node.node_id for n in nodes]
    assert first.test_case.additional_metadata["kind"] == "chat"
    # the follow-up was retrieved with a rewritten standalone question: that is what its retrieval is judged on
    meta = follow_up.test_case.additional_metadata
    assert meta["user_message"] == "What about contractors?"
    assert meta["retrieval_query"] == follow_up.test_case.input != "What about contractors?"
    assert "contractor" in follow_up.test_case.input.lower()
    assert follow_up.test_case.actual_output == "Contractors do not receive paid vacation days."


def test_reranker_changing_the_order_keeps_both_rankings(index, llm, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    retriever_order = [n.node.node_id for n in index.as_retriever(similarity_top_k=3).retrieve(QUESTIONS["remote"])]
    engine = index.as_query_engine(llm=llm, similarity_top_k=3, node_postprocessors=[ReverseReranker()])
    response = engine.query(QUESTIONS["remote"])
    assert scorer.flush(10)

    case = scorer.cases[-1].test_case
    final = [n.id for n in case.retrieval_context]
    assert final == [n.node.node_id for n in response.source_nodes] == retriever_order[::-1]
    assert case.additional_metadata["reranked"] is True
    assert [n["id"] for n in case.additional_metadata["retriever_ranking"]] == retriever_order
    assert case.additional_metadata["final_ranking_ids"] == final
    assert scorer.cases[-1].results, "the list that went to the LLM is scored"


def test_keyword_reranker_that_drops_nodes(index, llm, judge):
    scorer = cj.instrument(mode="off", max_kept=None, metrics=[])
    engine = index.as_query_engine(llm=llm, similarity_top_k=4, node_postprocessors=[KeywordReranker(top_n=1)])
    engine.query(QUESTIONS["security"])
    case = scorer.cases[-1].test_case
    assert len(case.retrieval_context) == 1
    assert len(case.additional_metadata["retriever_ranking"]) == 4


def test_streaming_query_is_finalized_when_the_stream_is_exhausted(index, llm, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    engine = index.as_query_engine(llm=llm, similarity_top_k=2, streaming=True)
    response = engine.query(QUESTIONS["expenses"])
    assert type(response).__name__ == "StreamingResponse"
    assert scorer.cases == []  # nothing is final before the user reads the stream
    tokens = list(response.response_gen)
    assert len(tokens) > 1
    assert scorer.flush(10)
    [case] = scorer.cases
    expected = "Expense reports must be filed within 30 days of purchase."
    assert case.test_case.actual_output == "".join(tokens) == expected
    assert case.test_case.additional_metadata["streamed"] is True
    assert case.test_case.additional_metadata["stream_completed"] is True
    assert [n.id for n in case.test_case.retrieval_context] == [n.node.node_id for n in response.source_nodes]
    assert case.results


async def test_async_streaming_query(index, llm, judge):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2, streaming=True)
    response = await engine.aquery(QUESTIONS["office"])
    text = "".join([t async for t in response.async_response_gen()])
    [case] = scorer.cases
    assert case.test_case.actual_output == text == "The office opens at 8am on weekdays."


async def test_thirty_concurrent_aqueries_give_thirty_unmixed_cases(index, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    engine = index.as_query_engine(llm=ExtractiveLLM(delay=0.005), similarity_top_k=2)
    questions = [f"{q} (request {i})" for i in range(6) for q in QUESTIONS.values()]
    assert len(questions) == 30
    responses = await asyncio.gather(*(engine.aquery(q) for q in questions))
    assert await scorer.aflush(20)

    assert len(scorer.cases) == 30
    by_input = {c.test_case.input: c for c in scorer.cases}
    assert len(by_input) == 30
    for question, response in zip(questions, responses, strict=True):
        case = by_input[question].test_case
        assert case.actual_output == str(response)
        assert [n.id for n in case.retrieval_context] == [n.node.node_id for n in response.source_nodes]
    spans = {c.metadata["query_span_id"] for c in scorer.cases}
    assert len(spans) == 30
    assert all(c.results for c in scorer.cases)


def test_instrument_returns_the_capture_session(index, llm, judge):
    session = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    try:
        assert isinstance(session, CaptureSession) and cj.get_session() is session
        assert not hasattr(cj, "get_scorer")  # the name before 0.2 is gone
        index.as_query_engine(llm=llm, similarity_top_k=2).query(QUESTIONS["vacation"])
        assert session.flush(10) and len(session.results) == 1
    finally:
        assert cj.uninstrument() is session
    session.close()


def test_user_event_handler_receives_every_result_event(index, llm, judge):
    got: list = []
    parents: dict[str, str | None] = {}

    class Collector(BaseEventHandler):
        def handle(self, event, **kwargs):
            if isinstance(event, cj.ContextJudgeResultEvent):
                got.append(event)

    class Spans(BaseSpanHandler):
        def new_span(self, id_, bound_args, instance=None, parent_span_id=None, tags=None, **kwargs):
            if "report_contextjudge_result" in id_:
                parents[id_] = parent_span_id

        def prepare_to_exit_span(self, *args, **kwargs):
            return None

        def prepare_to_drop_span(self, *args, **kwargs):
            return None

    root = get_dispatcher()
    root.add_event_handler(Collector())
    root.add_span_handler(Spans())
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge), ContextualPrecisionMetric(model=judge)],
                           goldens=[{"input": QUESTIONS["vacation"], "expected_output": "25 days per year."}])
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    engine.query(QUESTIONS["vacation"])
    engine.query(QUESTIONS["expenses"])  # no golden: precision is an error result, relevancy is scored
    assert scorer.flush(10)

    results = scorer.results
    assert len(results) == 4
    assert [r.name for _, r in results if r.error] == ["Contextual Precision"]
    assert len(got) == len(results)
    assert {(e.case_id, e.metric) for e in got} == {(c.case_id, r.name) for c, r in results}
    for event in got:
        case = next(c for c, _ in results if c.case_id == event.case_id)
        assert case.metadata["query_span_id"] == event.origin_id and "query_span_id" not in type(event).model_fields
        # the one payload of every framework (contextjudge.capture.result_event) are the event's fields
        payload = result_event(case, next(r for c, r in results if c is case and r.name == event.metric))
        assert set(payload) <= set(type(event).model_fields)
        assert event.run_id == scorer.run_id and event.source == case.source
        assert parents[event.span_id] == event.origin_id  # the report span hangs under the query span
        assert (event.score is not None or event.error) and isinstance(event.success, bool)


def test_failure_inside_capture_leaves_the_response_intact(index, llm, judge, monkeypatch, caplog):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    expected = engine.query(QUESTIONS["security"])
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])

    def boom(*args, **kwargs):
        raise RuntimeError("injected capture failure")

    monkeypatch.setattr(_record, "to_nodes", boom)
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        response = engine.query(QUESTIONS["security"])
        assert scorer.flush(10)  # the test case is assembled (and fails) on the scorer's thread, off the request path
    assert str(response) == str(expected)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in expected.source_nodes]
    assert scorer.cases == [], "a case that could not be assembled is dropped"
    assert "injected capture failure" in caplog.text

    # a failure in the handlers themselves, and one while finishing a stream
    monkeypatch.setattr(_capture.Router, "enter", boom)
    assert str(engine.query(QUESTIONS["security"])) == str(expected)
    monkeypatch.undo()
    monkeypatch.setattr(_capture.Router, "_finish", boom)
    streaming = index.as_query_engine(llm=llm, similarity_top_k=2, streaming=True)
    assert "".join(streaming.query(QUESTIONS["security"]).response_gen) == str(expected)


def test_app_exceptions_are_unchanged_and_produce_no_case(index, judge):
    class Broken(ReverseReranker):
        def _postprocess_nodes(self, nodes, query_bundle=None):
            raise ValueError("model is down")

    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    engine = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=2, node_postprocessors=[Broken()])
    with pytest.raises(ValueError, match="model is down"):
        engine.query(QUESTIONS["office"])
    assert scorer.cases == []
    assert _capture.router._spans == {}  # noqa: SLF001 - nothing left behind


def test_modes_deferred_and_off(index, llm, judge):
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode="deferred", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    engine.query(QUESTIONS["office"])
    assert len(scorer.cases) == 1 and scorer.results == [] and judge.calls == []
    result = scorer.score_deferred()
    assert result.test_results[0].metrics_data[0].score is not None
    assert len(scorer.results) == 1

    off = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode="off", max_kept=None)
    calls = len(judge.calls)
    engine.query(QUESTIONS["remote"])
    assert off.flush(5)
    assert len(off.cases) == 1 and off.results == [] and len(judge.calls) == calls
    assert len(scorer.cases) == 1, "the replaced configuration receives nothing more"


def test_goldens_fill_expected_output_by_input_or_tagged_id(index, llm, judge):
    goldens = [
        {"id": "g-vac", "input": QUESTIONS["vacation"], "expected_output": "Employees get 25 vacation days per year."},
        {"id": "g-exp", "input": "expense deadline", "expected_output": "Within 30 days of purchase."},
    ]
    scorer = cj.instrument(metrics=[ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)],
                           goldens=goldens)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    engine.query(QUESTIONS["vacation"].upper())  # matched on normalised input
    with instrument_tags({"golden_id": "g-exp"}):
        engine.query(QUESTIONS["expenses"])  # matched on the golden id
    engine.query(QUESTIONS["office"])  # no golden
    assert scorer.flush(10)

    vac, exp, office = scorer.cases
    assert vac.test_case.expected_output == goldens[0]["expected_output"] and vac.golden_id == "g-vac"
    assert exp.test_case.expected_output == goldens[1]["expected_output"] and exp.golden_id == "g-exp"
    assert office.test_case.expected_output is None
    assert {r.name for r in vac.results} == {"Contextual Precision", "Contextual Recall"}
    # both metrics need expected_output: an error result each, saying what to do (never skipped in silence)
    assert {r.name for r in office.results} == {"Contextual Precision", "Contextual Recall"}
    assert all(r.score is None and "no golden matched" in r.error for r in office.results)


def test_judge_traffic_is_never_captured(index, llm):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    inside: list[str] = []

    class LlamaBackedJudge(FakeJudge):
        """A judge that itself runs LlamaIndex (as a LlamaIndex-LLM judge adapter might) while scoring."""

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            inside.append(str(engine.query("judge-internal lookup about vacation")))
            with instrument_tags({JUDGE_TAG: True}):  # how a LlamaIndex-backed judge marks work it sends elsewhere
                await asyncio.to_thread(engine.query, "judge lookup from an executor thread")
            await llm.acomplete("a judge prompt through a LlamaIndex LLM")
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)

    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=LlamaBackedJudge())])
    engine.query(QUESTIONS["vacation"])
    assert scorer.flush(10)
    assert inside, "the judge ran LlamaIndex while scoring"
    with instrument_tags({JUDGE_TAG: True}):
        engine.query("tagged judge traffic")
    assert [c.test_case.input for c in scorer.cases] == [QUESTIONS["vacation"]]
    assert scorer.cases[0].results


def test_uninstrument_stops_capture(index, llm, judge):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    engine.query(QUESTIONS["office"])
    assert cj.uninstrument() is scorer
    engine.query(QUESTIONS["remote"])
    assert len(scorer.cases) == 1
    assert cj.get_session() is None and cj.flush(60)


def test_results_are_written_to_the_store(index, llm, judge, tmp_path):
    from contextjudge.store import open_store

    path = str(tmp_path / "capture.db")
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], store=path)
    index.as_query_engine(llm=llm, similarity_top_k=2).query(QUESTIONS["vacation"])
    assert scorer.flush(10)
    cj.uninstrument()
    scorer.store.close()
    store = open_store(path)
    try:
        run = store.resolve_run()
        [stored] = store.load_cases(run)
        assert stored.test_case.input == QUESTIONS["vacation"]
        assert [n.id for n in stored.test_case.retrieval_context] == [
            n.id for n in scorer.cases[0].test_case.retrieval_context]
        [result] = store.completed_results(run).values()
        assert result.name == "Contextual Relevancy"
    finally:
        store.close()


def test_rerank_events_from_a_reranker_are_recorded(index, llm):
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent

    dispatcher = get_dispatcher("tests.reranker")

    class EventfulReranker(ReverseReranker):
        """Emits ReRank events like LlamaIndex's model rerankers do."""

        def _postprocess_nodes(self, nodes, query_bundle=None):
            dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=2, model_name="reverse"))
            out = list(reversed(nodes))[:2]
            dispatcher.event(ReRankEndEvent(nodes=out))
            return out

    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    response = index.as_query_engine(llm=llm, similarity_top_k=3,
                                     node_postprocessors=[EventfulReranker()]).query(QUESTIONS["remote"])
    meta = scorer.cases[0].test_case.additional_metadata
    assert meta["reranker_rankings"] == [[n.node.node_id for n in response.source_nodes]]
    assert len(meta["retriever_ranking"]) == 3


def test_scores_changed_in_place_by_a_postprocessor_are_the_final_scores(index, llm):
    class HalveScores(ReverseReranker):
        def _postprocess_nodes(self, nodes, query_bundle=None):
            for n in nodes:
                n.score = n.score / 2
            return nodes

    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    plain = index.as_retriever(similarity_top_k=2).retrieve(QUESTIONS["vacation"])
    response = index.as_query_engine(llm=llm, similarity_top_k=2,
                                     node_postprocessors=[HalveScores()]).query(QUESTIONS["vacation"])
    case = scorer.cases[-1].test_case
    assert [n.score for n in case.retrieval_context] == [n.score for n in response.source_nodes]
    assert [n.score for n in case.retrieval_context] == pytest.approx([n.score / 2 for n in plain])
    assert "reranked" not in case.additional_metadata  # same nodes, same order

"""Scoring modes, results back into LangChain as custom events, and the judge's own calls never captured."""

from __future__ import annotations

import threading
from importlib.metadata import entry_points

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler

from contextjudge import LLMTestCase, evaluate
from contextjudge.capture import CaptureSession, result_event
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)
from contextjudge_langchain import METRIC_RESULT_EVENT, ContextJudgeCallbackHandler, capture, instrument, uninstrument
from contextjudge_langchain._adapter import LangChainAppAdapter, golden_input


class Listener(BaseCallbackHandler):
    """A user's own handler that collects custom events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict, object]] = []
        self.lock = threading.Lock()

    def on_custom_event(self, name, data, *, run_id, tags=None, metadata=None, **kwargs):
        with self.lock:
            self.events.append((name, data, run_id, tags, metadata))


class AsyncListener(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.events: list = []

    async def on_custom_event(self, name, data, *, run_id, **kwargs):
        self.events.append((name, data, run_id))


def four(judge):
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]


def test_instrument_returns_the_capture_session(chain, judge):
    session = instrument(metrics=[ContextualRelevancyMetric(model=judge)])
    try:
        assert isinstance(session, CaptureSession) and session.handler is not None
        chain.invoke("Can I bring my dog to the office?")
        assert session.flush(30) and len(session.results) == 1
    finally:
        assert uninstrument() is session
    assert session.handler.emit_events is True
    with pytest.raises(AttributeError):  # 0.1's handler attributes are no longer forwarded by the session
        session.emit_events  # noqa: B018
    session.close()


def test_custom_event_listener_receives_every_result(chain, goldens, judge):
    listener, alistener = Listener(), AsyncListener()
    handler = ContextJudgeCallbackHandler(metrics=four(judge), goldens=goldens)
    qs = [g["input"] for g in goldens[:5]]
    chain.batch(qs, config={"callbacks": [handler, listener, alistener], "tags": ["app"],
                            "metadata": {"user": "ana"}})
    assert handler.flush(60)
    assert len(handler.results) == 20  # 5 cases x 4 metrics (goldens give expected_output to recall/precision)
    assert len(listener.events) == 20 and len(alistener.events) == 20
    by_case = {c.case_id: c for c in handler.cases}
    for name, data, run_id, tags, metadata in listener.events:
        assert name == METRIC_RESULT_EVENT
        case = by_case[data["case_id"]]
        assert data["origin_id"] == case.root_run_id == str(run_id)
        assert "test_case_id" not in data and "root_run_id" not in data  # 0.1's keys are gone
        assert {"metric", "score", "success", "reason"} <= set(data)
        # the one payload of every framework (contextjudge.capture.result_event)
        assert set(result_event(case, case.results[0])) == set(data)
        assert data["case_id"] == case.case_id and data["origin_id"] == case.root_run_id
        assert data["run_id"] == handler.session.run_id and data["evaluation_model"]
        assert "app" in tags and metadata["user"] == "ana"
    got = sorted((d["case_id"], d["metric"], d["score"]) for _, d, *_ in listener.events)
    want = sorted((c.case_id, r.name, r.score) for c, r in handler.results)
    assert got == want


async def test_custom_events_with_capture_and_astream_events(chain, judge):
    listener = Listener()
    async with capture(metrics=[ContextualRelevancyMetric(model=judge)]) as session:
        await chain.ainvoke("Can I bring my dog to the office?", config={"callbacks": [listener]})
    assert len(session.results) == 1 and [e[0] for e in listener.events] == [METRIC_RESULT_EVENT]


def test_no_events_when_disabled(chain, judge):
    listener = Listener()
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)], emit_events=False)
    chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler, listener]})
    handler.flush(30)
    assert len(handler.results) == 1 and listener.events == []


def test_deferred_and_off_modes_score_nothing_until_asked(chain, judge):
    for mode in ("deferred", "off"):
        handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)], mode=mode,
                                              max_kept=None)
        chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler]})
        assert handler.flush(5) and handler.results == [] and len(handler.test_cases) == 1
        assert judge.count() == 0
        result = handler.score_deferred()
        assert len(result.test_results) == 1 and len(handler.results) == 1
        judge.calls.clear()


def test_background_mode_does_not_wait_for_the_judge(chain, judge):
    gate = threading.Event()

    class SlowJudge(type(judge)):
        def answer(self, request):
            gate.wait(10)
            return super().answer(request)

    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=SlowJudge())])
    chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler]})
    assert not handler.flush(0.05)  # the chain returned while the judge is still busy
    gate.set()
    assert handler.flush(30) and len(handler.results) == 1


def test_judge_calls_are_not_captured(chain, judge):
    case = LLMTestCase(input="Can I bring my dog?", actual_output="Fridays only.", expected_output="Fridays.",
                       retrieval_context=["Dogs are welcome on Fridays only."])
    with capture(metrics=[], mode="off", max_kept=None) as session:
        evaluate([case], four(judge), show_progress=False)
        chain.invoke("Can I bring my dog to the office?")
    assert judge.count() > 0
    assert len(session.cases) == 1 and session.cases[0].source == "policy_retriever"

    # process-wide capture sees every configured run, the judge's included; the judge tag keeps them out
    handler = instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode="background")
    try:
        evaluate([case], four(judge), show_progress=False)
        chain.invoke("Can I bring my dog to the office?")
        assert handler.flush(30)
    finally:
        uninstrument()
    assert [c.source for c in handler.cases] == ["policy_retriever"]
    assert len(handler.results) == 1 and handler.handler._book.is_empty()  # noqa: SLF001


def test_app_adapter_runs_goldens(chain, goldens):
    [ep] = [e for e in entry_points(group="contextjudge.apps") if e.name == "langchain"]
    adapter = ep.load()
    assert isinstance(adapter, LangChainAppAdapter) and adapter.matches(chain) and not adapter.matches(object())
    cases = adapter.collect(chain, goldens, concurrency=4)
    assert len(cases) == len(goldens)
    by_golden = {c.golden_id: c.test_case for c in cases}
    for g in goldens:
        tc = by_golden[g["id"]]
        assert tc.input == g["input"] and tc.expected_output == g["expected_output"] and tc.actual_output
        assert tc.retrieval_context


def test_golden_input_follows_the_input_schema(chain):
    from langchain_core.runnables import RunnableLambda

    assert golden_input(chain, "q?") == "q?"
    typed = RunnableLambda(lambda x: x).with_types(input_type=dict)
    assert golden_input(typed, "q?") == "q?"

    from pydantic import BaseModel

    class In(BaseModel):
        question: str
        user: str = "x"

    assert golden_input(RunnableLambda(lambda x: x).with_types(input_type=In), "q?") == {"question": "q?"}


def test_demo_command_is_registered():
    assert any(e.name == "demo" and e.value == "contextjudge_langchain.demo:main"
               for e in entry_points(group="contextjudge.commands"))


def test_deferred_cases_go_to_the_store(chain, tmp_path, judge):
    from contextjudge.store import open_store

    path = str(tmp_path / "capture.db")
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)], mode="deferred",
                                          store=path)
    for q in ("Can I bring my dog to the office?", "How do I report a phishing email?"):
        chain.invoke(q, config={"callbacks": [handler]})
    handler.flush()
    store = open_store(path)
    run_id = handler.session.run_id
    stored = store.load_cases(run_id)
    assert len(stored) == 2 and len(store.unscored_cases(run_id)) == 2

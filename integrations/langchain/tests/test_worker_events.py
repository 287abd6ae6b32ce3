"""Mode "worker" with LangChain: the app's chain is captured and written for a worker; the worker's results come
back to the app's own callback handlers as the same custom event as in-process scoring."""

from __future__ import annotations

import threading

from langchain_core.callbacks import BaseCallbackHandler

from contextjudge.engine._worker import Worker
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge
from contextjudge_langchain import METRIC_RESULT_EVENT, ContextJudgeCallbackHandler


class Listener(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, dict, object]] = []
        self.lock = threading.Lock()

    def on_custom_event(self, name, data, *, run_id, **kwargs):
        with self.lock:
            self.events.append((name, data, run_id))


def test_a_worker_s_results_come_back_as_langchain_events(chain, tmp_path):
    path = str(tmp_path / "prod.db")
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric()], mode="worker", store=path)
    listener = Listener()
    questions = ["Can I bring my dog to the office?", "How many PTO days do I get?"]
    for q in questions:
        chain.invoke(q, config={"callbacks": [handler, listener]})
    assert handler.session.flush(30)  # written for the worker; nothing judged in the app
    assert listener.events == [] and handler.session.counters["written"] == 2
    store = open_store(path)
    try:
        counts = Worker(store, model=FakeJudge(), cpus=0, nice=0, lease=30).run(once=True)
        assert counts.judged == 2
        assert handler.session.wait_results(30)
    finally:
        store.close()
    events = [e for e in listener.events if e[0] == METRIC_RESULT_EVENT]
    assert len(events) == 2
    assert sorted(e[1]["input"] for e in events) == sorted(questions)
    assert all(e[1]["metric"] == "Contextual Relevancy" and e[1]["score"] is not None for e in events)
    assert all(e[1]["origin_id"] == str(e[2]) for e in events)  # on the root run the case came from
    handler.close()

"""Capture mode "worker": the app only writes cases and queue rows (off its thread, in batches) to a real SQLite
store; a worker's results come back as on_result events; close, exit, two sessions, a running loop.

No test here depends on the machine's speed (issue 48 item 8: three failed with the machine busy): waits are on
conditions, with deadlines (WAIT) far above what any run needs, and a return as soon as the condition holds."""

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from contextjudge import ConfigurationError, LLMTestCase, MetricResult
from contextjudge.capture import THREAD_KEY, CapturedCase, CaptureSession
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

WAIT = 120.0  # seconds: a bound on a wait for a condition, never a figure the test expects


def _case(i, **meta):
    return CapturedCase(LLMTestCase(input=f"What is the refund window {i}?", actual_output="30 days",
                                    retrieval_context=["Refunds are accepted within 30 days.", "Office in Lyon."]),
                        metadata=meta)


def _session(store, **kwargs):
    return CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="worker", store=store, **kwargs)


def _writers():
    return [t for t in threading.enumerate() if t.name == "contextjudge-writer"]


def _wait_for(condition):
    """Return once ``condition()`` holds; fail after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def _fake_worker(store, run_id, owner="w1", limit=1000):
    """What `contextjudge worker` does to the store, in this process: claim the queued cases, complete them."""
    done = 0
    for sc in store.claim(owner, limit=limit, run_id=run_id):
        result = MetricResult(name="Contextual Relevancy", score=0.5, threshold=0.5, success=True,
                              reason=f"judged {sc.case_key}", evaluation_model="fake")
        assert store.complete(owner, run_id, sc.case_key, [result])
        done += 1
    return done


def test_worker_mode_needs_a_store():
    with pytest.raises(ConfigurationError, match=r"mode='worker'.*store="):
        CaptureSession(mode="worker")


def test_cases_and_queue_rows_are_written_off_the_apps_thread_in_batches(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = _session(store, batch=16, handoff_delay=WAIT)  # a batch is written when it fills, not on a timer
    calls = []
    real = store.save_cases_queued

    def recording(run_id, items, **kw):
        calls.append((threading.current_thread().name, len(items)))
        return real(run_id, items, **kw)

    store.save_cases_queued = recording
    for i in range(100):
        session.submit(_case(i))
    assert session.flush(WAIT)
    assert {name for name, _ in calls} == {"contextjudge-writer"}  # the app's thread only appends
    assert sum(n for _, n in calls) == 100 and max(n for _, n in calls) <= 16 and len(calls) <= 20
    assert store.queue_counts(session.run.id)["queued"] == 100
    assert [sc.test_case.input for sc in store.load_cases(session.run.id)][:2] == [
        "What is the refund window 0?", "What is the refund window 1?"]
    c = session.counters
    assert c["seen"] == c["sampled"] == c["written"] == 100 and c["dropped"] == 0 and c["judged"] == 0
    assert session.cases == []  # nobody listens for results: nothing is held after it is written
    # the run names the metrics the worker is to use
    assert [m["class"] for m in store.run_info(session.run.id).config["metrics"]] == ["ContextualRelevancyMetric"]
    assert session.close(WAIT)
    assert not _writers()
    info = store.run_info(session.run.id)
    assert info.status == "captured" and info.summary["counters"]["written"] == 100


def test_results_written_by_a_worker_come_back_as_on_result_events(tmp_path):
    store = open_store(tmp_path / "cj.db")
    events = []
    session = _session(store, poll_interval=0.1, on_result=lambda case, r: events.append((case, r)))
    for i in range(10):
        session.submit(_case(i, **{THREAD_KEY: f"t{i}"}))
    assert session.flush(WAIT)
    assert session.wait_results(0.3) is False  # no worker yet (false however long it waits)
    other = open_store(tmp_path / "cj.db")  # the worker's own connection, as in its own process
    assert _fake_worker(other, session.run.id) == 10
    assert session.wait_results(WAIT)
    assert len(events) == 10 and {r.reason for _, r in events} == {f"judged {c.case_id}" for c, _ in events}
    assert all(case.results and case.metadata[THREAD_KEY] for case, _ in events)
    c = session.counters
    assert c["written"] == 10 and c["results_received"] == 10 and c["judged"] == 10
    assert len(session.results) == 10
    assert session.close(WAIT)
    assert store.run_info(session.run.id).status == "finished"  # the worker did every case of the run


def test_a_slow_store_drops_the_oldest_unwritten_cases_and_counts_them(tmp_path, caplog):
    store = open_store(tmp_path / "cj.db")
    session = _session(store, max_queue=5, batch=2, handoff_delay=0.0)
    gate = threading.Event()
    real = store.save_cases_queued

    def stuck(run_id, items, **kw):
        assert gate.wait(WAIT)  # the store is down
        return real(run_id, items, **kw)

    store.save_cases_queued = stuck
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        session.submit(_case(0))
        _wait_for(lambda: session._mode._writing == 1)  # noqa: SLF001 - the writer holds case 0
        for i in range(1, 30):
            session.submit(_case(i))
            assert len(session._mode._outbox) <= 5  # noqa: SLF001 - memory stays bounded
        gate.set()
        assert session.flush(WAIT)
    c = session.counters
    assert c["written"] == 6 and c["dropped"] == 24 and c["written"] + c["dropped"] == c["seen"] == 30
    kept = sorted(int(sc.test_case.input.split()[-1].rstrip("?")) for sc in store.load_cases(session.run.id))
    assert kept == [0, 25, 26, 27, 28, 29]  # the oldest waiting ones were dropped
    assert sum("not keeping up with the store" in r.getMessage() for r in caplog.records) == 1
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        assert session.close(WAIT)
    assert any("24 case(s) were dropped" in r.getMessage() for r in caplog.records)


def test_a_failing_store_drops_the_batch_counts_it_and_never_raises(tmp_path, caplog):
    store = open_store(tmp_path / "cj.db")
    session = _session(store, handoff_delay=0.0)

    def broken(run_id, items, **kw):
        raise OSError("disk full")

    store.save_cases_queued = broken
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        for i in range(5):
            session.submit(_case(i))
        assert session.flush(WAIT)
    assert session.counters["dropped"] == 5 and session.counters["written"] == 0
    assert sum("could not write" in r.getMessage() and "disk full" in r.getMessage() for r in caplog.records) == 1
    assert session.close(WAIT)


def test_held_cases_stay_bounded(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = _session(store, max_kept=10, on_result=lambda c, r: None, poll_interval=5)
    for i in range(50):
        session.submit(_case(i))
    assert session.flush(WAIT)
    assert session._mode.held <= 10 and len(session.cases) <= 10  # noqa: SLF001
    assert session.counters["written"] == 50 and session.counters["dropped"] == 0
    assert session.close(WAIT)


def test_two_sessions_in_a_row_write_two_runs_and_leave_no_thread(tmp_path):
    path = tmp_path / "cj.db"
    runs = []
    for n in (3, 4):
        session = _session(str(path), sample_rate=1.0)
        for i in range(n):
            session.submit(_case(i))
        assert session.close(WAIT)
        runs.append(session.run.id)
        assert not _writers()
    store = open_store(path)
    assert runs[0] != runs[1]
    assert [len(store.load_cases(r)) for r in runs] == [3, 4]
    assert [store.queue_counts(r)["queued"] for r in runs] == [3, 4]


def test_a_case_after_close_starts_the_writer_again(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = _session(store)
    session.submit(_case(0))
    assert session.close(WAIT)
    session.submit(_case(1))
    assert session.flush(WAIT) and session.close(WAIT)
    assert len(store.load_cases(session.run.id)) == 2 and not _writers()


def test_from_inside_a_running_loop(tmp_path):
    store = open_store(tmp_path / "cj.db")
    events = []

    async def app():
        session = _session(store, poll_interval=0.1, on_result=lambda c, r: events.append(r))
        for i in range(5):
            session.submit(_case(i))  # a request handler of an async app
            await asyncio.sleep(0)
        assert await session.aflush(WAIT)
        await asyncio.to_thread(_fake_worker, open_store(tmp_path / "cj.db"), session.run.id)
        assert await asyncio.to_thread(session.wait_results, WAIT)
        assert session.close(WAIT)  # a sync close from the loop's thread: it never needs an event loop
        return session

    session = asyncio.run(app())
    assert len(events) == 5 and session.counters["written"] == 5


def test_close_writes_what_is_queued_at_once(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = _session(store, handoff_delay=3600.0)  # a writer waiting an hour to fill its batch
    for i in range(3):
        session.submit(_case(i))
    assert session.close(WAIT)  # done long before the hour: close did not wait for the batch to fill
    assert store.queue_counts(session.run.id)["queued"] == 3


def test_at_interpreter_exit_what_is_queued_is_written_and_the_run_ends(tmp_path):
    path = tmp_path / "cj.db"
    script = textwrap.dedent(f"""
        from contextjudge import LLMTestCase
        from contextjudge.capture import CapturedCase, CaptureSession
        from contextjudge.metrics import ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge
        s = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="worker", store={str(path)!r},
                           handoff_delay=30.0)
        for i in range(7):
            s.submit(CapturedCase(LLMTestCase(input=f"q{{i}}", actual_output="a", retrieval_context=["x"])))
        print(s.run.id if s.run.begun else "-")
    """)  # no close(): the app just exits
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    store = open_store(path)
    (run,) = store.list_runs()
    assert store.queue_counts(run.run_id)["queued"] == 7 and run.status == "captured"
    assert run.summary["counters"]["written"] == 7


def test_results_of_a_worker_whose_clock_is_behind_the_apps_still_come_back(tmp_path, monkeypatch):
    """A worker stamps its results with its own clock: the first poll reads the run's results from its start, not
    from the app's "now", so a worker host a minute behind loses nothing; no result is sent twice."""
    import types

    import contextjudge.store._queue as queue_module

    store = open_store(tmp_path / "cj.db")
    events = []
    session = _session(store, poll_interval=0.05, on_result=lambda case, r: events.append((case.case_id, r.name)))
    for i in range(4):
        session.submit(_case(i))
    assert session.flush(WAIT)
    real_time = time.time
    monkeypatch.setattr(queue_module, "time", types.SimpleNamespace(time=lambda: real_time() - 60.0))
    worker_store = open_store(tmp_path / "cj.db")
    assert _fake_worker(worker_store, session.run.id, limit=2) == 2
    _wait_for(lambda: len(events) == 2)
    # the next poll reads the same window again (its overlap) with two new results: the first two are not resent
    assert _fake_worker(worker_store, session.run.id) == 2
    assert session.wait_results(WAIT)
    assert len(events) == 4 and len(set(events)) == 4
    assert session.counters["results_received"] == 4
    assert session.close(WAIT)

"""The worker (engine/_worker/, `contextjudge worker`): claims queued cases, scores them, writes each case's results
once, shares verdicts through the store, skips on a spent budget, stops cleanly; in process and as a real CLI
subprocess on SQLite (one worker per store file). The several-workers-on-PostgreSQL tests are in
tests/test_worker_pg.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fault_server import FaultServer

from contextjudge import LLMTestCase
from contextjudge.engine._score import score_case
from contextjudge.engine._worker import Worker, limit_cpu, metrics_for_run
from contextjudge.errors import BudgetExhaustedError
from contextjudge.judges._context import RunContext
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

ROOT = Path(__file__).resolve().parents[1]
CLI = [str(Path(sys.executable).with_name("contextjudge"))]


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=["Paris is the capital of France.", f"Bananas are yellow (case-{i:03d})."])


def _queued(path_or_url, n: int, run: str = "prod", metrics=("ContextualRelevancyMetric",)):
    store = open_store(path_or_url)
    rid = store.begin_run(run, {"mode": "worker", "metrics": [{"class": c, "threshold": 0.4} for c in metrics]})
    store.save_cases_queued(rid, [(f"k{i:03d}", i, _case(i)) for i in range(n)])
    return store, rid


def test_worker_scores_each_queued_case_once_with_calls_hooks_and_counts(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 12)
    seen = []
    w = Worker(store, [ContextualPrecisionMetric(), ContextualRelevancyMetric()], FakeJudge(), batch=5,
               concurrency=3, cpus=0, nice=0, poll=0.05, on_results=[lambda tc, rs, k, r: seen.append((k, r, len(rs)))])
    counts = w.run(once=True)
    assert counts.judged == 12 and counts.claimed == 12 and counts.lost_lease == 0 and counts.released == 0
    assert sorted(seen) == [(f"k{i:03d}", rid, 2) for i in range(12)]
    res = store.load_run(rid)
    assert all(len(tr.metrics_data) == 2 and all(m.error is None for m in tr.metrics_data) for tr in res.test_results)
    assert store.queue_counts(rid) == {"queued": 0, "claimed": 0, "expired": 0, "done": 12, "skipped": 0}
    assert len(store.judge_calls(rid)) >= 12  # each case's judge calls, written with its results
    # a second worker finds nothing to do; the verdicts are in the store's cache for any later run
    assert Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True).claimed == 0


def test_worker_uses_the_runs_own_metrics_and_thresholds(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 2, metrics=("ContextualRecallMetric",))
    Worker(store, None, FakeJudge(), cpus=0, nice=0).run(once=True)
    got = store.load_run(rid).test_results[0].metrics_data
    assert [(m.name, m.threshold) for m in got] == [("Contextual Recall", 0.4)]
    assert [m.name for m in metrics_for_run({})][:2] == ["Contextual Precision", "Contextual Recall"]
    assert metrics_for_run({}, threshold=0.9)[0].threshold == 0.9


def test_worker_sets_cases_aside_while_the_budget_is_blocked(tmp_path, monkeypatch, caplog):
    store, rid = _queued(str(tmp_path / "q.db"), 4)
    resumes = time.time() + 3600
    monkeypatch.setattr(RunContext, "budget_blocked", lambda self: resumes, raising=False)
    with caplog.at_level("WARNING", logger="contextjudge"):
        counts = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True)
    assert counts.skipped_budget == 4 and counts.judged == 0
    assert store.queue_counts(rid)["skipped"] == 4
    assert sum("budget" in r.getMessage() for r in caplog.records) == 1  # one warning per window
    assert store.load_run(rid).test_results[0].metrics_data == []


def test_requeue_skipped_judges_the_budget_skipped_cases_when_the_window_opens(tmp_path, monkeypatch, capsys):
    store, rid = _queued(str(tmp_path / "q.db"), 4)
    resumes = time.time() + 1.0  # the budget's window "ends" in a second
    monkeypatch.setattr(RunContext, "budget_blocked", lambda self: resumes if time.time() < resumes else None,
                        raising=False)
    lines: list[str] = []
    w = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0, poll=0.05, requeue_skipped=True,
               log=lines.append)
    stop = threading.Event()
    t = threading.Thread(target=w.run, args=(stop,))
    t.start()
    try:
        deadline = time.time() + 20
        while store.queue_counts(rid)["done"] < 4 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(20)
    # set aside while the window was spent, queued again when it opened, then judged
    assert w.counts.skipped_budget == 4 and w.counts.requeued == 4 and w.counts.judged == 4
    assert store.queue_counts(rid)["done"] == 4
    assert any("queued again" in line for line in lines)
    # the summary says how many a budget skipped, and how to judge them
    assert "4 budget-skipped case(s) queued again" in w.summary()
    assert "--requeue-skipped" in w.summary() and "contextjudge score --run" in w.summary()


def test_a_worker_with_requeue_skipped_queues_them_again_at_start_when_the_budget_has_room(tmp_path, monkeypatch):
    store, rid = _queued(str(tmp_path / "q.db"), 3)
    monkeypatch.setattr(RunContext, "budget_blocked", lambda self: time.time() + 3600, raising=False)
    assert Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True).skipped_budget == 3
    monkeypatch.setattr(RunContext, "budget_blocked", lambda self: None, raising=False)
    plain = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True)
    assert plain.judged == 0 and store.queue_counts(rid)["skipped"] == 3  # not asked: they stay set aside
    again = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0, requeue_skipped=True
                   ).run(once=True)
    assert again.requeued == 3 and again.judged == 3 and store.queue_counts(rid)["done"] == 3


@pytest.mark.skipif("budget" not in __import__("inspect").signature(score_case).parameters,
                    reason="score_case(budget=...) is the budgets helper's part and is not in yet")
def test_worker_sets_aside_a_case_whose_judge_call_the_budget_refused(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 3)

    class Broke(ContextualRelevancyMetric):
        async def a_score(self, test_case, *a, **kw):
            raise BudgetExhaustedError("spent", scope="tokens:day", resumes_at=time.time() + 60)

    counts = Worker(store, [Broke()], FakeJudge(), cpus=0, nice=0).run(once=True)
    assert counts.skipped_budget == 3 and store.queue_counts(rid)["skipped"] == 3


def test_stop_gives_back_the_cases_in_hand(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 6)
    with FaultServer(yes_words=["paris"], latency=0.6) as srv:
        from langchain_openai import ChatOpenAI

        judge = ChatOpenAI(model="slow", base_url=srv.url, api_key="x", max_retries=0)
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=6, concurrency=2, cpus=0, nice=0, grace=0.0)
        stop = threading.Event()
        t = threading.Thread(target=w.run, args=(stop,))
        t.start()
        deadline = time.time() + 20
        while not srv.requests and srv._inflight == 0 and time.time() < deadline:
            time.sleep(0.02)
        stop.set()
        t.join(20)
    assert not t.is_alive()
    assert w.counts.claimed == 6 and w.counts.released + w.counts.judged == 6 and w.counts.released >= 4
    c = store.queue_counts(rid)
    assert c["claimed"] == 0 and c["queued"] == w.counts.released


def test_limit_cpu_says_what_it_did():
    assert limit_cpu(0, 0) .startswith("all ")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CONTEXTJUDGE_"))}
    env.update(extra)
    return env


def test_cli_worker_once_on_sqlite_and_one_worker_per_file(tmp_path):
    db = str(tmp_path / "q.db")
    store, rid = _queued(db, 5)
    store.close()
    # a second worker on the same SQLite file is refused while the first holds it
    first = subprocess.Popen([*CLI, "worker", "--store", db, "--model", "fake", "--cpus", "0", "--nice", "0",
                              "--poll", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.time() + 30
        while time.time() < deadline and open_store(db).queue_counts(rid)["done"] < 5:
            time.sleep(0.1)
        second = subprocess.run([*CLI, "worker", "--store", db, "--model", "fake", "--once"], capture_output=True, check=False,
                                text=True, timeout=60, env=_env())
        assert second.returncode == 2, second.stderr
        assert "SQLite allows one worker" in second.stderr and "PostgreSQL" in second.stderr
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert "every run of" in err and "CPU and niceness unchanged" in err  # its startup line
    assert "5 judged" in out
    s = open_store(db)
    assert s.queue_counts(rid)["done"] == 5
    assert all(len(tr.metrics_data) == 1 for tr in s.load_run(rid).test_results)
    # --enqueue-unscored --once: a deferred capture's cases, scored and done
    rid2 = s.begin_run("deferred", {"mode": "deferred"})
    for i in range(3):
        s.save_case(rid2, f"d{i}", i, _case(i))
    done = subprocess.run([*CLI, "worker", "--store", db, "--run", "deferred", "--model", "fake", "--once",
                           "--enqueue-unscored", "--metrics", "contextual_relevancy", "--cpus", "0", "--nice", "0"],
                          capture_output=True, check=False, text=True, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    assert "3 judged" in done.stdout
    assert s.queue_counts(rid2)["done"] == 3


def test_cli_worker_sigterm_releases_what_it_holds(tmp_path):
    db = str(tmp_path / "q.db")
    store, rid = _queued(db, 8)
    with FaultServer(yes_words=["paris"], latency=5.0) as srv:
        p = subprocess.Popen([*CLI, "worker", "--store", db, "--model", "openai:slow-judge", "--cpus", "0", "--nice",
                              "0", "--batch", "8", "--concurrency", "2", "--grace", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=_env(OPENAI_BASE_URL=srv.url, OPENAI_API_KEY="dummy"))
        try:
            deadline = time.time() + 30
            while srv._inflight < 1 and time.time() < deadline:
                time.sleep(0.05)
            assert store.queue_counts(rid)["claimed"] == 8
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 0, err
    assert "SIGTERM" in err and "8 given back" in out
    assert store.queue_counts(rid) == {"queued": 8, "claimed": 0, "expired": 0, "done": 0, "skipped": 0}
    # nothing half-written, and a release does not count as a failed attempt
    assert all(tr.metrics_data == [] for tr in store.load_run(rid).test_results)
    assert all(c.attempts == 1 for c in store.claim("next", limit=8))


def test_a_lease_taken_by_another_worker_cancels_the_case_and_writes_nothing(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 2)
    with FaultServer(yes_words=["paris"], latency=3.0) as srv:
        from langchain_openai import ChatOpenAI

        judge = ChatOpenAI(model="slow", base_url=srv.url, api_key="x", max_retries=0)
        w = Worker(store, [ContextualRelevancyMetric()], judge, lease=0.6, batch=2, concurrency=2, cpus=0, nice=0,
                   grace=0.0)
        stop = threading.Event()
        t = threading.Thread(target=w.run, args=(stop,))
        t.start()
        deadline = time.time() + 20
        while srv._inflight < 1 and time.time() < deadline:
            time.sleep(0.02)
        # as if this worker had stalled past its lease: another one takes both cases
        stolen = store.claim("thief", limit=2, lease=60, now=time.time() + 10)
        assert len(stolen) == 2
        deadline = time.time() + 10
        while w.counts.lost_lease < 2 and time.time() < deadline:
            time.sleep(0.05)
        stop.set()
        t.join(20)
    assert not t.is_alive()
    assert w.counts.lost_lease == 2 and w.counts.judged == 0 and w.counts.released == 0
    assert store.queue_counts(rid)["claimed"] == 2  # still the thief's
    assert store.held("thief", [(rid, "k000"), (rid, "k001")]) == {(rid, "k000"), (rid, "k001")}
    assert all(tr.metrics_data == [] for tr in store.load_run(rid).test_results)


def test_cli_worker_by_default_leaves_a_core_and_runs_nice(tmp_path):
    db = str(tmp_path / "q.db")
    open_store(db).close()
    p = subprocess.run([*CLI, "worker", "--store", db, "--model", "fake", "--once"], capture_output=True, check=False, text=True,
                       timeout=60, env=_env())
    assert p.returncode == 0, p.stderr
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) > 1:
        assert f"{len(usable) - 1} of {len(usable)} CPUs (cores {','.join(map(str, usable[1:]))})" in p.stderr
    assert "nice +10" in p.stderr


def test_a_down_judge_gives_cases_back_instead_of_burning_the_queue(tmp_path, caplog):
    """The judge answers 503 (retries spent: JudgeUnavailableError) for a while: no case is completed with an error
    meanwhile, the worker backs off and warns once; when the judge recovers every case is judged."""
    from fault_server import Fault
    from langchain_openai import ChatOpenAI

    from contextjudge.judges._options import JudgeOptions

    n = 6
    store, rid = _queued(str(tmp_path / "q.db"), n)
    with FaultServer(yes_words=["paris"], faults=[Fault("http", status=503, times=None)]) as srv:
        judge = ChatOpenAI(model="down", base_url=srv.url, api_key="x", max_retries=0)
        opts = JudgeOptions(max_attempts=2, deadline=2.0, backoff_initial=0.01, backoff_max=0.02)
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=3, concurrency=2, cpus=0, nice=0, poll=0.05,
                   judge_options=opts, backoff_max=0.4)
        stop = threading.Event()
        t = threading.Thread(target=w.run, args=(stop,))
        with caplog.at_level("WARNING", logger="contextjudge"):
            t.start()
            try:
                deadline = time.time() + 20
                while w.counts.judge_down < 4 and time.time() < deadline:  # several rounds of the outage
                    time.sleep(0.02)
                assert w.counts.judge_down >= 4
                c = store.queue_counts(rid)
                assert c["done"] == 0 and c["skipped"] == 0, c  # nothing burnt into error results
                assert all(tr.metrics_data == [] for tr in store.load_run(rid).test_results)
                down_requests = len(srv.requests)
                srv.set_faults([])  # the judge is back
                deadline = time.time() + 20
                while store.queue_counts(rid)["done"] < n and time.time() < deadline:
                    time.sleep(0.05)
            finally:
                stop.set()
                t.join(20)
    assert not t.is_alive()
    assert store.queue_counts(rid) == {"queued": 0, "claimed": 0, "expired": 0, "done": n, "skipped": 0}
    assert all(len(tr.metrics_data) == 1 and tr.metrics_data[0].error is None
               for tr in store.load_run(rid).test_results)
    assert w.counts.judged == n and w.counts.errors == 0 and w.counts.released == 0
    assert len(srv.requests) > down_requests
    said = [r.getMessage() for r in caplog.records if "judge is unavailable" in r.getMessage()]
    assert len(said) == 1 and "given back to the queue" in said[0] and "Check the judge" in said[0]
    # the give-backs did not count as attempts: nothing was worn toward max_attempts
    assert store.claim("next", limit=n) == []


def test_an_outage_that_begins_while_cases_are_in_flight_completes_none_with_errors(tmp_path):
    """The independent pass's case: the judge answers, cases are in flight (their judge calls started after others
    were answered), then it goes down for longer than the retries. Before, those cases were completed with error
    results (up to --concurrency per outage); now every one goes back to the queue, its attempt uncounted, and is
    judged when the judge is back."""
    from fault_server import Fault
    from langchain_openai import ChatOpenAI

    from contextjudge.judges._options import JudgeOptions

    n = 16
    store, rid = _queued(str(tmp_path / "q.db"), n)
    with FaultServer(yes_words=["paris"], latency=0.15) as srv:
        judge = ChatOpenAI(model="flaky", base_url=srv.url, api_key="x", max_retries=0)
        opts = JudgeOptions(max_attempts=2, deadline=2.0, backoff_initial=0.01, backoff_max=0.02)
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=4, concurrency=4, cpus=0, nice=0, poll=0.05,
                   judge_options=opts, backoff_max=0.3)
        stop = threading.Event()
        t = threading.Thread(target=w.run, args=(stop,))
        t.start()
        try:
            deadline = time.time() + 30
            while store.queue_counts(rid)["done"] < 3 and time.time() < deadline:
                time.sleep(0.01)
            srv.set_faults([Fault("http", status=503, times=None)])  # down, with cases in flight
            while w.counts.judge_down < 4 and time.time() < deadline:
                time.sleep(0.01)
            assert w.counts.judge_down >= 4
            srv.set_faults([])
            while store.queue_counts(rid)["done"] < n and time.time() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            t.join(20)
    results = [m for tr in store.load_run(rid).test_results for m in tr.metrics_data]
    assert len(results) == n and all(m.error is None and m.score is not None for m in results)
    assert w.counts.errors == 0 and w.counts.judged == n
    assert store.queue_counts(rid)["done"] == n


def test_once_stops_when_the_judge_is_down_and_leaves_the_queue(tmp_path):
    from fault_server import Fault
    from langchain_openai import ChatOpenAI

    from contextjudge.judges._options import JudgeOptions

    store, rid = _queued(str(tmp_path / "q.db"), 4)
    with FaultServer(faults=[Fault("http", status=503, times=None)]) as srv:
        judge = ChatOpenAI(model="down", base_url=srv.url, api_key="x", max_retries=0)
        opts = JudgeOptions(max_attempts=1, deadline=2.0)
        counts = Worker(store, [ContextualRelevancyMetric()], judge, batch=4, concurrency=2, cpus=0, nice=0,
                        judge_options=opts, grace=5).run(once=True)
    assert counts.judge_down >= 1 and counts.judged == 0 and counts.errors == 0
    assert store.queue_counts(rid) == {"queued": 4, "claimed": 0, "expired": 0, "done": 0, "skipped": 0}
    assert all(c.attempts == 1 for c in store.claim("next", limit=4))


_APP = """
import sys
from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, CaptureSession

session = CaptureSession(mode="worker", store=sys.argv[1])
for i in range(3):
    session.submit(CapturedCase(LLMTestCase(input=f"case-{i:03d}: what is the capital of France?",
                                            actual_output="Paris.",
                                            retrieval_context=["Paris is the capital of France.", "Bananas."])))
session.close()
"""


def test_worker_with_model_local_announces_no_default_judge(tmp_path):
    """`contextjudge worker --model local` on cases a capture in mode "worker" wrote: the judge is the one given,
    and neither the app's process nor the worker's says "metrics without model= are judged by ..." (the app's
    process once resolved the default judge while opening its run; the worker hands --model to its run)."""
    db = str(tmp_path / "q.db")
    env = _env(PYTHONWARNINGS="always")
    app = subprocess.run([sys.executable, "-c", _APP, db], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert app.returncode == 0, app.stderr
    w = subprocess.run([*CLI, "worker", "--store", db, "--model", "local", "--once", "--cpus", "0", "--nice", "0"],
                       capture_output=True, text=True, timeout=120, env=env, check=False)
    assert w.returncode == 0, w.stderr
    for out in (app.stderr, w.stderr, w.stdout):
        assert "JudgeChoiceWarning" not in out and "metrics without model=" not in out, out
    assert "3 judged" in w.stdout
    s = open_store(db)
    [run] = s.list_runs()
    results = [m for tr in s.load_run(run.run_id).test_results for m in tr.metrics_data]
    assert results and {m.evaluation_model for m in results} == {"contextjudge-local"}
    assert all(m.error is None for m in results)


def test_a_case_that_crashes_the_scoring_is_set_aside_and_the_worker_goes_on(tmp_path, caplog):
    """Scoring that raises (here: the metrics of one run cannot be built) neither kills the worker loop nor makes it
    claim the same cases forever: each failed claim counts, and after max_attempts the case is set aside."""
    store, good = _queued(str(tmp_path / "q.db"), 3, run="good")
    bad = store.begin_run("bad", {"mode": "worker", "crash": True})
    store.save_cases_queued(bad, [(f"b{i}", i, _case(i)) for i in range(2)])

    def metrics(config):
        if config.get("crash"):
            raise RuntimeError("no metrics for this run")
        return [ContextualRelevancyMetric()]

    with caplog.at_level("ERROR", logger="contextjudge"):
        counts = Worker(store, metrics, FakeJudge(), cpus=0, nice=0, max_attempts=3, poll=0.05).run(once=True)
    assert store.queue_counts(good)["done"] == 3 and counts.judged == 3
    assert store.queue_counts(bad) == {"queued": 0, "claimed": 0, "expired": 0, "done": 0, "skipped": 2,}
    assert counts.errors == 2 * 3 and counts.released == 0
    from contextjudge.store import _schema as S

    with store.engine.connect() as conn:
        notes = {r.note for r in conn.execute(S.queue.select().where(S.queue.c.run_id == bad))}
    assert len(notes) == 1 and "claimed 3 times without finishing" in notes.pop()


def test_a_case_whose_run_is_deleted_while_it_is_scored_writes_nothing(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 2)
    from contextjudge.store import _schema as S

    class DeletesTheRun(ContextualRelevancyMetric):
        async def a_score(self, test_case, *a, **kw):
            result = await super().a_score(test_case, *a, **kw)
            with store.engine.begin() as conn:  # the user drops the run meanwhile (its cases and queue rows go)
                conn.execute(S.runs.delete().where(S.runs.c.run_id == rid))
            return result

    counts = Worker(store, [DeletesTheRun()], FakeJudge(), concurrency=1, cpus=0, nice=0).run(once=True)
    assert counts.claimed == 2 and counts.judged == 0 and counts.lost_lease >= 1 and counts.errors == 0
    with store.engine.connect() as conn:
        assert conn.execute(S.results.select()).all() == [] and conn.execute(S.queue.select()).all() == []


def test_worker_writes_the_cases_scored_meanwhile_in_one_group_commit(tmp_path):
    store, rid = _queued(str(tmp_path / "q.db"), 16)
    batches = []
    plain = store.complete_many

    def slow_complete_many(owner, items):  # a slow commit: the cases scored meanwhile wait for the next one
        batches.append(len(items))
        time.sleep(0.05)
        return plain(owner, items)

    store.complete_many = slow_complete_many
    counts = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), batch=8, concurrency=8, cpus=0, nice=0,
                    poll=0.05).run(once=True)
    assert counts.judged == 16 and counts.lost_lease == 0
    assert sum(batches) == 16 and max(batches) > 1 and len(batches) < 16
    assert store.queue_counts(rid)["done"] == 16
    assert all(len(tr.metrics_data) == 1 for tr in store.load_run(rid).test_results)

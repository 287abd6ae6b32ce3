"""Retention (store/_retention.py, `contextjudge prune`, the worker's schedule): what goes, what stays, on a real
SQLite file and the throwaway PostgreSQL server, and pruning while a real worker claims and writes."""

from __future__ import annotations

import os
import threading
import time

from sqlalchemy import text

from contextjudge import LLMTestCase, MetricResult
from contextjudge.cli import main
from contextjudge.engine._worker import Worker
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

DAY = 86400.0


def _case(i: int, tag: str = "prod") -> LLMTestCase:
    return LLMTestCase(input=f"question {i}: how many vacation days?", actual_output="25 days.",
                       retrieval_context=["Employees get 25 vacation days.", f"Filler {i} " * 20], tags=[tag])


def _aged(store, keys: list[str], days: float) -> None:
    """Move these cases (and their results, verdicts' judge calls) ``days`` into the past: captured then."""
    at = time.time() - days * DAY
    with store.engine.begin() as conn:
        for k in keys:
            conn.execute(text("UPDATE cj_cases SET created_at = :at WHERE case_key = :k"), {"at": at, "k": k})
            conn.execute(text("UPDATE cj_results SET created_at = :at, captured_at = :at WHERE case_key = :k"),
                         {"at": at, "k": k})


def _fill(url: str) -> tuple:
    """An old run (ended, 100 days ago), a production run still running with 40 old and 20 new scored cases, 5 old
    cases still queued, an old labelled case, old judge calls, cache entries and a spend window."""
    store = open_store(url)
    old = store.begin_run("old-run", {"name": "nightly"})
    for i in range(10):
        store.save_case(old, f"o{i}", i, _case(i))
        store.save_result(old, f"o{i}", MetricResult(name="Contextual Relevancy", score=0.5, threshold=0.5,
                                                     success=True, verdicts=[{"verdict": "yes", "reason": "r"}]))
    store.save_judge_call(old, {"judge": "j", "task": "t", "usage": {"input_tokens": 5}})
    store.end_run(old, {})
    prod = store.begin_run("prod", {"name": "prod", "mode": "worker"})
    store.save_cases_queued(prod, [(f"p{i}", i, _case(100 + i)) for i in range(60)], enqueue=False)
    for i in range(60):
        store.save_result(prod, f"p{i}", MetricResult(name="Contextual Relevancy", score=0.7, threshold=0.5,
                                                      success=True))
    store.save_cases_queued(prod, [(f"q{i}", 100 + i, _case(200 + i)) for i in range(5)])
    store.put_verdict("old-key", {"v": 1})
    store.put_verdict("new-key", {"v": 2})
    store.add_labels([{"key": "p0", "labels": [1, 0]}])
    _aged(store, [f"o{i}" for i in range(10)] + [f"p{i}" for i in range(40)] + [f"q{i}" for i in range(5)], 100)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cj_runs SET created_at = :at WHERE run_id = 'old-run'"),
                     {"at": time.time() - 100 * DAY})
        conn.execute(text("UPDATE cj_judge_calls SET created_at = :at"), {"at": time.time() - 100 * DAY})
        conn.execute(text("UPDATE cj_verdict_cache SET created_at = :at WHERE key = 'old-key'"),
                     {"at": time.time() - 100 * DAY})
        conn.execute(text("INSERT INTO cj_spend (scope, \"window\", tokens, dollars, calls, refused, updated_at) "
                          "VALUES ('tokens:day', 0, 10, 0, 1, 0, :at)"), {"at": time.time() - 100 * DAY})
    return store, old, prod


def _count(store, sql: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar())


def _prune_checks(store, old, prod) -> None:
    before = {t: _count(store, f"SELECT count(*) FROM {t}") for t in ("cj_cases", "cj_results", "cj_verdicts")}
    dry = store.prune(older_than="90d", dry_run=True)
    assert dry.dry_run and dry.counts["cases"] == 10 + 39 and dry.counts["results"] == 49
    assert dry.counts["verdicts"] == 10 and dry.counts["judge calls"] == 1 and dry.counts["cache entries"] == 1
    assert dry.counts["spend windows"] == 1 and dry.runs == [old]
    assert dry.kept_pending == 5 and dry.kept_labelled == 1
    assert {t: _count(store, f"SELECT count(*) FROM {t}") for t in before} == before  # nothing changed
    got = store.prune(older_than="90d", batch=7)
    assert got.counts["cases"] == 49 and got.counts["results"] == 49 and got.counts["verdicts"] == 10
    assert got.runs == [old] and got.counts["runs"] == 1
    assert _count(store, "SELECT count(*) FROM cj_runs") == 1
    left = {r[0] for r in store.engine.connect().execute(text("SELECT case_key FROM cj_cases")).all()}
    assert left == {f"p{i}" for i in range(40, 60)} | {f"q{i}" for i in range(5)} | {"p0"}
    assert _count(store, "SELECT count(*) FROM cj_results") == 21  # the 20 new and the labelled one
    assert _count(store, "SELECT count(*) FROM cj_queue WHERE state = 'queued'") == 5
    assert _count(store, "SELECT count(*) FROM cj_labels") == 1
    assert _count(store, "SELECT count(*) FROM cj_verdict_cache") == 1 and store.get_verdict("new-key")
    assert _count(store, "SELECT count(*) FROM cj_judge_calls") == 0 and _count(store, "SELECT count(*) FROM "
                                                                                     "cj_spend") == 0
    # the trend sees only what is left; a second prune finds nothing
    assert sum(m.n for w in store.trend().windows for m in w.metrics.values()) == 21
    assert store.prune(older_than="90d").counts["cases"] == 0
    # --labels: the labelled case and its labels go too
    lab = store.prune(older_than="90d", labels=True)
    assert lab.counts["cases"] == 1 and _count(store, "SELECT count(*) FROM cj_labels") == 1  # labels are new
    assert store.prune(older_than="1s", labels=True, now=time.time() + 10).counts["labels"] == 1


def test_prune_removes_old_cases_with_what_follows_them_and_keeps_labels_and_pending(tmp_path):
    path = str(tmp_path / "old.db")
    store, old, prod = _fill(path)
    with store.engine.begin() as conn:  # make the file big enough that giving pages back shows
        conn.execute(text("UPDATE cj_cases SET data = data || :pad WHERE case_key LIKE 'p%'"), {"pad": " " * 20000})
    _prune_checks(store, old, prod)
    size = os.path.getsize(path)
    assert store.engine.connect().execute(text("PRAGMA auto_vacuum")).scalar() == 2  # incremental, new stores
    assert store.engine.connect().execute(text("PRAGMA freelist_count")).scalar() == 0 and size < 1_500_000


def test_prune_on_postgresql(pg_store):
    store, old, prod = _fill(pg_store.url)
    _prune_checks(store, old, prod)


def test_keep_runs_and_the_cli(tmp_path, capsys):
    path = str(tmp_path / "runs.db")
    store = open_store(path)
    for n in range(4):
        rid = store.begin_run(f"r{n}", {"name": f"nightly-{n}"})
        store.save_case(rid, f"k{n}", 0, _case(n))
        store.end_run(rid, {})
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE cj_runs SET created_at = :t WHERE run_id = :r"), {"t": 1000.0 + n, "r": rid})
    live = store.begin_run("live", {"name": "prod"})  # running: never removed whole
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cj_runs SET created_at = 1 WHERE run_id = 'live'"))
    assert main(["prune", "--store", path, "--keep-runs", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove 2 cases" in out and "2 run(s) whole" in out
    assert main(["prune", "--store", path, "--keep-runs", "2"]) == 0
    assert [r.run_id for r in store.list_runs()] == ["r3", "r2", live]
    assert main(["prune", "--store", path, "--older-than", "90d", "--set"]) == 0
    assert store.retention() == {"older_than": "90d", "keep_runs": None, "labels": False}
    assert main(["prune", "--store", path, "--show"]) == 0 and "90d" in capsys.readouterr().out
    assert main(["prune", "--store", path]) == 2
    assert "--older-than AGE" in capsys.readouterr().err
    assert main(["prune", "--store", path, "--older-than", "ninety days"]) == 2
    assert "'90d'" in capsys.readouterr().err


def _prune_under_a_worker(url: str) -> None:
    """A worker claims and writes 80 new cases (and 10 old ones still queued) while prune runs over and over in
    small batches, and the worker applies the store's retention setting on its own schedule: every new case and
    every queued old case gets its results, and what is old and done goes."""
    store = open_store(url)
    rid = store.begin_run("prod", {"name": "prod", "mode": "worker"})
    store.save_cases_queued(rid, [(f"old{i}", i, _case(i)) for i in range(300)], enqueue=False)
    for i in range(300):
        store.save_result(rid, f"old{i}", MetricResult(name="Contextual Relevancy", score=0.6, threshold=0.5,
                                                       success=True))
    store.save_cases_queued(rid, [(f"oq{i}", 400 + i, _case(400 + i)) for i in range(10)])
    _aged(store, [f"old{i}" for i in range(300)] + [f"oq{i}" for i in range(10)], 120)
    store.save_cases_queued(rid, [(f"new{i}", 1000 + i, _case(1000 + i)) for i in range(80)])
    store.set_retention(older_than="90d")
    # no case is judged before this test's prune loop has pruned twice: the prunes and the worker's claims and
    # writes overlap however fast or slow the machine (a condition, never a speed)
    pruning = threading.Event()

    def verdict(request, item):
        assert pruning.wait(120), "the prune loop never pruned twice"
        return "yes"

    worker = Worker(open_store(url), [ContextualRelevancyMetric()], FakeJudge(default=verdict), batch=4,
                    concurrency=2, cpus=0, nice=0, poll=0.02, prune_every=0.1)
    done = threading.Event()
    pruned: list[int] = []

    def prune_loop() -> None:
        while not done.is_set():
            pruned.append(store.prune(older_than="90d", batch=25).counts.get("cases", 0))
            if len(pruned) >= 2:
                pruning.set()
            time.sleep(0.01)

    t = threading.Thread(target=prune_loop)
    t.start()
    try:
        counts = worker.run(once=True)
    finally:
        done.set()
        t.join(120)
    assert not t.is_alive() and len(pruned) >= 2
    assert counts.judged == 90 and counts.lost_lease == 0 and counts.released == 0
    with store.engine.connect() as conn:
        keys = {r[0] for r in conn.execute(text("SELECT case_key FROM cj_results")).all()}
    assert {f"new{i}" for i in range(80)} <= keys  # nothing that should stay was lost
    assert not {f"old{i}" for i in range(300)} & keys
    # the old queued cases were scored while prune ran (never pruned while pending); they are old and done now
    assert store.queue_counts(rid)["done"] >= 80 and store.queue_counts(rid)["queued"] == 0
    last = store.prune(older_than="90d").counts["cases"]
    assert last == sum(1 for i in range(10) if f"oq{i}" in keys)
    # every old case went once it was done, exactly once: the 300 scored before, the 10 once the worker scored them
    # (by this test's prune loop or the worker's retention thread, whichever came first: both start at once)
    assert sum(pruned) + worker.pruned_cases + last == 310


def test_pruning_while_a_worker_claims_and_writes_loses_nothing_on_sqlite(tmp_path):
    _prune_under_a_worker(str(tmp_path / "live.db"))


def test_pruning_while_a_worker_claims_and_writes_loses_nothing_on_postgresql(pg_store):
    _prune_under_a_worker(pg_store.url)


# ---------------------------------------------------------------------------------------------- budget-skipped cases
def _budget_skipped_hour_old(url: str, monkeypatch):
    """A run an hour old whose 10 cases a real worker set aside on a spent budget (kept for `worker
    --requeue-skipped`), then two newer runs: what `prune --keep-runs 2` and `--older-than` used to remove."""
    from contextjudge.judges._context import RunContext

    store = open_store(url)
    rid = store.begin_run("hour-old", {"name": "prod", "mode": "worker",
                                       "metrics": [{"class": "ContextualRelevancyMetric", "threshold": 0.5}]})
    store.save_cases_queued(rid, [(f"s{i}", i, _case(i)) for i in range(10)])
    monkeypatch.setattr(RunContext, "budget_blocked", lambda self: time.time() + 3600, raising=False)
    counts = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True)
    monkeypatch.undo()
    assert counts.skipped_budget == 10 and store.queue_counts(rid)["skipped"] == 10
    store.end_run(rid, {})
    _aged(store, [f"s{i}" for i in range(10)], 1 / 24)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cj_runs SET created_at = :at WHERE run_id = :r"), {"at": time.time() - 3600,
                                                                                      "r": rid})
    for n in range(2):
        newer = store.begin_run(f"nightly-{n}", {})
        store.save_case(newer, f"n{n}", 0, _case(50 + n))
        store.end_run(newer, {})
    return store, rid


def _skipped_checks(store, rid) -> None:
    for kwargs in ({"keep_runs": 2}, {"older_than": "30m"}, {"older_than": "30m", "keep_runs": 2}):
        dry = store.prune(dry_run=True, **kwargs)
        assert dry.counts.get("cases", 0) == 0 and dry.kept_skipped == 10 and rid not in dry.runs, kwargs
        got = store.prune(**kwargs)
        assert got.counts.get("cases", 0) == 0 and got.kept_skipped == 10 and rid not in got.runs, kwargs
        assert "kept 10 case(s) a spent budget set aside" in got.line()
        assert store.queue_counts(rid)["skipped"] == 10
    # the store's retention setting, as a worker applies it hourly: kept too
    store.set_retention(keep_runs=2)
    assert store.apply_retention().kept_skipped == 10 and store.queue_counts(rid)["skipped"] == 10
    # they are still there for `worker --requeue-skipped`, which scores them when the budget has room
    assert store.requeue_skipped(rid) == 10
    assert Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0).run(once=True).judged == 10


def test_prune_keeps_budget_skipped_cases_for_requeue_on_sqlite(tmp_path, monkeypatch):
    _skipped_checks(*_budget_skipped_hour_old(str(tmp_path / "skipped.db"), monkeypatch))


def test_prune_keeps_budget_skipped_cases_for_requeue_on_postgresql(pg_store, monkeypatch):
    _skipped_checks(*_budget_skipped_hour_old(pg_store.url, monkeypatch))


def test_prune_skipped_says_plainly_that_they_go(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "skipped.db")
    store, rid = _budget_skipped_hour_old(path, monkeypatch)
    assert main(["prune", "--store", path, "--keep-runs", "2"]) == 0
    assert "kept 10 case(s) a spent budget set aside" in capsys.readouterr().out
    assert store.queue_counts(rid)["skipped"] == 10
    assert main(["prune", "--store", path, "--keep-runs", "2", "--skipped"]) == 0
    assert "removed 10 cases" in capsys.readouterr().out and store.queue_counts(rid)["skipped"] == 0
    assert rid not in [r.run_id for r in store.list_runs()]
    store.set_retention(older_than="30m", skipped=True)
    assert store.retention()["skipped"] is True

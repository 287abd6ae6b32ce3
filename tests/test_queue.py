"""The store's work queue (cj_queue) on both backends: claims with leases, renewals, completion in one transaction
only while the lease is held, release, counts, results read back in order, and one worker per SQLite store."""

from __future__ import annotations

import threading

import pytest

from contextjudge import LLMTestCase, MetricResult, RetrievedNode
from contextjudge.errors import StoreError
from contextjudge.store import open_store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = open_store(str(tmp_path / "results.db"))
    else:
        s = request.getfixturevalue("pg_store")  # a wiped store on the session's throwaway cluster (conftest)
    yield s
    s.close()


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"question {i}", actual_output="an answer", expected_output="the answer",
                       retrieval_context=[RetrievedNode(f"node {i} a", id=f"a{i}"), f"node {i} b"])


def _fill(store, n: int = 5, run: str = "r1") -> str:
    rid = store.begin_run(run, {"mode": "worker"})
    store.save_cases_queued(rid, [(f"k{i}", i, _case(i)) for i in range(n)])
    return rid


def _result(name: str = "Contextual Precision", score: float = 0.75) -> MetricResult:
    return MetricResult(name=name, score=score, threshold=0.5, success=score >= 0.5, reason="because",
                        verdicts=[{"id": "n1", "verdict": "yes", "reason": "fits", "rank": 1}])


def test_save_cases_queued_stores_cases_nodes_and_rows_once(store):
    rid = _fill(store, 3)
    store.save_cases_queued(rid, [("k0", 0, _case(0)), ("k3", 3, _case(3))])  # k0 again: no change
    cases = store.load_cases(rid)
    assert [c.case_key for c in cases] == ["k0", "k1", "k2", "k3"]
    assert [n.text for n in cases[0].test_case.retrieval_context] == ["node 0 a", "node 0 b"]
    assert store.queue_counts(rid) == {"queued": 4, "claimed": 0, "expired": 0, "done": 0, "skipped": 0}
    store.save_cases_queued(rid, [("k9", 9, _case(9))], enqueue=False)
    assert store.queue_counts(rid)["queued"] == 4


def test_claim_in_order_with_leases_and_expiry(store):
    rid = _fill(store, 5)
    a = store.claim("A", limit=2, lease=10, now=1000.0)
    assert [(c.run_id, c.case_key) for c in a] == [(rid, "k0"), (rid, "k1")]
    assert a[0].test_case.input == "question 0" and a[0].attempts == 1
    b = store.claim("B", limit=10, lease=10, now=1001.0)
    assert [c.case_key for c in b] == ["k2", "k3", "k4"]
    assert store.claim("B", limit=10, lease=10, now=1005.0) == []
    # A's lease passes: B may take its cases; A may no longer complete them
    again = store.claim("B", limit=10, lease=10, now=1011.0)
    assert [c.case_key for c in again] == ["k0", "k1"] and again[0].attempts == 2
    assert store.complete("A", rid, "k0", [_result()]) is False
    assert store.load_run(rid).test_results[0].metrics_data == []
    assert store.complete("B", rid, "k0", [_result()]) is True
    assert store.complete("B", rid, "k0", [_result(score=0.1)]) is False  # done: never written twice
    got = store.load_run(rid).test_results[0].metrics_data
    assert [(m.name, m.score) for m in got] == [("Contextual Precision", 0.75)]
    assert got[0].verdicts[0]["reason"] == "fits"


def test_renew_keeps_the_lease_and_counts_what_is_held(store):
    rid = _fill(store, 2)
    store.claim("A", limit=2, lease=10, now=1000.0)
    assert store.renew("A", [(rid, "k0"), (rid, "k1")], lease=10, now=1008.0) == 2
    assert store.claim("B", limit=5, lease=10, now=1012.0) == []  # renewed until 1018
    assert store.renew("B", [(rid, "k0")], lease=10, now=1012.0) == 0
    got = store.claim("B", limit=5, lease=10, now=1019.0)
    assert len(got) == 2
    assert store.renew("A", [(rid, "k0"), (rid, "k1")], now=1019.5) == 0
    assert store.held("B", [(rid, "k0"), (rid, "k1"), (rid, "zz")]) == {(rid, "k0"), (rid, "k1")}


def test_complete_is_one_transaction_with_judge_calls(store):
    rid = _fill(store, 1)
    [c] = store.claim("A")
    calls = [{"judge": "j", "task": "relevance", "metric": "Contextual Precision", "cached": False,
              "usage": {"calls": 1, "input_tokens": 100, "output_tokens": 10, "seconds": 0.5}, "method": "json"}]
    assert store.complete("A", rid, c.case_key, [_result(), _result("Contextual Recall", 0.2)], judge_calls=calls)
    assert store.queue_counts(rid)["done"] == 1
    assert store.usage(rid).input_tokens == 100
    # a failure in the middle of the writes leaves nothing: neither the results nor the row marked done
    rid2 = _fill(store, 1, run="r2")
    [c2] = store.claim("A", run_id=rid2)
    bad = _result()
    bad.threshold = "not a number"  # float() fails while the rows are built, after the row was marked done
    with pytest.raises((TypeError, ValueError)):
        store.complete("A", rid2, c2.case_key, [_result("Contextual Recall"), bad])
    assert store.queue_counts(rid2)["claimed"] == 1
    assert store.load_run(rid2).test_results[0].metrics_data == []


def test_release_queued_or_skipped_and_attempts(store):
    rid = _fill(store, 3)
    got = store.claim("A", limit=3)
    assert store.release("A", rid, got[0].case_key) is True
    assert store.release("B", rid, got[1].case_key) is False  # not B's
    assert store.release("A", rid, got[1].case_key, state="skipped", note="budget") is True
    counts = store.queue_counts(rid)
    assert (counts["queued"], counts["claimed"], counts["skipped"]) == (1, 1, 1)
    again = store.claim("B", limit=3)
    assert [c.case_key for c in again] == ["k0"] and again[0].attempts == 1  # a release does not count
    with pytest.raises(StoreError):
        store.release("B", rid, "k0", state="done")


def test_a_case_claimed_too_often_is_skipped(store):
    rid = _fill(store, 1)
    for t in range(3):
        assert len(store.claim(f"W{t}", lease=1, now=1000.0 + 10 * t, max_attempts=3)) == 1
    assert store.claim("W9", lease=1, now=1100.0, max_attempts=3) == []
    assert store.queue_counts(rid)["skipped"] == 1


def test_counts_expired_and_run_filter(store):
    r1 = _fill(store, 2, run="r1")
    r2 = _fill(store, 2, run="r2")
    store.claim("A", limit=1, run_id=r2, lease=0.0, now=1.0)  # long expired
    assert store.queue_counts(r2) == {"queued": 1, "claimed": 0, "expired": 1, "done": 0, "skipped": 0}
    assert store.queue_counts()["queued"] == 3
    assert {c.run_id for c in store.claim("B", limit=9, run_id=r1)} == {r1}


def test_enqueue_stored_cases_only_unscored(store):
    rid = store.begin_run("r1", {})
    for i in range(4):
        store.save_case(rid, f"k{i}", i, _case(i))
    store.save_result(rid, "k1", _result())
    assert store.enqueue(rid) == 3
    assert store.enqueue(rid) == 0
    assert store.enqueue(rid, ["k1"], only_unscored=False) == 1
    assert store.queue_counts(rid)["queued"] == 4
    assert [c.case_key for c in store.claim("A", limit=9)] == ["k0", "k1", "k2", "k3"]


def test_enqueue_many_keys_in_position_order(store):
    rid = store.begin_run("r1", {})
    store.save_cases_queued(rid, [(f"k{i:04d}", 1200 - i, _case(i)) for i in range(1200)], enqueue=False)
    assert store.enqueue(rid, [f"k{i:04d}" for i in range(0, 1200, 2)] + ["nope"]) == 600  # keys in batches
    assert store.enqueue(rid) == 600
    got = store.claim("A", limit=3)
    # in the order they were queued: the first call's cases first, each call's by position
    assert [c.case_key for c in got] == ["k1198", "k1196", "k1194"]


def test_complete_after_the_run_was_deleted_writes_nothing(store):
    from contextjudge.store import _schema as S

    rid = _fill(store, 1)
    [c] = store.claim("A")
    with store.engine.begin() as conn:
        conn.execute(S.runs.delete().where(S.runs.c.run_id == rid))
    assert store.complete("A", rid, c.case_key, [_result()]) is False
    assert store.release("A", rid, c.case_key) is False
    with store.engine.connect() as conn:
        assert conn.execute(S.results.select()).all() == []
    assert store.claim("B") == []


def test_a_failed_release_counts_the_attempt(store):
    rid = _fill(store, 1)
    for t in range(2):
        [c] = store.claim(f"W{t}", max_attempts=2)
        assert store.release(f"W{t}", rid, c.case_key, failed=True, note="boom") is True
    assert store.claim("W9", max_attempts=2) == []
    assert store.queue_counts(rid)["skipped"] == 1


def test_results_since_in_order(store):
    rid = _fill(store, 3)
    got = store.claim("A", limit=3)
    store.complete("A", rid, got[0].case_key, [_result()])
    rows = store.results_since(rid, 0.0)
    assert [(k, r.name, r.score) for k, r, _ in rows] == [("k0", "Contextual Precision", 0.75)]
    assert rows[0][1].verdicts[0]["verdict"] == "yes"
    t = rows[0][2]
    store.complete("A", rid, got[2].case_key, [_result(score=0.5)])
    assert [k for k, _, _ in store.results_since(rid, t)] == ["k2"]


def test_two_claimers_never_share_a_case(store):
    rid = _fill(store, 60)
    if store.is_sqlite:
        others = [store] * 4
    else:
        others = [open_store(store.url) for _ in range(4)]
    seen: list[list[str]] = [[] for _ in others]

    def take(i: int, s) -> None:
        while True:
            got = s.claim(f"W{i}", limit=3)
            if not got:
                return
            seen[i] += [c.case_key for c in got]

    threads = [threading.Thread(target=take, args=(i, s)) for i, s in enumerate(others)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [k for part in seen for k in part]
    assert sorted(every) == sorted(f"k{i}" for i in range(60))
    assert store.queue_counts(rid)["claimed"] == 60


def test_sqlite_allows_one_worker_slot(tmp_path):
    s = open_store(str(tmp_path / "one.db"))
    other = open_store(str(tmp_path / "one.db"))
    with s.worker_slot("first"), pytest.raises(StoreError, match="SQLite allows one worker"), \
            other.worker_slot("second"):
        pass
    with other.worker_slot("second"):
        pass


def test_postgres_allows_many_worker_slots(pg_url):
    a, b = open_store(pg_url), open_store(pg_url)
    with a.worker_slot("a"), b.worker_slot("b"):
        pass


def test_complete_many_writes_only_the_cases_still_held_in_one_transaction(store):
    rid = _fill(store, 5)
    a = store.claim("A", limit=3, lease=60)
    [b] = store.claim("B", limit=1, lease=60)
    calls = [{"judge": "j", "task": "relevance", "metric": "Contextual Precision", "cached": False,
              "usage": {"calls": 1, "input_tokens": 7, "output_tokens": 1, "seconds": 0.1}, "method": "json"}]
    got = store.complete_many("A", [
        (rid, a[0].case_key, [_result(), _result("Contextual Recall", 0.2)], calls),
        (rid, b.case_key, [_result()], calls),                      # B holds it: not written
        (rid, a[1].case_key, [_result(score=0.1), _result(score=0.9)], []),  # a metric twice: the last one kept
        (rid, a[0].case_key, [_result(score=0.0)], calls),         # the same case again: written once
    ])
    assert got == [True, False, True, False]
    assert store.queue_counts(rid) == {"queued": 1, "claimed": 2, "expired": 0, "done": 2, "skipped": 0}
    [c] = store.claim("A", limit=1, lease=60)
    scores: dict = {}
    for r in store.results(run=rid):
        scores.setdefault(r["case_key"], []).append((r["metric"], r["score"]))
    assert sorted(scores[a[0].case_key]) == [("Contextual Precision", 0.75), ("Contextual Recall", 0.2)]
    assert scores[a[1].case_key] == [("Contextual Precision", 0.9)]
    assert b.case_key not in scores and a[2].case_key not in scores
    verdicts = [len(m.verdicts or []) for tr in store.load_run(rid).test_results for m in tr.metrics_data]
    assert verdicts == [1, 1, 1]  # each result's verdicts, once (the replaced result's dropped)
    assert store.usage(rid).input_tokens == 7  # only the written case's judge calls
    # a failure in any case's writes leaves nothing of the batch: no results, no row marked done
    bad = _result()
    bad.threshold = "not a number"
    with pytest.raises((TypeError, ValueError)):
        store.complete_many("A", [(rid, a[2].case_key, [_result()], []), (rid, c.case_key, [bad], [])])
    assert store.queue_counts(rid)["claimed"] == 3
    assert {r["case_key"] for r in store.results(run=rid)} == {a[0].case_key, a[1].case_key}
    assert store.complete_many("B", [(rid, b.case_key, [_result()], [])]) == [True]
    assert store.complete_many("A", []) == []

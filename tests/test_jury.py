"""A jury of judges (issue 37): every juror answers every item through its own judge client (cache, spend, budget),
the verdict aggregates theirs (majority, mean, weighted), each verdict keeps every juror's, and calibrate measures
each juror's agreement beside the jury's."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from contextjudge import LLMTestCase, evaluate
from contextjudge.cases.labels import with_labels
from contextjudge.engine._calibrate import calibrate
from contextjudge.engine._estimate import estimate
from contextjudge.errors import ConfigurationError
from contextjudge.judges import JudgeOptions, Jury, resolve_model
from contextjudge.judges._spend import Budget
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.store import _schema as S
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = ["Fact: the refund window is 30 days.", "Distractor: refunds are popular.", "Noise: the office is in Lyon.",
         "Fact: refunds go to the original card."]
TRUTH = [True, False, False, True]


def _case(i=0):
    return LLMTestCase(id=f"c{i}", input=f"How do refunds work? ({i})", actual_output="30 days, to the card.",
                       expected_output="Refunds within 30 days go to the original card.", retrieval_context=NODES)


def right():
    return FakeJudge(rules={"Fact": "yes"}, default="no", model_name="right")


def fooled():  # says yes to the distractor too
    return FakeJudge(rules={"Fact": "yes", "Distractor": "yes"}, default="no", model_name="fooled")


def yes_man():
    return FakeJudge(default="yes", model_name="yes-man")


def _verdicts(judge, cases=None, **kw):
    res = evaluate(cases or [_case()], [ContextualPrecisionMetric(model=judge, include_reason=False)],
                   show_progress=False, **kw)
    return res, res.test_results[0].metrics_data[0]


def test_majority_keeps_every_jurors_verdict():
    _, m = _verdicts(Jury([right(), fooled(), yes_man()]))
    assert m.error is None
    got = {v["id"]: v for v in m.verdicts}
    assert [got[f"n{k}"]["verdict"] for k in range(1, 5)] == ["yes", "yes", "no", "yes"]
    assert got["n2"]["jurors"] == {"right": {"verdict": "no", "confidence": None},
                                   "fooled": {"verdict": "yes", "confidence": None},
                                   "yes-man": {"verdict": "yes", "confidence": None}}
    assert got["n3"]["confidence"] == pytest.approx(1 / 3)
    assert m.evaluation_model == "jury[majority](right, fooled, yes-man)"


def test_mean_and_weighted_aggregates_and_a_tie_goes_to_the_foreperson():
    _, m = _verdicts(Jury([right(), yes_man()], aggregate="majority"))  # 1-1 ties everywhere but the facts
    assert [v["verdict"] for v in m.verdicts] == ["yes", "no", "no", "yes"]
    _, m = _verdicts(Jury([yes_man(), right()], aggregate="mean"))  # mean 0.5 -> yes
    assert [v["verdict"] for v in m.verdicts] == ["yes", "yes", "yes", "yes"]
    _, m = _verdicts(Jury([yes_man(), right()], aggregate="weighted", weights=[1, 3]))
    assert [v["verdict"] for v in m.verdicts] == ["yes", "no", "no", "yes"]
    with pytest.raises(ConfigurationError, match="one per juror"):
        Jury([right(), fooled()], aggregate="weighted", weights=[1.0])
    with pytest.raises(ConfigurationError, match="at least two jurors"):
        Jury([right()])
    with pytest.raises(ConfigurationError, match="aggregate must be one of"):
        Jury([right(), fooled()], aggregate="median")


def test_a_model_string_names_a_jury(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    pytest.importorskip("langchain_openai")
    jury = resolve_model("jury:local,openai:gpt-4o-mini")
    assert isinstance(jury, Jury) and jury.aggregate == "majority"
    assert [type(j).__name__ for j in jury.jurors] == ["LocalJudge", "ChatOpenAI"]
    assert resolve_model("jury[mean]:local,openai:gpt-4o-mini").aggregate == "mean"
    with pytest.raises(ConfigurationError, match="at least two jurors"):
        resolve_model("jury:local")


def test_every_jurors_calls_are_recorded_cached_and_budgeted(tmp_path):
    store = str(tmp_path / "cj.db")
    a, b, c = right(), fooled(), yes_man()
    cases = [_case(i) for i in range(3)]
    evaluate(cases, [ContextualPrecisionMetric(model=Jury([a, b, c]))], store=store, show_progress=False)
    assert (len(a.calls), len(b.calls), len(c.calls)) == (3, 3, 3)
    s = open_store(store)
    with s.engine.connect() as conn:
        rows = dict(conn.execute(select(S.judge_calls.c.judge, func.count()).group_by(S.judge_calls.c.judge)).all())
    assert rows == {"right": 3, "fooled": 3, "yes-man": 3}  # each juror's spend under its own name
    # the verdict cache of the store: a second run asks no juror again
    evaluate(cases, [ContextualPrecisionMetric(model=Jury([a, b, c]))], store=store, show_progress=False)
    assert (len(a.calls), len(b.calls), len(c.calls)) == (3, 3, 3)
    # a call budget counts every juror: 4 calls allow one case's jury (3 calls), not a second
    res = evaluate([_case(i) for i in range(10, 12)],
                   [ContextualPrecisionMetric(model=Jury([right(), fooled(), yes_man()]))], show_progress=False,
                   judge_options=JudgeOptions(budget=Budget(calls_per_day=4), max_concurrency=1))
    errors = [m.error_type for tr in res.test_results for m in tr.metrics_data]
    assert errors.count(None) == 1, errors


def test_estimate_counts_every_juror():
    one = estimate([_case()], ["contextual_precision"], model="gpt-4o-mini")
    jury = estimate([_case()], ["contextual_precision"], model="jury:gpt-4o-mini,gpt-4o-mini,local")
    # the same prompt three times; the embedded juror sends no answer schema (a provider bills the others' as input)
    assert one.schema_tokens > 0 and jury.schema_tokens == 2 * one.schema_tokens
    assert jury.calls == 3 * one.calls and jury.input_tokens == 3 * one.input_tokens - one.schema_tokens
    assert jury.dollars == pytest.approx(2 * one.dollars)  # the embedded judge costs nothing
    assert set(jury.jurors) == {"gpt-4o-mini#1", "gpt-4o-mini#2", "local"}


def _labelled(n=8):
    return [with_labels(_case(i), {"labels": TRUTH}) for i in range(n)]


def test_calibrate_shows_each_jurors_agreement_beside_the_jurys():
    jury = Jury([right(), fooled(), yes_man()])
    report = calibrate(_labelled(), jury, resamples=200)
    fam = report["node_usefulness"]
    assert set(fam["jurors"]) == {"right", "fooled", "yes-man"}
    for name, judge in (("right", right()), ("fooled", fooled()), ("yes-man", yes_man())):
        alone = calibrate(_labelled(), judge, resamples=200)["node_usefulness"]
        assert fam["jurors"][name]["kappa"] == alone["kappa"] and fam["jurors"][name]["tpr"] == alone["tpr"]
    assert fam["jurors"]["right"]["kappa"] == 1.0 and fam["kappa"] == pytest.approx(
        calibrate(_labelled(), fooled(), resamples=200)["node_usefulness"]["kappa"])
    # weights from the jurors' agreement with the labels: the right juror outvotes the two others
    weights = Jury.weights_from([calibrate(_labelled(), j, resamples=200) for j in (right(), fooled(), yes_man())])
    assert weights["node_usefulness"][0] == 1.0 and weights["node_usefulness"][2] == 0.0
    weighted = Jury([right(), fooled(), yes_man()], aggregate="weighted", weights=weights)
    assert calibrate(_labelled(), weighted, resamples=200)["node_usefulness"]["kappa"] == 1.0


def test_calibrate_cli_and_page_show_the_jurors(tmp_path, capsys):
    from contextjudge.report._calibration import render_calibration

    report = calibrate(_labelled(), Jury([right(), fooled()]), resamples=200)
    page = render_calibration(report)
    assert "Each juror and the jury" in page and "fooled" in page
    from contextjudge.cli._trust import _print_calibration

    _print_calibration(report, 0)
    out = capsys.readouterr().out
    assert "each juror against your labels" in out and "right" in out and "fooled" in out


def test_a_failing_juror_fails_the_item_never_a_silent_smaller_jury():
    broken = FakeJudge(failures=[ValueError("boom")] * 20, model_name="broken")
    _, m = _verdicts(Jury([right(), broken]), judge_options=JudgeOptions(max_attempts=1))
    assert m.score is None and m.error


def test_a_jurors_confidence_is_in_its_own_verdict_never_a_vote_for_yes():
    """Issue 48 item 6: ``{"verdict": "no", "confidence": 1.0}`` is a juror sure of no; it was read as a chance of
    yes of 1.0, so a mean jury said yes to everything."""
    sure_no = FakeJudge(style="json", rules={"": "no"}, confidences={"": 1.0}, model_name="sure-no")
    _, m = _verdicts(Jury([right(), sure_no], aggregate="mean"))
    assert [v["verdict"] for v in m.verdicts] == ["yes", "no", "no", "yes"]  # facts: (1 + 0) / 2 -> yes
    assert [v["confidence"] for v in m.verdicts] == [0.5, 0.0, 0.0, 0.5]
    # the embedded judge's way (a chance of yes on the side of its verdict) reads the same
    low_no = FakeJudge(style="json", rules={"": "no"}, confidences={"": 0.0}, model_name="low-no")
    _, m = _verdicts(Jury([right(), low_no], aggregate="mean"))
    assert [v["verdict"] for v in m.verdicts] == ["yes", "no", "no", "yes"]
    # a sure yes-man still counts fully for yes; a 0.8-sure no beside it makes a mean of 0.5 (yes) only on a tie
    sure_yes = FakeJudge(style="json", rules={"": "yes"}, confidences={"": 0.9}, model_name="sure-yes")
    fairly_no = FakeJudge(style="json", rules={"": "no"}, confidences={"": 0.8}, model_name="fairly-no")
    _, m = _verdicts(Jury([sure_yes, fairly_no], aggregate="mean"))
    assert [v["confidence"] for v in m.verdicts] == [pytest.approx(0.55)] * 4
    # majority's tie goes to the mean of the same chances: a sure no beats an unsure yes
    unsure_yes = FakeJudge(style="json", rules={"": "yes"}, confidences={"": 0.6}, model_name="unsure-yes")
    _, m = _verdicts(Jury([unsure_yes, sure_no], aggregate="majority"))
    assert [v["verdict"] for v in m.verdicts] == ["no"] * 4

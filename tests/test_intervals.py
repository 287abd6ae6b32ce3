"""Intervals on every aggregate of a result: the mean's (Student t, repeat spread folded in), the pass rate's
(Wilson), the bias-corrected mean (PPI) from gold scores, and the same figures from a run that kept only totals."""

from __future__ import annotations

import pytest

from contextjudge._result import EvaluationResult, MetricResult, Tally, TestResult
from contextjudge.stats import ppi_mean

P = "Contextual Precision"


def _result(scores, *, gold=None, spread=None, threshold=0.5, errors=0):
    trs = []
    for i, s in enumerate(scores):
        m = MetricResult(name=P, score=s, threshold=threshold, success=s >= threshold)
        m.gold_score = None if gold is None else gold[i]
        m.score_spread = None if spread is None else spread[i]
        trs.append(TestResult(index=i, name=None, test_case=None, metrics_data=[m]))
    for j in range(errors):
        m = MetricResult(name=P, score=None, threshold=threshold, success=False, error="judge down")
        trs.append(TestResult(index=len(scores) + j, name=None, test_case=None, metrics_data=[m]))
    return EvaluationResult(test_results=trs)


def _lean(res):
    tally = Tally()
    for tr in res.test_results:
        tally.add(tr)
    return EvaluationResult(test_results=[], tally=tally)


def test_mean_interval_by_hand():
    res = _result([0.2, 0.4, 0.6, 0.8])
    iv = res.interval(P)
    # mean 0.5, s = 0.2582, s/sqrt(4) = 0.1291, t_3 = 3.179 -> +- 0.4104
    assert iv.estimate == pytest.approx(0.5)
    assert iv.low == pytest.approx(0.0896, abs=5e-4) and iv.high == pytest.approx(0.9104, abs=5e-4)
    assert str(iv) == "0.500 [0.090, 0.910]"


def test_pass_rate_interval_is_wilson_over_every_result_errors_included():
    res = _result([0.2, 0.4, 0.6, 0.8])
    pr = res.pass_rate_interval(P)
    # 2 of 4: centre 0.5, half = 1.96 sqrt(0.0625 + 3.8416/64) / (1 + 3.8416/4) = 0.3500
    assert pr.estimate == 0.5 and pr.low == pytest.approx(0.1500, abs=5e-4) and pr.high == pytest.approx(0.8500, abs=5e-4)
    with_errors = _result([0.2, 0.4, 0.6, 0.8], errors=1)
    assert with_errors.pass_rate_interval(P).n == 5 and with_errors.pass_rate(P) == pytest.approx(0.4)
    assert with_errors.interval(P).n == 4  # the mean is over scored cases only


def test_repeat_spread_widens_the_interval():
    res = _result([0.2, 0.4, 0.6, 0.8], spread=[0.01] * 4)
    iv = res.interval(P)
    # variance 0.06667 + mean spread 0.01 = 0.07667; sqrt(0.07667/4) = 0.13844; t_3 3.179 -> +- 0.4401
    assert iv.low == pytest.approx(0.0599, abs=5e-4) and iv.high == pytest.approx(0.9401, abs=5e-4)


def test_all_equal_scores_do_not_claim_certainty():
    iv = _result([1.0] * 5).interval(P)
    assert iv.method == "wilson" and iv.high == 1.0 and iv.low == pytest.approx(0.566, abs=1e-3)


def test_summary_carries_the_intervals_and_a_lean_run_gives_the_same():
    res = _result([0.9, 0.1, 0.7, 0.35, 0.55, 0.8], spread=[0.0, 0.02, 0.0, 0.01, 0.0, 0.0], errors=1)
    s = res.summary()[P]
    assert s["mean_ci"] == res.interval(P).as_list() and s["pass_rate_ci"] == res.pass_rate_interval(P).as_list()
    assert s["scored"] == 6 and s["errors"] == 1 and "corrected" not in s
    # the same scores in another order give exactly the same figures (sums are exact)
    lean = _lean(_result([0.55, 0.8, 0.35, 0.9, 0.1, 0.7], spread=[0.0, 0.0, 0.01, 0.0, 0.02, 0.0], errors=1))
    assert lean.summary() == res.summary()
    assert str(lean.interval(P)) == str(res.interval(P)) and lean.corrected(P) is None


def test_one_score_has_no_interval_and_no_scores_no_estimate():
    one = _result([0.7])
    assert one.summary()[P]["mean_ci"] is None and one.interval(P).estimate == pytest.approx(0.7)
    none = _result([], errors=2)
    assert none.summary()[P]["mean"] is None and none.summary()[P]["mean_ci"] is None
    assert none.summary()[P]["pass_rate_ci"] is not None  # 0 of 2 passed still has a Wilson interval


def test_corrected_mean_from_gold_scores():
    judged = [0.9, 0.8, 0.7, 0.6, 0.9, 0.5, 0.8, 0.7, 0.9, 0.6]
    gold = [0.7, 0.6, None, None, 0.8, 0.3, None, None, None, None]
    res = _result(judged, gold=gold)
    est = res.corrected(P)
    assert est is not None and est.n_labelled == 4 and est.n_unlabelled == 6
    assert est.to_dict() == ppi_mean(judged, gold).to_dict()
    # the judge scores the labelled cases 0.775 on average against gold 0.6: a bias of +0.175
    assert est.bias.estimate == pytest.approx(0.175)
    assert est.corrected.estimate < res.mean(P)
    assert res.summary()[P]["corrected"] == est.to_dict()


def test_no_correction_without_enough_labels():
    assert _result([0.9, 0.8, 0.7], gold=[0.7, None, None]).corrected(P) is None
    assert _result([0.9, 0.8], gold=[0.7, 0.8]).corrected(P) is None  # all labelled: the gold mean is the answer


def test_repr_shows_the_interval():
    assert "Contextual Precision=0.500 [0.090, 0.910]" in repr(_result([0.2, 0.4, 0.6, 0.8]))

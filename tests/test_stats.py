"""contextjudge.stats against values worked out by hand (the arithmetic is in each test's comment)."""

from __future__ import annotations

import math

import pytest

from contextjudge.stats import (
    binary_agreement,
    bootstrap,
    cohen_kappa,
    mae,
    mean_interval,
    paired_difference,
    ppi_mean,
    proportion_interval,
    significantly_better,
    significantly_worse,
    spearman,
    t_quantile,
)


@pytest.mark.parametrize(("df", "table"), [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228),
                                           (30, 2.042), (200, 1.972)])
def test_t_quantile_matches_the_printed_table(df, table):
    assert t_quantile(df) == pytest.approx(table, abs=0.005)


def test_wilson_interval_by_hand():
    # p = 0.6, n = 10, z = 1.95996: centre (0.6 + z^2/20) / (1 + z^2/10) = 0.57222,
    # half z * sqrt(0.024 + z^2/400) / (1 + z^2/10) = 0.25957 -> [0.31265, 0.83180]
    iv = proportion_interval(6, 10)
    assert (iv.estimate, round(iv.low, 4), round(iv.high, 4)) == (0.6, 0.3127, 0.8318)
    all_pass = proportion_interval(10, 10)  # certainty is not claimed from ten cases
    assert all_pass.high == 1.0 and all_pass.low == pytest.approx(0.7225, abs=1e-4)
    assert proportion_interval(0, 0).estimate is None


def test_mean_interval_by_hand():
    # mean 0.5, s = 0.25820, s / sqrt(4) = 0.12910, t_3 = 3.1824 -> half 0.41085 -> [0.0892, 0.9108]
    iv = mean_interval([0.2, 0.4, 0.6, 0.8])
    assert iv.estimate == pytest.approx(0.5)
    assert iv.low == pytest.approx(0.0892, abs=1e-3) and iv.high == pytest.approx(0.9108, abs=1e-3)
    assert iv.method == "t" and iv.n == 4
    assert mean_interval([0.3, None, 0.5]).n == 2  # Nones are not cases
    assert mean_interval([0.7]).low is None  # one case: no interval
    assert mean_interval([]).estimate is None


def test_mean_interval_clips_to_the_score_range():
    iv = mean_interval([0.0, 0.0, 1.0])
    assert iv.low == 0.0 and iv.high == 1.0


def test_identical_scores_get_the_wilson_interval_not_a_point():
    iv = mean_interval([1.0] * 10)
    assert iv.method == "wilson" and iv.high == 1.0 and iv.low == pytest.approx(0.7225, abs=1e-4)


def test_repeat_spread_widens_the_interval():
    # between-case variance 0.0083333 plus the mean within-case variance 0.01: s^2 = 0.0183333 -> se 0.067700
    plain = mean_interval([0.4, 0.45, 0.55, 0.6])
    noisy = mean_interval([0.4, 0.45, 0.55, 0.6], within_variances=[0.01, 0.01, 0.01, 0.01])
    assert noisy.width > plain.width
    assert noisy.high - 0.5 == pytest.approx(t_quantile(3) * 0.067700, abs=1e-4)


def test_paired_difference_by_hand():
    # differences -0.1, -0.2, -0.1: mean -0.13333, s 0.057735, se 0.033333, t_2 4.30265 -> half 0.14342
    iv = paired_difference([(0.5, 0.4), (0.6, 0.4), (0.7, 0.6)])
    assert iv.estimate == pytest.approx(-0.13333, abs=1e-5)
    assert iv.low == pytest.approx(-0.27676, abs=1e-4) and iv.high == pytest.approx(0.01009, abs=1e-4)
    assert not significantly_worse(iv)  # the interval reaches above zero: not significant
    consistent = paired_difference([(0.5, 0.4), (0.6, 0.45), (0.7, 0.6), (0.8, 0.7)])
    assert significantly_worse(consistent) and not significantly_better(consistent)
    same = paired_difference([(0.5, 0.4)] * 5)  # the same change on every case: no spread, significant
    assert same.low == same.high == pytest.approx(-0.1) and significantly_worse(same)


def test_cohen_kappa_by_hand():
    # po = 35/50 = 0.7; judge yes 25/50, labels yes 30/50: pe = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.2/0.5 = 0.4
    assert cohen_kappa(20, 5, 10, 15) == pytest.approx(0.4)
    assert cohen_kappa(10, 0, 0, 10) == pytest.approx(1.0)
    assert cohen_kappa(5, 5, 5, 5) == pytest.approx(0.0)  # chance agreement only
    assert cohen_kappa(0, 0, 0, 0) is None


def test_ppi_classic_by_hand():
    # labelled (judge, gold): (0.5, 0.4), (0.6, 0.7), (0.4, 0.5); unlabelled judge scores 0.9, 0.2, 0.7.
    # theta = mean(y) + mean(u) - mean(f) = 0.53333 + 0.6 - 0.5 = 0.63333
    # var = var(u)/N + var(y - f)/n = 0.13/3 + 0.013333/3 = 0.047778 -> sd 0.21858
    # -> half t_2 * sd = 4.30265 * 0.21858 = 0.94048 (n = 3 labelled: 2 degrees of freedom); clipped to [0, 1]
    est = ppi_mean([0.5, 0.6, 0.4, 0.9, 0.2, 0.7], [0.4, 0.7, 0.5, None, None, None], tune=False)
    assert est.corrected.estimate == pytest.approx(0.63333, abs=1e-5)
    assert (est.corrected.low, est.corrected.high) == (0.0, 1.0)
    raw = ppi_mean([0.5, 0.6, 0.4, 0.9, 0.2, 0.7], [0.4, 0.7, 0.5, None, None, None], tune=False, bounds=None)
    assert raw.corrected.low == pytest.approx(0.63333 - 0.94048, abs=1e-4)
    assert raw.corrected.high == pytest.approx(0.63333 + 0.94048, abs=1e-4)
    assert est.lam == 1.0 and (est.n_labelled, est.n_unlabelled) == (3, 3)
    # the judge's bias on the labelled cases: mean(f - y) = (0.1 - 0.1 - 0.1) / 3
    assert est.bias.estimate == pytest.approx(-0.033333, abs=1e-5)


def test_ppi_power_tuned_by_hand():
    # cov(y, f) = 0.01, var(f) = 0.01, n/N = 1: lam = 0.01 / (2 * 0.01) = 0.5
    # theta = 0.53333 + 0.5 * (0.6 - 0.5) = 0.58333
    # var = 0.25 * 0.13/3 + var(y - 0.5 f)/3 = 0.010833 + 0.015833/3 = 0.016111 -> half t_2 * 0.12693 = 4.30265 *
    # 0.12693 = 0.54613 -> [0.03720, 1.12946], the high end clipped to 1
    est = ppi_mean([0.5, 0.6, 0.4, 0.9, 0.2, 0.7], [0.4, 0.7, 0.5, None, None, None])
    assert est.lam == pytest.approx(0.5)
    assert est.corrected.estimate == pytest.approx(0.58333, abs=1e-5)
    assert est.corrected.low == pytest.approx(0.03720, abs=1e-4)
    assert est.corrected.high == 1.0
    # the labelled-only interval and the bias use the same t_2: gold 0.4, 0.7, 0.5 (mean 0.53333, s = 0.15275);
    # judge - gold 0.1, -0.1, -0.1 (mean -0.03333, s = 0.11547)
    assert est.labelled.low == pytest.approx(0.53333 - 4.30265 * 0.15275 / 3 ** 0.5, abs=1e-4)
    assert est.bias.low == pytest.approx(-0.03333 - 4.30265 * 0.11547 / 3 ** 0.5, abs=1e-4)
    assert est.labelled.method == est.bias.method == "t"


def test_ppi_needs_labelled_and_unlabelled_cases():
    assert ppi_mean([0.5, 0.6], [0.4, None]) is None  # one labelled case
    assert ppi_mean([0.5, 0.6], [0.4, 0.5]) is None  # nothing unlabelled to correct
    assert ppi_mean([None, 0.6, 0.5, 0.4], [0.3, 0.5, 0.4, None]).n_labelled == 2  # an unscored case is left out


def test_ppi_with_a_good_judge_is_narrower_than_the_labels_alone():
    judged = [i / 100 for i in range(100)]
    gold = [j + (0.02 if i % 2 else -0.02) if i % 5 == 0 else None for i, j in enumerate(judged)]
    est = ppi_mean(judged, gold)
    assert est.corrected.width < est.labelled.width
    # an unbiased judge: cov(y, f) = var(f), so lam = 1 / (1 + n/N) = 1 / 1.25
    assert est.lam == pytest.approx(0.8, abs=0.02)


def test_binary_agreement_point_values_and_intervals():
    cases = [[(True, True), (False, False)], [(True, False)], [(False, False), (True, True)], [(False, True)]]
    a = binary_agreement(cases)
    assert (a.tp, a.fp, a.fn, a.tn, a.cases, a.items) == (2, 1, 1, 2, 4, 6)
    assert a.accuracy.estimate == pytest.approx(4 / 6) and a.kappa.estimate == pytest.approx(1 / 3)
    assert a.tpr.estimate == pytest.approx(2 / 3) and a.tnr.estimate == pytest.approx(2 / 3)
    assert a.accuracy.low <= a.accuracy.estimate <= a.accuracy.high
    d = a.to_dict()
    assert d["confusion"] == {"tp": 2, "fp": 1, "fn": 1, "tn": 2} and d["kappa_ci"] == a.kappa.as_list()
    perfect = binary_agreement([[(True, True), (False, False)]] * 6)
    assert perfect.accuracy.as_list() == [1.0, 1.0]
    assert binary_agreement(cases).to_dict() == d  # the bootstrap is seeded


def test_bootstrap_resamples_whole_groups():
    # every group's mean is 0.5, so every resample's mean of group means is 0.5
    lo, hi = bootstrap([[0.0, 1.0], [0.5], [1.0, 0.0]], lambda gs: sum(sum(g) / len(g) for g in gs) / len(gs))
    assert lo == hi == pytest.approx(0.5)
    assert bootstrap([[1.0]], lambda gs: 1.0) == (None, None)


def test_spearman_and_mae_by_hand():
    # ranks with a tie: a -> 1, 2.5, 2.5, 4; b -> 1, 2, 3, 4; cov 4.5, var 4.5 and 5 -> 4.5 / sqrt(22.5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert mae([0.5, 1.0], [0.25, 0.5]) == pytest.approx(0.375)

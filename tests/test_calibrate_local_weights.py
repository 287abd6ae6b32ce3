"""benchmarks/calibrate_local.py's row weights (the fit itself needs ../shared/data): every set counts its SET_WEIGHT
in all, and ``--balance`` splits that equally between a set's yes and no rows, so a fitted intercept does not carry
the sets' base rates."""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark

np = pytest.importorskip("numpy")


@pytest.fixture()
def cal():
    return load_benchmark("calibrate_local")


def _parts():
    x = np.zeros((1, 1))
    return [("trec_dl", np.repeat(x, 10, 0), np.array([1.0] + [0.0] * 9)),
            ("pairs", np.repeat(x, 4, 0), np.array([1.0, 1.0, 0.0, 0.0]))]


def _share(w, y, lo, hi, label):
    sel = (y[lo:hi] > 0.5) == label
    return float(w[lo:hi][sel].sum())


def test_each_set_counts_its_weight_in_all(cal):
    w = cal.fit_weights("node_noref", _parts())  # TREC DL counts twice in node_noref
    assert w.mean() == pytest.approx(1.0)
    assert w[:10].sum() == pytest.approx(2 * w[10:].sum())
    assert len(set(np.round(w[:10], 9))) == 1  # without --balance, one weight for every row of a set


def test_balance_gives_a_sets_yes_and_no_rows_equal_weight(cal):
    cal.BALANCE.add("node_noref")
    try:
        parts = _parts()
        w = cal.fit_weights("node_noref", parts)
        y = np.concatenate([p[2] for p in parts])
        assert _share(w, y, 0, 10, True) == pytest.approx(_share(w, y, 0, 10, False))
        assert w[:10].sum() == pytest.approx(2 * w[10:].sum())
        assert cal.fit_weights("sentence", parts)[0] == pytest.approx(cal.fit_weights("sentence", parts)[1])
    finally:
        cal.BALANCE.clear()


def test_balance_leaves_a_set_with_one_label_alone(cal):
    cal.BALANCE.add("support")
    try:
        parts = [("clapnq", np.zeros((3, 1)), np.ones(3))]
        assert list(cal.fit_weights("support", parts)) == pytest.approx([1.0, 1.0, 1.0])
    finally:
        cal.BALANCE.clear()

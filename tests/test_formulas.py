"""The metric formulas against hand-computed values."""

import pytest

from contextjudge.metrics import fraction
from contextjudge.metrics import weighted_cumulative_precision as wcp

Y, N = True, False


@pytest.mark.parametrize(
    "verdicts, expected",
    [
        ([Y, N, Y], (1 / 1 + 2 / 3) / 2),  # 0.8333
        ([N, N, N, N, Y], 0.2),
        ([Y, Y, N, N, N], 1.0),
        ([N, N, N], 0.0),
        ([], 0.0),
        ([N, Y], 0.5),  # context utilization's worked example
        ([N, Y, Y], (1 / 2 + 2 / 3) / 2),  # 0.5833
        ([Y], 1.0),
    ],
)
def test_weighted_cumulative_precision(verdicts, expected):
    assert wcp(verdicts) == pytest.approx(expected)


def test_hand_values_rounded():
    assert round(wcp([Y, N, Y]), 4) == 0.8333
    assert round(wcp([N, Y, Y]), 4) == 0.5833


def test_fraction():
    assert fraction([Y, Y, Y, N]) == 0.75
    assert fraction([]) == 0.0
    assert fraction([N]) == 0.0

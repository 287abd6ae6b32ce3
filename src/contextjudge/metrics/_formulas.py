"""The metric formulas, as pure functions over verdicts (True = yes). Each is tested against hand-computed values."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["fraction", "mean", "weighted_cumulative_precision"]


def weighted_cumulative_precision(relevant: Sequence[bool]) -> float:
    """Rank-aware precision: ``(1/R) * sum_k r_k * (sum_{i<=k} r_i) / k``; 0 when nothing is relevant.

    [yes, no, yes] -> (1/1 + 2/3) / 2 = 0.8333; [no, no, no, no, yes] -> 0.2; [yes, yes, no, no, no] -> 1.0.
    """
    total = sum(1 for r in relevant if r)
    if total == 0:
        return 0.0
    hits = 0
    acc = 0.0
    for k, r in enumerate(relevant, start=1):
        if r:
            hits += 1
            acc += hits / k
    return acc / total


def fraction(flags: Sequence[bool]) -> float:
    """Share of True among ``flags``; 0 for an empty sequence."""
    return sum(1 for f in flags if f) / len(flags) if flags else 0.0


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0

"""The metric formulas, as pure functions over verdicts (True = yes). Each is tested against hand-computed values."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["average_precision", "fraction", "hit_rate", "mean", "ndcg", "precision_at_k", "recall_at_k", "reciprocal_rank",
           "weighted_cumulative_precision"]


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


# The ranking formulas (judge-free). ``grades``: the relevance of each retrieved node in rank order (0 = not
# relevant; 1 for binary labels; a repeated item is already 0, see metrics/_ranking.py); ``k``: the cut-off (a k
# larger than the list looks at the whole list).

def hit_rate(grades: Sequence[float], k: int) -> float:
    """1.0 when a relevant node is in the top ``k``. [0, 0, 1] @2 -> 0.0, @3 -> 1.0."""
    return 1.0 if any(g > 0 for g in grades[:k]) else 0.0


def reciprocal_rank(grades: Sequence[float], k: int) -> float:
    """1 / the rank of the first relevant node in the top ``k``; 0 when none. [0, 0, 1, 1] -> 1/3."""
    return next((1.0 / r for r, g in enumerate(grades[:k], 1) if g > 0), 0.0)


def precision_at_k(grades: Sequence[float], k: int) -> float:
    """Relevant nodes in the top ``k`` / the nodes there (at most ``k``: a retriever asked for 10 that returned 3 is
    judged on its 3). [1, 0, 1, 0] @4 -> 0.5; [1] @5 -> 1.0; [] -> 0.0."""
    top = grades[:k]
    return sum(1 for g in top if g > 0) / len(top) if top else 0.0


def recall_at_k(grades: Sequence[float], n_expected: int, k: int) -> float:
    """Expected items found in the top ``k`` / all expected items. [1, 0, 1] with 4 expected @3 -> 0.5."""
    return min(1.0, sum(1 for g in grades[:k] if g > 0) / n_expected) if n_expected else 0.0


def average_precision(grades: Sequence[float], n_expected: int, k: int) -> float:
    """``(1/R) * sum over relevant ranks r <= k of precision@r``, R the number of expected items (TREC's AP: an
    expected item never retrieved counts against it).
    [1, 0, 1] with R=2 -> (1/1 + 2/3) / 2 = 0.8333; with R=4 -> (1 + 2/3) / 4 = 0.4167; [0, 1] @1 -> 0.0."""
    if not n_expected:
        return 0.0
    hits = 0
    acc = 0.0
    for r, g in enumerate(grades[:k], 1):
        if g > 0:
            hits += 1
            acc += hits / r
    return acc / n_expected


def ndcg(grades: Sequence[float], expected: Sequence[float], k: int) -> float:
    """DCG@k / ideal DCG@k with linear gain: ``sum grade_r / log2(r + 1)``; the ideal ranks the expected grades
    best first. Binary [0, 1] with one expected -> (1/log2 3) / 1 = 0.6309; graded [1, 3] with expected {3, 1} ->
    (1 + 3/log2 3) / (3 + 1/log2 3) = 0.7967."""
    import math  # noqa: PLC0415

    dcg = sum(g / math.log2(r + 1) for r, g in enumerate(grades[:k], 1) if g > 0)
    ideal = sum(g / math.log2(r + 1) for r, g in enumerate(sorted((g for g in expected if g > 0),
                                                                  reverse=True)[:k], 1))
    return dcg / ideal if ideal > 0 else 0.0

"""The report's statistics: the intervals come from ``contextjudge.stats`` (the same figures the result object and
the CLI print); this module keeps the names the report package has always exported, and pairs cases across runs.

- ``Interval``: ``contextjudge.stats.Interval``.
- ``bootstrap_mean``: a mean with its percentile-bootstrap interval (fixed seed), kept for code that imported it;
  the report itself shows the Student-t interval of ``EvaluationResult.interval``.
- ``paired_difference``: ``contextjudge.stats.paired_difference`` (paired t).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cases.goldens import normalize_input
from ..cases.identity import is_generated_id
from ..stats import LEVEL, SEED, Interval, bootstrap
from ..stats import paired_difference as _paired_t

__all__ = ["Interval", "bootstrap_mean", "pair_key", "paired_difference"]


def bootstrap_mean(values: Sequence[float], *, confidence: float = LEVEL, seed: int = SEED) -> Interval:
    """The mean of ``values`` with its percentile-bootstrap interval (no interval for fewer than two values; all
    values equal: an interval of no width)."""
    vals = [float(v) for v in values if v is not None]
    n = len(vals)
    if n == 0:
        return Interval(None, None, None, 0, confidence, "bootstrap")
    mean = sum(vals) / n
    if n > 1 and all(v == vals[0] for v in vals):
        return Interval(mean, mean, mean, n, confidence, "bootstrap")
    lo, hi = bootstrap(vals, lambda sample: sum(sample) / len(sample), resamples=2000 if n <= 500 else 1000,
                       level=confidence, seed=seed)
    return Interval(mean, lo, hi, n, confidence, "bootstrap")


def paired_difference(pairs: Sequence[tuple[float, float]], **kw: Any) -> Interval:
    """The mean of (current - baseline) over paired cases with its paired-t interval (``contextjudge.stats``)."""
    return _paired_t(pairs, **kw)


def pair_key(test_case: Any, seen: dict[str, int]) -> str:
    """How a case is recognised in another run: its own id, else its input (numbered when it repeats)."""
    own = getattr(test_case, "id", None)
    if own and not is_generated_id(own):
        base = f"id:{own}"
    else:
        text = getattr(test_case, "input", None)
        if text is None and hasattr(test_case, "turns"):
            text = " / ".join(t.content for t in test_case.turns if t.role == "user")
        base = f"in:{normalize_input(text or '')}"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}#{seen[base]}"

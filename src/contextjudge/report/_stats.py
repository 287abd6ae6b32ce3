"""The statistics of the report: means with percentile-bootstrap intervals, and paired differences between runs.

Resampling uses a fixed seed, so the same run always gets the same interval.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from ..cases.goldens import normalize_input
from ..cases.identity import is_generated_id

__all__ = ["Interval", "bootstrap_mean", "pair_key", "paired_difference"]


@dataclass
class Interval:
    """An estimate with its 95% interval (``low``/``high`` are None with fewer than two values)."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int


def _resamples(n: int) -> int:
    return 2000 if n <= 500 else 1000


def bootstrap_mean(values: Sequence[float], *, confidence: float = 0.95, seed: int = 20240601) -> Interval:
    """The mean of ``values`` with a percentile bootstrap interval."""
    vals = [float(v) for v in values if v is not None]
    n = len(vals)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = sum(vals) / n
    if n == 1 or all(v == vals[0] for v in vals):
        return Interval(mean, mean if n > 1 else None, mean if n > 1 else None, n)
    rng = random.Random(seed)
    b = _resamples(n)
    means = sorted(sum(rng.choices(vals, k=n)) / n for _ in range(b))  # one call per resample: fast on long runs
    alpha = (1.0 - confidence) / 2
    lo = means[max(0, int(alpha * b))]
    hi = means[min(b - 1, int((1 - alpha) * b) - 1)]
    return Interval(mean, lo, hi, n)


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


def paired_difference(pairs: Sequence[tuple[float, float]], **kw: Any) -> Interval:
    """Mean of (current - baseline) over paired cases, with its bootstrap interval."""
    return bootstrap_mean([cur - base for base, cur in pairs], **kw)

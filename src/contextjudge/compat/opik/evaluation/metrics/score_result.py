"""``opik.evaluation.metrics.score_result.ScoreResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ScoreResult"]


@dataclass
class ScoreResult:
    """Opik's ``ScoreResult``: a metric's ``name``, ``value``, ``reason``; ``scoring_failed`` if the judge failed."""

    name: str
    value: float
    reason: str | None = None
    category_name: str | None = None
    metadata: dict[str, Any] | None = field(default=None)
    scoring_failed: bool = False

"""``opik.evaluation.metrics.score_result.ScoreResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ScoreResult"]


@dataclass
class ScoreResult:
    name: str
    value: float
    reason: str | None = None
    category_name: str | None = None
    metadata: dict[str, Any] | None = field(default=None)
    scoring_failed: bool = False

"""``opik.exceptions.MetricComputationError``: contextjudge's judge errors (``ScoreResult.scoring_failed`` instead
of a raise, as Opik's evaluation engine reports them)."""

from ...errors import JudgeError as MetricComputationError

__all__ = ["MetricComputationError"]

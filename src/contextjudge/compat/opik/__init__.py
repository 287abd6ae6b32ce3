"""Opik's spelling: ``from contextjudge.compat.opik import ContextPrecision, ContextRecall`` or, as in Opik,
``from contextjudge.compat.opik.evaluation.metrics import ContextPrecision, ContextRecall``. See
``contextjudge.compat.opik.evaluation.metrics`` and docs/coming-from-opik.md.
"""

from . import evaluation
from .evaluation.metrics import ContextPrecision, ContextRecall, ScoreResult

__all__ = ["ContextPrecision", "ContextRecall", "ScoreResult", "evaluation"]

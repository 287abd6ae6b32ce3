"""``deepeval.metrics.contextual_recall``: ``ContextualRecallMetric`` and ``ContextualRecallTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["ContextualRecallMetric", "ContextualRecallTemplate"]


class ContextualRecallTemplate(PeerTemplate):
    """The prompts of ``ContextualRecallMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.ContextualRecallTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The statement-support prompt for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("statement_support", _metrics.ContextualRecallTemplate, kwargs)


class ContextualRecallMetric(PeerMetric, _metrics.ContextualRecallMetric):
    """contextjudge's ``ContextualRecallMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template``, ``flaky``)."""


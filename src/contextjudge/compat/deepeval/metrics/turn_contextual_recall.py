"""``deepeval.metrics.turn_contextual_recall``: ``TurnContextualRecallMetric`` and ``TurnContextualRecallTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerTemplate, TurnPeerMetric, default_prompt

__all__ = ["TurnContextualRecallMetric", "TurnContextualRecallTemplate"]


class TurnContextualRecallTemplate(PeerTemplate):
    """The prompts of ``TurnContextualRecallMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.TurnContextualRecallTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The statement-support prompt of one turn for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("statement_support", _metrics.TurnContextualRecallTemplate, kwargs)


class TurnContextualRecallMetric(TurnPeerMetric, _metrics.TurnContextualRecallMetric):
    """contextjudge's ``TurnContextualRecallMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template, window_size``, ``flaky``)."""


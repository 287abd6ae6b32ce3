"""``deepeval.metrics.turn_contextual_precision``: ``TurnContextualPrecisionMetric`` and ``TurnContextualPrecisionTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerTemplate, TurnPeerMetric, default_prompt

__all__ = ["TurnContextualPrecisionMetric", "TurnContextualPrecisionTemplate"]


class TurnContextualPrecisionTemplate(PeerTemplate):
    """The prompts of ``TurnContextualPrecisionMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.TurnContextualPrecisionTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The node-usefulness prompt of one turn for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("node_usefulness", _metrics.TurnContextualPrecisionTemplate, kwargs)


class TurnContextualPrecisionMetric(TurnPeerMetric, _metrics.TurnContextualPrecisionMetric):
    """contextjudge's ``TurnContextualPrecisionMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template, window_size``, ``flaky``)."""


"""``deepeval.metrics.turn_contextual_relevancy``: ``TurnContextualRelevancyMetric`` and ``TurnContextualRelevancyTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerTemplate, TurnPeerMetric, default_prompt

__all__ = ["TurnContextualRelevancyMetric", "TurnContextualRelevancyTemplate"]


class TurnContextualRelevancyTemplate(PeerTemplate):
    """The prompts of ``TurnContextualRelevancyMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.TurnContextualRelevancyTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The sentence-relevance prompt of one turn for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("sentence_relevance", _metrics.TurnContextualRelevancyTemplate, kwargs)


class TurnContextualRelevancyMetric(TurnPeerMetric, _metrics.TurnContextualRelevancyMetric):
    """contextjudge's ``TurnContextualRelevancyMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template, window_size``, ``flaky``)."""


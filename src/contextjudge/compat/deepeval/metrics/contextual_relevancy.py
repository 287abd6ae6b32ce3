"""``deepeval.metrics.contextual_relevancy``: ``ContextualRelevancyMetric`` and ``ContextualRelevancyTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["ContextualRelevancyMetric", "ContextualRelevancyTemplate"]


class ContextualRelevancyTemplate(PeerTemplate):
    """The prompts of ``ContextualRelevancyMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.ContextualRelevancyTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The sentence-relevance prompt for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("sentence_relevance", _metrics.ContextualRelevancyTemplate, kwargs)


class ContextualRelevancyMetric(PeerMetric, _metrics.ContextualRelevancyMetric):
    """contextjudge's ``ContextualRelevancyMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template``, ``flaky``)."""


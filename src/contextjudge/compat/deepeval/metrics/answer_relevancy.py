"""``deepeval.metrics.answer_relevancy``: ``AnswerRelevancyMetric`` and ``AnswerRelevancyTemplate`` (subclass it to
change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["AnswerRelevancyMetric", "AnswerRelevancyTemplate"]


class AnswerRelevancyTemplate(PeerTemplate):
    """The prompts of ``AnswerRelevancyMetric``. Override ``generate_verdicts`` (DeepEval's keyword arguments:
    ``input``, ``statements``) / ``generate_reason`` as static methods; the defaults are contextjudge's own prompts.
    DeepEval's ``generate_statements`` step does not exist here: the statements are the answer's sentences."""

    _ours = _metrics.AnswerRelevancyTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The answer-relevance prompt for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("answer_relevance", _metrics.AnswerRelevancyTemplate, kwargs)


class AnswerRelevancyMetric(PeerMetric, _metrics.AnswerRelevancyMetric):
    """contextjudge's ``AnswerRelevancyMetric`` with DeepEval's constructor (``threshold, model, include_reason,
    async_mode, strict_mode, verbose_mode, evaluation_template``, ``flaky``)."""

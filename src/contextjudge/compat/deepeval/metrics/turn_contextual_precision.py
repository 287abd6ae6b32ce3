"""``deepeval.metrics.turn_contextual_precision``: ``TurnContextualPrecisionMetric`` and ``TurnContextualPrecisionTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["TurnContextualPrecisionMetric", "TurnContextualPrecisionTemplate"]


class TurnContextualPrecisionTemplate(PeerTemplate):
    """The prompts of ``TurnContextualPrecisionMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.TurnContextualPrecisionTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        return default_prompt("node_usefulness", _metrics.TurnContextualPrecisionTemplate, kwargs)


class TurnContextualPrecisionMetric(PeerMetric, _metrics.TurnContextualPrecisionMetric):
    """contextjudge's ``TurnContextualPrecisionMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template, window_size``, ``flaky``)."""

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 async_mode: bool = True, strict_mode: bool = False, verbose_mode: bool = False,
                 evaluation_template: Any = None, window_size: int = 10, flaky: bool = False, **kwargs: Any) -> None:
        super().__init__(threshold=threshold, model=model, include_reason=include_reason, async_mode=async_mode,
                         strict_mode=strict_mode, verbose_mode=verbose_mode, evaluation_template=evaluation_template,
                         flaky=flaky, window_size=window_size, **kwargs)

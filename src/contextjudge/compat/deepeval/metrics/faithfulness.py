"""``deepeval.metrics.faithfulness``: ``FaithfulnessMetric`` and ``FaithfulnessTemplate`` (subclass it to change the
prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["FaithfulnessMetric", "FaithfulnessTemplate"]


class FaithfulnessTemplate(PeerTemplate):
    """The prompts of ``FaithfulnessMetric``. Override ``generate_verdicts`` (DeepEval's keyword arguments:
    ``claims``, ``retrieval_context``) / ``generate_reason`` as static methods; the defaults are contextjudge's own
    prompts. DeepEval's ``generate_claims`` and ``generate_truths`` steps do not exist here: the claims are the
    answer's sentences and the judge reads the retrieved nodes themselves, in one call."""

    _ours = _metrics.FaithfulnessTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The answer-support prompt for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("answer_support", _metrics.FaithfulnessTemplate, kwargs)


class FaithfulnessMetric(PeerMetric, _metrics.FaithfulnessMetric):
    """contextjudge's ``FaithfulnessMetric`` with DeepEval's constructor (``threshold, model, include_reason,
    async_mode, strict_mode, verbose_mode, truths_extraction_limit, penalize_ambiguous_claims,
    evaluation_template``, ``flaky``).

    ``truths_extraction_limit`` is accepted and has nothing to limit: no truths are extracted (the judge reads the
    nodes). ``penalize_ambiguous_claims``: contextjudge's verdicts are yes or no; an ambiguous ("idk") answer is
    re-asked and then an error, never counted, so both settings score alike (docs/metrics.md, the differences).
    """

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 async_mode: bool = True, strict_mode: bool = False, verbose_mode: bool = False,
                 truths_extraction_limit: int | None = None, penalize_ambiguous_claims: bool = False,
                 evaluation_template: Any = None, **kwargs: Any) -> None:
        super().__init__(threshold=threshold, model=model, include_reason=include_reason, async_mode=async_mode,
                         strict_mode=strict_mode, verbose_mode=verbose_mode,
                         evaluation_template=evaluation_template, **kwargs)
        self.truths_extraction_limit = truths_extraction_limit
        self.penalize_ambiguous_claims = penalize_ambiguous_claims

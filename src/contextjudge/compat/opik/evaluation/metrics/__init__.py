"""``opik.evaluation.metrics``: ``ContextPrecision`` and ``ContextRecall`` with Opik's arguments and ``ScoreResult``.

    metric = ContextRecall(model=chat_model)          # a LangChain chat model, a model name, or "local"
    metric.score(input=..., output=..., expected_output=..., context=[...])   # or: await metric.ascore(...)

- ``ContextRecall`` is Opik's kind of judgement: one judge call scores, on an anchored 0.0-1.0 scale, how much of
  ``expected_output`` the ``output`` recalls given ``context`` (contextjudge's ``RubricContextRecallMetric``).
- ``ContextPrecision`` judges the retrieval itself: each item of ``context`` is asked whether it is useful for
  arriving at ``expected_output``, and the score is their average precision in the given order
  (contextjudge's ``ContextualPrecisionMetric``). Opik's own ContextPrecision grades the answer instead; see
  docs/coming-from-opik.md. ``context=None`` or ``[]`` scores 0 with a reason, without a judge call.

A judge failure gives ``ScoreResult(value=0.0, scoring_failed=True)`` with the error as its reason, never a made-up
score; ``metadata`` holds the verdicts and the judge's calls.
"""

from __future__ import annotations

from typing import Any

from ....._aio import run_sync
from .....cases.testcase import LLMTestCase
from .....metrics import ContextualPrecisionMetric, RubricContextRecallMetric
from .score_result import ScoreResult

__all__ = ["BaseMetric", "ContextPrecision", "ContextRecall", "ScoreResult"]


class BaseMetric:
    """Opik's metric shape: ``name``, ``score(...)`` and ``ascore(...)`` returning ``ScoreResult``."""

    _cls: Any = None

    def __init__(self, model: Any = None, name: str = "", few_shot_examples: Any = None, track: bool = True,
                 project_name: str | None = None, seed: int | None = None, temperature: float | None = None,
                 **_: Any) -> None:
        self.name = name
        self._metric = self._cls(model=model)

    def _case(self, input: str, output: str, expected_output: str, context: list[str] | None) -> LLMTestCase:  # noqa: A002
        raise NotImplementedError

    async def ascore(self, input: str, output: str, expected_output: str, context: list[str] | None = None,  # noqa: A002
                     **ignored_kwargs: Any) -> ScoreResult:
        """Opik's ``ascore``: one row's score; a judge failure gives a ``ScoreResult`` with ``scoring_failed=True``."""
        case = self._case(input, output, expected_output, context)
        result = await self._metric.a_score(case)
        if result.error is not None:
            return ScoreResult(self.name, 0.0, result.error, scoring_failed=True,
                               metadata={"error_type": result.error_type})
        return ScoreResult(self.name, float(result.score), result.reason,
                           metadata={"judge_calls": result.usage.calls, "verdicts": result.verdicts})

    def score(self, input: str, output: str, expected_output: str, context: list[str] | None = None,  # noqa: A002
              **ignored_kwargs: Any) -> ScoreResult:
        """Opik's ``score``: ``ascore`` run to completion from synchronous code."""
        return run_sync(self.ascore(input=input, output=output, expected_output=expected_output, context=context,
                                    **ignored_kwargs))


class ContextRecall(BaseMetric):
    """How well ``output`` recalls ``expected_output`` given ``context``: one anchored 0.0-1.0 judgement."""

    _cls = RubricContextRecallMetric

    def __init__(self, model: Any = None, name: str = "context_recall_metric", **kwargs: Any) -> None:
        super().__init__(model=model, name=name, **kwargs)

    def _case(self, input: str, output: str, expected_output: str, context: list[str] | None) -> LLMTestCase:  # noqa: A002
        return LLMTestCase(input=input, actual_output=output, expected_output=expected_output,
                           context=list(context) if context else None)


class ContextPrecision(BaseMetric):
    """Are the items of ``context`` that are useful for ``expected_output`` ranked first? (average precision)"""

    _cls = ContextualPrecisionMetric

    def __init__(self, model: Any = None, name: str = "context_precision_metric", **kwargs: Any) -> None:
        super().__init__(model=model, name=name, **kwargs)

    def _case(self, input: str, output: str, expected_output: str, context: list[str] | None) -> LLMTestCase:  # noqa: A002
        return LLMTestCase(input=input, actual_output=output, expected_output=expected_output,
                           retrieval_context=list(context or []))

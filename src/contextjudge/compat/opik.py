"""Opik's spelling: ``ContextRecall().score(input=, output=, expected_output=, context=)`` returning ``ScoreResult``.

Opik's ContextRecall is a rubric judgement of the answer against the expected answer given the context; here it
runs contextjudge's ``RubricContextRecallMetric`` (one judge call, anchored 0.0-1.0 scale). A judge failure gives
``ScoreResult(value=0.0, scoring_failed=True)`` with the error as the reason, as Opik does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._aio import run_sync
from ..cases.testcase import LLMTestCase
from ..metrics import RubricContextRecallMetric

__all__ = ["ContextRecall", "ScoreResult"]


@dataclass
class ScoreResult:
    name: str
    value: float
    reason: str | None = None
    metadata: dict[str, Any] | None = field(default=None)
    scoring_failed: bool = False


class ContextRecall:
    """How well ``output`` recalls ``expected_output`` given ``context`` (a LangChain chat model as the judge)."""

    def __init__(self, model: Any = None, name: str = "context_recall_metric", few_shot_examples: Any = None,
                 track: bool = True, project_name: str | None = None, seed: int | None = None, **_: Any) -> None:
        self.name = name
        self._metric = RubricContextRecallMetric(model=model)

    async def ascore(self, input: str, output: str, expected_output: str, context: list[str] | None = None,
                     **_: Any) -> ScoreResult:
        case = LLMTestCase(input=input, actual_output=output, expected_output=expected_output,
                           context=list(context) if context else None)
        result = await self._metric.a_score(case)
        if result.error is not None:
            return ScoreResult(self.name, 0.0, result.error, scoring_failed=True)
        return ScoreResult(self.name, float(result.score), result.reason,
                           metadata={"judge_calls": result.usage.calls})

    def score(self, input: str, output: str, expected_output: str, context: list[str] | None = None,
              **kwargs: Any) -> ScoreResult:
        return run_sync(self.ascore(input=input, output=output, expected_output=expected_output, context=context,
                                    **kwargs))

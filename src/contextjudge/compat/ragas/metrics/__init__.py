"""``ragas.metrics`` names for the context metrics, each a face over one of contextjudge's metrics.

=====================================  =====================================  ==========================
Ragas                                  contextjudge                           score
=====================================  =====================================  ==========================
``LLMContextPrecisionWithReference``,  ``ContextualPrecisionMetric``           average precision of the
``ContextPrecision``                                                          nodes useful for reference
``LLMContextPrecisionWithoutReference``, ``ContextUtilizationMetric``          the same, against response
``ContextUtilization``
``LLMContextRecall``, ``ContextRecall`` ``ContextualRecallMetric``            supported / all sentences
                                                                              of the reference
``ContextRelevance``                   ``ContextualRelevancyMetric``          relevant / all sentences
                                                                              of the contexts
=====================================  =====================================  ==========================

``metric.single_turn_ascore(sample)`` / ``single_turn_score(sample)`` return the score (a float) and raise when the
judge fails, as Ragas does; inside ``evaluate`` a failure is NaN with the reason beside it. The lower-case
instances (``context_precision``, ``context_recall``, ``context_utilization``) are Ragas 0.1's spelling.
"""

from __future__ import annotations

from typing import Any

from ...._aio import run_sync
from ....metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)
from ..dataset_schema import sample_of, sample_to_case
from ..llms import judge_of

__all__ = [
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "ContextUtilization",
    "LLMContextPrecisionWithReference",
    "LLMContextPrecisionWithoutReference",
    "LLMContextRecall",
    "Metric",
    "context_precision",
    "context_recall",
    "context_relevance",
    "context_utilization",
]


class Metric:
    """A Ragas-named context metric: its name (the result column) and judge (``llm``, else ``evaluate``'s)."""

    name = ""
    _cls: Any = None

    def __init__(self, llm: Any = None, name: str | None = None, max_retries: int = 1, **_: Any) -> None:
        self.llm = llm
        if name:
            self.name = name

    def build(self, llm: Any = None) -> Any:
        """The contextjudge metric this one stands for, judged by its own ``llm`` or else ``llm``."""
        judge = judge_of(self.llm) if self.llm is not None else judge_of(llm)
        metric = self._cls(model=judge, threshold=0.5)
        metric.name = self.name  # the column name Ragas users expect
        return metric

    async def single_turn_ascore(self, sample: Any, callbacks: Any = None, timeout: float | None = None) -> float:
        """The score of one ``SingleTurnSample`` (a float in [0, 1]); a judge failure raises."""
        return float(await self.build().a_measure(sample_to_case(sample_of(sample))))

    def single_turn_score(self, sample: Any, callbacks: Any = None, timeout: float | None = None) -> float:
        """``single_turn_ascore`` run to completion from synchronous code."""
        return run_sync(self.single_turn_ascore(sample, callbacks, timeout))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class LLMContextPrecisionWithReference(Metric):
    """Ragas' ``LLMContextPrecisionWithReference``, scored by contextjudge's ``ContextualPrecisionMetric``."""

    name = "llm_context_precision_with_reference"
    _cls = ContextualPrecisionMetric


class ContextPrecision(LLMContextPrecisionWithReference):
    """Ragas' ``ContextPrecision`` (the reference-based precision under its short name)."""

    name = "context_precision"


class LLMContextPrecisionWithoutReference(Metric):
    """Ragas' ``LLMContextPrecisionWithoutReference``, scored by contextjudge's ``ContextUtilizationMetric``."""

    name = "llm_context_precision_without_reference"
    _cls = ContextUtilizationMetric


class ContextUtilization(LLMContextPrecisionWithoutReference):
    """Ragas' ``ContextUtilization`` (precision against the response, no reference needed)."""

    name = "context_utilization"


class LLMContextRecall(Metric):
    """Ragas' ``LLMContextRecall``, scored by contextjudge's ``ContextualRecallMetric``."""

    name = "context_recall"
    _cls = ContextualRecallMetric


ContextRecall = LLMContextRecall


class ContextRelevance(Metric):
    """Ragas' ``ContextRelevance``, scored by contextjudge's ``ContextualRelevancyMetric``."""

    name = "nv_context_relevance"
    _cls = ContextualRelevancyMetric


context_precision = ContextPrecision()
context_recall = LLMContextRecall()
context_utilization = ContextUtilization()
context_relevance = ContextRelevance()

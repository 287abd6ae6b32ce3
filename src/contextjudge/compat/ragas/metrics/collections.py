"""``ragas.metrics.collections``: Ragas 0.4's metric classes, ``await metric.ascore(user_input=..., ...)``
returning a result with ``.value`` and ``.reason``; ``metric.score(...)`` is the sync form.

A judge failure raises, as in Ragas; ``.value`` is never a silent NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...._aio import run_sync
from ....metrics import (
    AnswerRelevancyMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    FaithfulnessMetric,
    PrecisionAtKMetric,
    RankedPrecisionMetric,
    RecallAtKMetric,
)
from ..dataset_schema import SingleTurnSample, sample_to_case
from ..llms import judge_of

__all__ = ["AnswerRelevancy", "ContextPrecision", "ContextPrecisionWithReference", "ContextPrecisionWithoutReference",
           "ContextRecall", "ContextRelevance", "ContextUtilization", "Faithfulness", "IDBasedContextPrecision",
           "IDBasedContextRecall", "MetricResult", "NonLLMContextPrecisionWithReference", "NonLLMContextRecall",
           "ResponseRelevancy"]


@dataclass
class MetricResult:
    """``value`` (the score), ``reason`` (why, from the verdicts) and ``traces`` (the verdicts)."""

    value: Any
    reason: str | None = None
    traces: dict[str, Any] | None = field(default=None)

    def __float__(self) -> float:
        return float(self.value)

    def to_dict(self) -> dict[str, Any]:
        """``value`` and ``reason`` as a dict."""
        return {"value": self.value, "reason": self.reason}


class _Collection:
    name = ""
    _cls: Any = None
    _fields: tuple[str, ...] = ()

    def __init__(self, llm: Any = None, name: str | None = None, **_: Any) -> None:
        self.llm = llm
        if name:
            self.name = name

    def _build(self) -> Any:
        if not getattr(self._cls, "needs_judge", True):
            return self._cls(threshold=0.5, **self._options())
        return self._cls(model=judge_of(self.llm), threshold=0.5)

    def _options(self) -> dict[str, Any]:
        return {}

    async def ascore(self, **kwargs: Any) -> MetricResult:
        missing = [f for f in self._fields if kwargs.get(f) is None]
        if missing:
            from ....errors import ConfigurationTypeError  # noqa: PLC0415

            # a TypeError, as a missing argument of Ragas' ascore(user_input=..., ...) is
            raise ConfigurationTypeError(f"{type(self).__name__}.ascore() needs {', '.join(missing)}: pass "
                                         f"{', '.join(f'{m}=...' for m in missing)}.")
        sample = SingleTurnSample(**{k: v for k, v in kwargs.items() if k in SingleTurnSample.model_fields})
        metric = self._build()
        metric.name = self.name
        await metric.a_measure(sample_to_case(sample, input_optional=not getattr(metric, "needs_judge", True)))
        return MetricResult(value=metric.score, reason=metric.reason, traces={"verdicts": metric.verdicts})

    def score(self, **kwargs: Any) -> MetricResult:
        return run_sync(self.ascore(**kwargs))

    async def abatch_score(self, inputs: list[dict[str, Any]]) -> list[MetricResult]:
        import asyncio  # noqa: PLC0415

        return list(await asyncio.gather(*(self.ascore(**i) for i in inputs)))

    def batch_score(self, inputs: list[dict[str, Any]]) -> list[MetricResult]:
        return run_sync(self.abatch_score(inputs))


class ContextPrecisionWithReference(_Collection):
    """Ragas 0.4's ``ContextPrecisionWithReference`` (needs a reference), by ``ContextualPrecisionMetric``."""

    name = "context_precision_with_reference"
    _cls = ContextualPrecisionMetric
    _fields = ("user_input", "reference", "retrieved_contexts")


class ContextPrecision(ContextPrecisionWithReference):
    """Ragas 0.4's ``ContextPrecision`` (the reference-based precision under its short name)."""

    name = "context_precision"


class ContextPrecisionWithoutReference(_Collection):
    """Ragas 0.4's ``ContextPrecisionWithoutReference`` (needs a response), by ``ContextUtilizationMetric``."""

    name = "context_precision_without_reference"
    _cls = ContextUtilizationMetric
    _fields = ("user_input", "response", "retrieved_contexts")


class ContextUtilization(ContextPrecisionWithoutReference):
    """Ragas 0.4's ``ContextUtilization`` (precision against the response under its short name)."""

    name = ContextUtilizationMetric.key  # Ragas' name is our key


class ContextRecall(_Collection):
    """Ragas 0.4's ``ContextRecall`` (user_input, retrieved_contexts, reference), by ``ContextualRecallMetric``."""

    name = "context_recall"
    _cls = ContextualRecallMetric
    _fields = ("user_input", "retrieved_contexts", "reference")


class ContextRelevance(_Collection):
    """Ragas 0.4's ``ContextRelevance`` (user_input, retrieved_contexts), by ``ContextualRelevancyMetric``."""

    name = "context_relevance"
    _cls = ContextualRelevancyMetric
    _fields = ("user_input", "retrieved_contexts")


class Faithfulness(_Collection):
    """Ragas 0.4's ``Faithfulness`` (user_input, response, retrieved_contexts), by ``FaithfulnessMetric``."""

    name = FaithfulnessMetric.key  # Ragas' name is our key
    _cls = FaithfulnessMetric
    _fields = ("user_input", "response", "retrieved_contexts")


class AnswerRelevancy(_Collection):
    """Ragas 0.4's ``AnswerRelevancy`` (user_input, response), by ``AnswerRelevancyMetric`` (statement relevance,
    not generated questions; ``embeddings`` and ``strictness`` are accepted and unused)."""

    name = AnswerRelevancyMetric.key  # Ragas' name is our key
    _cls = AnswerRelevancyMetric
    _fields = ("user_input", "response")


ResponseRelevancy = AnswerRelevancy


class NonLLMContextPrecisionWithReference(_Collection):
    """Ragas 0.4's ``NonLLMContextPrecisionWithReference`` (retrieved_contexts, reference_contexts), no judge."""

    name = "non_llm_context_precision_with_reference"
    _cls: Any = RankedPrecisionMetric
    _fields = ("retrieved_contexts", "reference_contexts")

    def __init__(self, threshold: float = 0.5, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.threshold = float(threshold)

    def _options(self) -> dict[str, Any]:
        return {"similarity_threshold": self.threshold}


class NonLLMContextRecall(NonLLMContextPrecisionWithReference):
    """Ragas 0.4's ``NonLLMContextRecall`` (retrieved_contexts, reference_contexts), no judge."""

    name = "non_llm_context_recall"
    _cls = RecallAtKMetric


class IDBasedContextPrecision(_Collection):
    """Ragas 0.4's ``IDBasedContextPrecision`` (retrieved_context_ids, reference_context_ids), no judge."""

    name = "id_based_context_precision"
    _cls: Any = PrecisionAtKMetric
    _fields = ("retrieved_context_ids", "reference_context_ids")


class IDBasedContextRecall(IDBasedContextPrecision):
    """Ragas 0.4's ``IDBasedContextRecall`` (retrieved_context_ids, reference_context_ids), no judge."""

    name = "id_based_context_recall"
    _cls = RecallAtKMetric

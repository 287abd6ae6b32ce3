"""``deepeval.metrics`` names for the context metrics (contextjudge's own names already follow DeepEval's)."""

from ...metrics import (
    ContextualPrecisionMetric,
    ContextualPrecisionTemplate,
    ContextualRecallMetric,
    ContextualRecallTemplate,
    ContextualRelevancyMetric,
    ContextualRelevancyTemplate,
    TurnContextualPrecisionMetric,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallMetric,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyMetric,
    TurnContextualRelevancyTemplate,
)

__all__ = [
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
]

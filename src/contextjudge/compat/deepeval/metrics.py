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

# DeepEval's older multimodal metric names: the same metrics, since test cases take images directly.
MultimodalContextualPrecisionMetric = ContextualPrecisionMetric
MultimodalContextualRecallMetric = ContextualRecallMetric
MultimodalContextualRelevancyMetric = ContextualRelevancyMetric

__all__ = [
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "MultimodalContextualPrecisionMetric",
    "MultimodalContextualRecallMetric",
    "MultimodalContextualRelevancyMetric",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
]

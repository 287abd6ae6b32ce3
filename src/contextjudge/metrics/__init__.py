"""The context metrics. Every metric takes DeepEval's parameters and has ``measure``, ``a_measure`` and ``a_score``."""

from ..judges.templates import (
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    ContextUtilizationTemplate,
    RubricContextRecallTemplate,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)
from ._base import BaseMetric
from ._formulas import fraction, weighted_cumulative_precision
from ._single import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    RubricContextRecallMetric,
)
from ._turn import TurnContextualPrecisionMetric, TurnContextualRecallMetric, TurnContextualRelevancyMetric

__all__ = [
    "BaseMetric",
    "ContextUtilizationMetric",
    "ContextUtilizationTemplate",
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "RubricContextRecallMetric",
    "RubricContextRecallTemplate",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
    "fraction",
    "weighted_cumulative_precision",
]

# Short names for the CLI and configuration files.
BY_KEY = {
    m.key: m
    for m in (ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric, ContextUtilizationMetric,
              TurnContextualRelevancyMetric, TurnContextualPrecisionMetric, TurnContextualRecallMetric,
              RubricContextRecallMetric)
}

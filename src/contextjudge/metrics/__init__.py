"""The context metrics. Every metric takes DeepEval's parameters and has ``measure``, ``a_measure`` and ``a_score``."""

from ..judges.templates import (
    ContextUtilizationTemplate,
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    RubricContextRecallTemplate,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)
from ._base import BaseMetric
from ._formulas import fraction, weighted_cumulative_precision
from ._single import (
    ContextUtilizationMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
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

"""``deepeval.metrics`` names for the context metrics, with DeepEval's constructors and template classes.

Each also lives at DeepEval's module path: ``contextjudge.compat.deepeval.metrics.contextual_precision`` holds
``ContextualPrecisionMetric`` and ``ContextualPrecisionTemplate``, and so on for recall, relevancy and the three
``turn_contextual_*`` metrics.
"""

from ....metrics import BaseMetric
from .contextual_precision import ContextualPrecisionMetric, ContextualPrecisionTemplate
from .contextual_recall import ContextualRecallMetric, ContextualRecallTemplate
from .contextual_relevancy import ContextualRelevancyMetric, ContextualRelevancyTemplate
from .turn_contextual_precision import TurnContextualPrecisionMetric, TurnContextualPrecisionTemplate
from .turn_contextual_recall import TurnContextualRecallMetric, TurnContextualRecallTemplate
from .turn_contextual_relevancy import TurnContextualRelevancyMetric, TurnContextualRelevancyTemplate

# DeepEval's older multimodal metric names: the same metrics, since test cases take images directly.
MultimodalContextualPrecisionMetric = ContextualPrecisionMetric
MultimodalContextualRecallMetric = ContextualRecallMetric
MultimodalContextualRelevancyMetric = ContextualRelevancyMetric
BaseConversationalMetric = BaseMetric

__all__ = [
    "BaseConversationalMetric",
    "BaseMetric",
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

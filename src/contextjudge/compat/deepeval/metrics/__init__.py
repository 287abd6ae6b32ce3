"""``deepeval.metrics`` names for the context metrics, faithfulness and answer relevancy, with DeepEval's constructors and template classes.

Each also lives at DeepEval's module path: ``contextjudge.compat.deepeval.metrics.contextual_precision`` holds
``ContextualPrecisionMetric`` and ``ContextualPrecisionTemplate``, and so on for recall, relevancy and the three
``turn_contextual_*`` metrics, ``faithfulness`` and ``answer_relevancy``.
"""

from ....metrics import BaseMetric
from .answer_relevancy import AnswerRelevancyMetric, AnswerRelevancyTemplate
from .contextual_precision import ContextualPrecisionMetric, ContextualPrecisionTemplate
from .contextual_recall import ContextualRecallMetric, ContextualRecallTemplate
from .contextual_relevancy import ContextualRelevancyMetric, ContextualRelevancyTemplate
from .faithfulness import FaithfulnessMetric, FaithfulnessTemplate
from .turn_contextual_precision import TurnContextualPrecisionMetric, TurnContextualPrecisionTemplate
from .turn_contextual_recall import TurnContextualRecallMetric, TurnContextualRecallTemplate
from .turn_contextual_relevancy import TurnContextualRelevancyMetric, TurnContextualRelevancyTemplate

# DeepEval's older multimodal metric names: the same metrics, since test cases take images directly.
MultimodalContextualPrecisionMetric = ContextualPrecisionMetric
MultimodalContextualRecallMetric = ContextualRecallMetric
MultimodalContextualRelevancyMetric = ContextualRelevancyMetric
MultimodalFaithfulnessMetric = FaithfulnessMetric
MultimodalAnswerRelevancyMetric = AnswerRelevancyMetric
BaseConversationalMetric = BaseMetric

__all__ = [
    "AnswerRelevancyMetric",
    "AnswerRelevancyTemplate",
    "BaseConversationalMetric",
    "BaseMetric",
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "MultimodalAnswerRelevancyMetric",
    "MultimodalContextualPrecisionMetric",
    "MultimodalContextualRecallMetric",
    "MultimodalContextualRelevancyMetric",
    "MultimodalFaithfulnessMetric",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
]

"""The public spelling of the judge prompt templates (behind ``contextjudge.judges``).

Subclass a template and pass it as a metric's ``evaluation_template`` to change what the judge is asked.
"""

from .judges import (
    AnswerRelevancyTemplate,
    BaseTemplate,
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    ContextUtilizationTemplate,
    FaithfulnessTemplate,
    RubricContextRecallTemplate,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)

__all__ = ["AnswerRelevancyTemplate", "BaseTemplate", "ContextUtilizationTemplate", "ContextualPrecisionTemplate", "ContextualRecallTemplate",
           "ContextualRelevancyTemplate", "FaithfulnessTemplate", "RubricContextRecallTemplate", "TurnContextualPrecisionTemplate",
           "TurnContextualRecallTemplate", "TurnContextualRelevancyTemplate"]

"""The public spelling of the judge prompt templates (behind ``contextjudge.judges``).

Subclass a template and pass it as a metric's ``evaluation_template`` to change what the judge is asked.
"""

from .judges import (
    BaseTemplate,
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    ContextUtilizationTemplate,
    RubricContextRecallTemplate,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)

__all__ = ["BaseTemplate", "ContextUtilizationTemplate", "ContextualPrecisionTemplate", "ContextualRecallTemplate",
           "ContextualRelevancyTemplate", "RubricContextRecallTemplate", "TurnContextualPrecisionTemplate",
           "TurnContextualRecallTemplate", "TurnContextualRelevancyTemplate"]

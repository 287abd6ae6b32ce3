# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-relevancy (Customize Your Template); the measure(...)
# placeholder filled in
from contextjudge.compat.deepeval.metrics.contextual_relevancy import ContextualRelevancyTemplate
from contextjudge.compat.deepeval.metrics import ContextualRelevancyMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase


class CustomTemplate(ContextualRelevancyTemplate):
    @staticmethod
    def generate_verdicts(input: str, context: str):
        return f"""Split the context into statements and say for each whether it is relevant to the input. JSON with
a "verdicts" list, each with "verdict" ("yes"/"no") and "statement".

Input:
{input}

Context:
{context}

JSON:
"""


metric = ContextualRelevancyMetric(evaluation_template=CustomTemplate, model="local")
metric.measure(LLMTestCase(input="How long can I borrow a book?", actual_output="Three weeks.",
                           retrieval_context=["Loans last three weeks. The cafe opens at nine."]))
print(metric.score, metric.reason)

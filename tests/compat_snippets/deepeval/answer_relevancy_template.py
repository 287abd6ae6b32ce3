# peer: deepeval
# source: https://deepeval.com/docs/metrics-answer-relevancy (Customize Your Template); List imported, as on DeepEval
from typing import List

from contextjudge.compat.deepeval.metrics import AnswerRelevancyMetric
from contextjudge.compat.deepeval.metrics.answer_relevancy import AnswerRelevancyTemplate
from contextjudge.compat.deepeval.test_case import LLMTestCase


class CustomTemplate(AnswerRelevancyTemplate):
    @staticmethod
    def generate_verdicts(input: str, statements: List[str]):
        return f"""For each statement, say whether it helps answer the input. JSON with a "verdicts" list:
"yes" or "no" and a reason for each statement.

Input:
{input}

Statements:
{statements}

JSON:
"""


metric = AnswerRelevancyMetric(evaluation_template=CustomTemplate, model="local")
metric.measure(LLMTestCase(input="How long can I borrow a book?", actual_output="A book can be borrowed for three weeks."))
print(metric.score, metric.reason)

# peer: deepeval
# source: https://deepeval.com/docs/metrics-faithfulness (Customize Your Template); List imported, as on DeepEval
from typing import List

from contextjudge.compat.deepeval.metrics import FaithfulnessMetric
from contextjudge.compat.deepeval.metrics.faithfulness import FaithfulnessTemplate
from contextjudge.compat.deepeval.test_case import LLMTestCase


class CustomTemplate(FaithfulnessTemplate):
    @staticmethod
    def generate_verdicts(claims: List[str], retrieval_context: str):
        return f"""For each claim, say whether the retrieval context backs it up. JSON with a "verdicts" list:
"yes" or "no" and a reason for each claim.

Retrieval context:
{retrieval_context}

Claims:
{claims}

JSON:
"""


metric = FaithfulnessMetric(evaluation_template=CustomTemplate, model="local")
metric.measure(LLMTestCase(input="How long can I borrow a book?",
                           actual_output="A book can be borrowed for three weeks.",
                           retrieval_context=["Loans last three weeks; a book can be borrowed for three weeks."]))
print(metric.score, metric.reason)

# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-recall (Customize Your Template); List imported and the
# measure(...) placeholder filled in, as on DeepEval itself
from typing import List

from contextjudge.compat.deepeval.metrics.contextual_recall import ContextualRecallTemplate
from contextjudge.compat.deepeval.metrics import ContextualRecallMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase


class CustomTemplate(ContextualRecallTemplate):
    @staticmethod
    def generate_verdicts(expected_output: str, retrieval_context: List[str]):
        return f"""Go through the expected output one sentence at a time and say whether the retrieved documents
back that sentence up. JSON with a "verdicts" list: "yes" or "no" and a reason for each sentence.

Expected output:
{expected_output}

Retrieved documents:
{retrieval_context}

JSON:
"""


metric = ContextualRecallMetric(evaluation_template=CustomTemplate, model="local")
metric.measure(LLMTestCase(input="How long can I borrow a book?",
                           expected_output="Books can be borrowed for three weeks. Loans can be renewed twice.",
                           retrieval_context=["Loans last three weeks.", "The cafe opens at nine."]))
print(metric.score, metric.reason)

# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-precision (Customize Your Template); the page's block uses
# List without importing it and calls metric.measure(...) with a placeholder: re-created with both filled in
from typing import List

from contextjudge.compat.deepeval.metrics.contextual_precision import ContextualPrecisionTemplate
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase


class CustomTemplate(ContextualPrecisionTemplate):
    @staticmethod
    def generate_verdicts(input: str, expected_output: str, retrieval_context: List[str]):
        return f"""For the question and the answer it should get, decide for every document below whether it helps
to reach that answer. Give a JSON object with a "verdicts" list, one verdict ("yes" or "no") with a short reason
per document, as many verdicts as documents.

Question:
{input}

Answer it should get:
{expected_output}

Documents:
{retrieval_context}

JSON:
"""


metric = ContextualPrecisionMetric(evaluation_template=CustomTemplate, model="local")
metric.measure(LLMTestCase(input="How long can I borrow a book?",
                           expected_output="Books can be borrowed for three weeks.",
                           retrieval_context=["Loans last three weeks.", "The cafe opens at nine."]))
print(metric.score, metric.reason)

# peer: deepeval
# source: https://deepeval.com/docs/metrics-answer-relevancy (As a standalone)
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import AnswerRelevancyMetric

metric = AnswerRelevancyMetric(threshold=0.7, model="local", include_reason=True)
test_case = LLMTestCase(input="How long can I borrow a book?", actual_output="A book can be borrowed for three weeks.")

metric.measure(test_case)
print(metric.score, metric.reason)

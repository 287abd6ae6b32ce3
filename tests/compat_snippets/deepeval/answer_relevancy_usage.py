# peer: deepeval
# source: https://deepeval.com/docs/metrics-answer-relevancy (Usage)
from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import AnswerRelevancyMetric

metric = AnswerRelevancyMetric(
    threshold=0.7,
    model="local",
    include_reason=True
)
test_case = LLMTestCase(
    input="How long can I borrow a book?",
    # Replace this with the actual output from your LLM application
    actual_output="A book can be borrowed for three weeks."
)

# To run metric as a standalone
# metric.measure(test_case)
# print(metric.score, metric.reason)

evaluate(test_cases=[test_case], metrics=[metric])

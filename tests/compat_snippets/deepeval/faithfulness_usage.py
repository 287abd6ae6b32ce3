# peer: deepeval
# source: https://deepeval.com/docs/metrics-faithfulness (Usage)
from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import FaithfulnessMetric

# the answer your app gave
actual_output = "A book can be borrowed for three weeks."

# what your retriever returned
retrieval_context = ["Loans last three weeks; a book can be borrowed for three weeks and renewed twice."]

metric = FaithfulnessMetric(
    threshold=0.7,
    model="local",
    include_reason=True
)
test_case = LLMTestCase(
    input="How long can I borrow a book?",
    actual_output=actual_output,
    retrieval_context=retrieval_context
)

# To run metric as a standalone
# metric.measure(test_case)
# print(metric.score, metric.reason)

evaluate(test_cases=[test_case], metrics=[metric])

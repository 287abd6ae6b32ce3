# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-precision (Usage, text based)
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval import evaluate

# the answer your app gave
actual_output = "You may keep a book for three weeks."

# the answer the RAG generator should give
expected_output = "Books can be borrowed for three weeks and renewed twice."

# what your retriever returned
retrieval_context = ["Loans last three weeks; each loan can be renewed two times.", "The library cafe opens at nine."]

metric = ContextualPrecisionMetric(
    threshold=0.7,
    model="local",
    include_reason=True
)
test_case = LLMTestCase(
    input="How long can I borrow a book?",
    actual_output=actual_output,
    expected_output=expected_output,
    retrieval_context=retrieval_context
)

# metric.measure(test_case)
# print(metric.score, metric.reason)

evaluate(test_cases=[test_case], metrics=[metric])

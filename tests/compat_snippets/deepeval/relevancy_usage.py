# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-relevancy (Usage, text based)
from contextjudge.compat.deepeval.metrics import ContextualRelevancyMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval import evaluate

# the answer your app gave
actual_output = "You may keep a book for three weeks."

# what your retriever returned
retrieval_context = ["Loans last three weeks; each loan can be renewed two times.", "The library cafe opens at nine."]

metric = ContextualRelevancyMetric(
    threshold=0.7,
    model="local",
    include_reason=True
)
test_case = LLMTestCase(
    input="How long can I borrow a book?",
    actual_output=actual_output,
    retrieval_context=retrieval_context
)

# metric.measure(test_case)
# print(metric.score, metric.reason)

evaluate(test_cases=[test_case], metrics=[metric])

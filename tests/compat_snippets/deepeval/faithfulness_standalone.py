# peer: deepeval
# source: https://deepeval.com/docs/metrics-faithfulness (As a standalone)
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import FaithfulnessMetric

metric = FaithfulnessMetric(threshold=0.7, model="local", include_reason=True, truths_extraction_limit=20,
                            penalize_ambiguous_claims=True, strict_mode=False, async_mode=False)
test_case = LLMTestCase(
    input="How long can I borrow a book?",
    actual_output="A book can be borrowed for three weeks.",
    retrieval_context=["Loans last three weeks; a book can be borrowed for three weeks and renewed twice."]
)

metric.measure(test_case)
print(metric.score, metric.reason)

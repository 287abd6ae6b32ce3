# peer: deepeval
# source: https://deepeval.com/docs/getting-started-rag (evaluate the retriever and the generator together: the
# RAG metrics on one LLMTestCase with evaluate(test_cases=, metrics=)); the judge is CONTEXTJUDGE_MODEL (local)
from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import (
    AnswerRelevancyMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    FaithfulnessMetric,
)

answer_relevancy = AnswerRelevancyMetric()
faithfulness = FaithfulnessMetric()
contextual_precision = ContextualPrecisionMetric()
contextual_recall = ContextualRecallMetric()
contextual_relevancy = ContextualRelevancyMetric()

test_case = LLMTestCase(
    input="How long can I borrow a book?",
    actual_output="A book can be borrowed for three weeks.",
    expected_output="Books can be borrowed for three weeks.",
    retrieval_context=["Loans last three weeks: a book can be borrowed for three weeks.",
                       "The library cafe opens at nine."]
)

evaluate(
    test_cases=[test_case],
    metrics=[answer_relevancy, faithfulness, contextual_precision, contextual_recall, contextual_relevancy]
)

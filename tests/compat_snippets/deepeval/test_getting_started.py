# peer: deepeval
# source: https://deepeval.com/docs/getting-started (Create your first test case: test_example.py with
# AnswerRelevancyMetric and assert_test, run by pytest); our own example data, the judge is CONTEXTJUDGE_MODEL (local)
from contextjudge.compat.deepeval import assert_test
from contextjudge.compat.deepeval.test_case import LLMTestCase
from contextjudge.compat.deepeval.metrics import AnswerRelevancyMetric


def test_case():
    answer_relevancy_metric = AnswerRelevancyMetric(threshold=0.5)
    test_case = LLMTestCase(
        input="How long can I borrow a book?",
        # Replace this with the actual output from your LLM application
        actual_output="A book can be borrowed for three weeks.",
        retrieval_context=["Loans last three weeks: a book can be borrowed for three weeks."]
    )
    assert_test(test_case, [answer_relevancy_metric])

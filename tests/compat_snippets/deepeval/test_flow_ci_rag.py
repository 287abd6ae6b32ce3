# peer: deepeval
# source: https://deepeval.com/docs/evaluation-unit-testing-in-ci-cd (test_llm_app over dataset.goldens with the RAG
# metrics: AnswerRelevancyMetric, FaithfulnessMetric, assert_test(test_case, metrics))
import pytest

from contextjudge.compat.deepeval import assert_test
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import AnswerRelevancyMetric, FaithfulnessMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase


def your_llm_app(query: str):
    return ("A book can be borrowed for three weeks.",
            ["Loans last three weeks: a book can be borrowed for three weeks."])


dataset = EvaluationDataset(goldens=[Golden(input="How long can I borrow a book?")])


@pytest.mark.parametrize("golden", dataset.goldens)
def test_llm_app(golden: Golden):
    res, text_chunks = your_llm_app(golden.input)
    test_case = LLMTestCase(input=golden.input, actual_output=res, retrieval_context=text_chunks)
    assert_test(test_case=test_case, metrics=[AnswerRelevancyMetric(), FaithfulnessMetric()])

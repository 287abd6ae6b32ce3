# peer: deepeval
# source: https://deepeval.com/docs/evaluation-unit-testing-in-ci-cd (parametrize over dataset.goldens, build an
# LLMTestCase, assert_test(test_case=, metrics=)) with a context metric
import pytest

from contextjudge.compat.deepeval import assert_test
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import ContextualRelevancyMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase


def your_llm_app(query: str):
    return "Three weeks.", ["Borrowing period: a book can be borrowed for three weeks."]


dataset = EvaluationDataset(goldens=[Golden(input="How long can I borrow a book?")])


@pytest.mark.parametrize("golden", dataset.goldens)
def test_llm_app(golden: Golden):
    answer, chunks = your_llm_app(golden.input)
    test_case = LLMTestCase(input=golden.input, actual_output=answer, retrieval_context=chunks)
    assert_test(test_case=test_case, metrics=[ContextualRelevancyMetric(model="local")])

# peer: deepeval
# source: https://deepeval.com/docs/evaluation-end-to-end-single-turn (CI/CD: assert_test(golden=, metrics=) on
# the trace of the @observe app called in the test) with a context metric
import pytest

from contextjudge.compat.deepeval import assert_test
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import ContextualRecallMetric
from contextjudge.compat.deepeval.tracing import observe, update_current_trace


@observe
def my_ai_agent(question: str) -> str:
    chunks = ["Loans last three weeks.", "Each loan can be renewed twice."]
    update_current_trace(input=question, actual_output=chunks[0], retrieval_context=chunks)
    return chunks[0]


dataset = EvaluationDataset(goldens=[
    Golden(input="How long do loans last?", expected_output="Loans last three weeks. Each loan can be renewed twice."),
])


@pytest.mark.parametrize("golden", dataset.goldens)
def test_llm_app(golden: Golden):
    my_ai_agent(golden.input)
    assert_test(golden=golden, metrics=[ContextualRecallMetric(model="local")])

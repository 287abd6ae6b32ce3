# peer: deepeval
# source: https://deepeval.com/docs/evaluation-component-level-llm-evals (CI/CD: assert_test(golden=golden) after
# calling the traced app in the test; the spans carry the metrics)
import pytest

from contextjudge.compat.deepeval import assert_test
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
from contextjudge.compat.deepeval.tracing import observe, update_current_span


@observe(metrics=[ContextualPrecisionMetric(model="local", threshold=0.5)])
def my_ai_agent(question: str) -> str:
    chunks = ["Loans last three weeks.", "The cafe opens at nine."]
    update_current_span(input=question, actual_output=chunks[0], retrieval_context=chunks)
    return chunks[0]


dataset = EvaluationDataset(goldens=[Golden(input="How long do loans last?", expected_output="Loans last three weeks.")])


@pytest.mark.parametrize("golden", dataset.goldens)
def test_my_ai_agent(golden: Golden):
    my_ai_agent(golden.input)
    assert_test(golden=golden)

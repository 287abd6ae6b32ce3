# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-relevancy (Within components); the page's test case is a placeholder
# (input="...", actual_output="...") that the metric cannot score on DeepEval either: filled in with the fields it needs
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.tracing import observe, update_current_span
from contextjudge.compat.deepeval.metrics import ContextualRelevancyMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase

metric = ContextualRelevancyMetric(threshold=0.7, model="local", include_reason=True)


@observe(metrics=[metric])
def inner_component():
    # set the test case at run time
    test_case = LLMTestCase(input="How long can I borrow a book?", actual_output="Three weeks.",
                            retrieval_context=["Borrowing period: a book can be borrowed for three weeks."])
    update_current_span(test_case=test_case)
    return


@observe
def llm_app(input: str):
    inner_component()
    return


dataset = EvaluationDataset(goldens=[Golden(input="How long can I borrow a book?",
                                            expected_output="A book can be borrowed for three weeks.")])
for golden in dataset.evals_iterator():
    llm_app(golden.input)

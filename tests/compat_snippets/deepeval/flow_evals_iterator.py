# peer: deepeval
# source: https://deepeval.com/docs/evaluation-component-level-llm-evals and evaluation-end-to-end-single-turn
# (log_hyperparameters, dataset.evals_iterator(metrics=...) over an @observe app) with the context metrics
from contextjudge.compat import deepeval
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.compat.deepeval.tracing import observe, update_current_span

DOCS = ["Loans last three weeks.", "The cafe opens at nine.", "Late returns cost 20 cents a day."]


@observe(type="retriever", metrics=[ContextualRelevancyMetric(model="local")])
def retrieve(question: str) -> list[str]:
    words = set(question.lower().split())
    return sorted(DOCS, key=lambda d: -len(words & set(d.lower().split())))[:2]


@observe(metrics=[ContextualPrecisionMetric(model="local")])
def my_ai_agent(question: str) -> str:
    chunks = retrieve(question)
    answer = chunks[0]
    update_current_span(input=question, actual_output=answer, retrieval_context=chunks)
    return answer


@deepeval.log_hyperparameters
def hyperparameters():
    return {"model": "local", "top_k": 2}


dataset = EvaluationDataset(goldens=[Golden(input="How long do loans last?", expected_output="Three weeks."),
                                     Golden(input="What do late returns cost?", expected_output="20 cents a day.")])
for golden in dataset.evals_iterator():
    my_ai_agent(golden.input)

# peer: deepeval
# source: https://deepeval.com/docs/evaluation-end-to-end-single-turn (build test cases from goldens, evaluate,
# AsyncConfig) with the context metrics
from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.evaluate import AsyncConfig
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, ContextualRecallMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase

DOCS = {"borrow": ["Loans last three weeks.", "The cafe opens at nine."],
        "fine": ["Late returns cost 20 cents a day.", "Members may borrow ten items."]}


def your_llm_app(question: str):
    chunks = DOCS["fine" if "late" in question else "borrow"]
    return chunks[0], chunks


dataset = EvaluationDataset(goldens=[
    Golden(input="How long can I borrow a book?", expected_output="Three weeks."),
    Golden(input="What if I return a book late?", expected_output="Late returns cost 20 cents a day."),
])
for golden in dataset.goldens:
    answer, retrieved_chunks = your_llm_app(golden.input)
    dataset.add_test_case(
        LLMTestCase(
            input=golden.input,
            actual_output=answer,
            expected_output=golden.expected_output,
            retrieval_context=retrieved_chunks,
        )
    )

evaluate(
    test_cases=dataset.test_cases,
    metrics=[ContextualPrecisionMetric(model="local"), ContextualRecallMetric(model="local")],
    async_config=AsyncConfig(run_async=False, max_concurrent=20, throttle_value=0),
)

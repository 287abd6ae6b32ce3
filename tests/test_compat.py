"""The documented examples of DeepEval, Ragas and Opik run after changing only the import and the model argument."""

import pytest

from contextjudge.testing import FakeJudge

JUDGE = FakeJudge(default="yes", rubric_score=0.9)


def test_deepeval_contextual_precision_example():
    from contextjudge.compat.deepeval import evaluate
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
    from contextjudge.compat.deepeval.test_case import LLMTestCase

    actual_output = "We offer a 30-day full refund at no extra cost."
    expected_output = "You are eligible for a 30 day full refund at no extra cost."
    retrieval_context = ["All customers are eligible for a 30 day full refund at no extra cost."]
    metric = ContextualPrecisionMetric(threshold=0.7, model=JUDGE, include_reason=True)
    test_case = LLMTestCase(input="What if these shoes don't fit?", actual_output=actual_output,
                            expected_output=expected_output, retrieval_context=retrieval_context)
    metric.measure(test_case)
    assert metric.score == 1.0 and metric.reason
    result = evaluate(test_cases=[test_case], metrics=[metric])
    assert result.test_results[0].metrics_data[0].success


def test_deepeval_contextual_recall_example_with_extra_fields():
    from contextjudge.compat.deepeval import ContextualRecallMetric, LLMTestCase, evaluate

    test_case = LLMTestCase(input="What if these shoes don't fit?",
                            actual_output="We offer a 30-day full refund at no extra cost.",
                            expected_output="You are eligible for a 30 day full refund at no extra cost.",
                            retrieval_context=["All customers are eligible for a 30 day full refund at no extra cost."],
                            tools_called=[], token_cost=0.1)
    metric = ContextualRecallMetric(threshold=0.7, model=JUDGE, include_reason=True)
    metric.measure(test_case)
    assert metric.score == 1.0
    evaluate(test_cases=[test_case], metrics=[metric])


def test_deepeval_turn_contextual_relevancy_example():
    from contextjudge.compat.deepeval import evaluate
    from contextjudge.compat.deepeval.metrics import TurnContextualRelevancyMetric
    from contextjudge.compat.deepeval.test_case import ConversationalTestCase, Turn

    content = "We offer a 30-day full refund at no extra cost."
    retrieval_context = ["All customers are eligible for a 30 day full refund at no extra cost."]
    convo_test_case = ConversationalTestCase(
        turns=[Turn(role="user", content="What if these shoes don't fit?"),
               Turn(role="assistant", content=content, retrieval_context=retrieval_context)],
        expected_outcome="The chatbot must explain the store policies like refunds, discounts, ..etc.",
    )
    metric = TurnContextualRelevancyMetric(threshold=0.5, model=JUDGE)
    metric.measure(convo_test_case)
    assert metric.score == 1.0
    res = evaluate(test_cases=[convo_test_case], metrics=[metric])
    assert res.test_results[0].metrics_data[0].score == 1.0


def test_ragas_context_utilization_example_old_columns():
    from contextjudge.compat.ragas import context_utilization, evaluate

    data_samples = {
        "question": ["When was the first super bowl?", "Who won the most super bowls?"],
        "answer": ["The first superbowl was held on Jan 15, 1967",
                   "The most super bowls have been won by The New England Patriots"],
        "contexts": [["The First AFL-NFL World Championship Game was an American football game played on January 15, "
                      "1967, at the Los Angeles Memorial Coliseum in Los Angeles."],
                     ["The Green Bay Packers...Green Bay, Wisconsin.", "The Packers compete...Football Conference"]],
    }
    score = evaluate(data_samples, metrics=[context_utilization], llm=JUDGE)
    df = score.to_pandas()
    assert list(df["context_utilization"]) == [1.0, 1.0]
    assert "question" in df.columns


@pytest.mark.parametrize("form", ["list_of_dicts", "dataframe"])
def test_ragas_new_columns_and_shapes(form):
    import pandas as pd

    from contextjudge.compat.ragas import context_precision, context_recall, evaluate

    rows = [{"user_input": "q?", "response": "Paris.", "retrieved_contexts": ["Paris is the capital of France."],
             "reference": "Paris is the capital of France."}]
    data = rows if form == "list_of_dicts" else pd.DataFrame(rows)
    res = evaluate(data, metrics=[context_precision, context_recall], llm=FakeJudge(default="yes"))
    assert res["context_precision"] == [1.0] and res["context_recall"] == [1.0]
    assert "context_precision" in repr(res)


def test_ragas_datasets_dataset_if_installed():
    datasets = pytest.importorskip("datasets")
    from contextjudge.compat.ragas import context_utilization, evaluate

    ds = datasets.Dataset.from_dict({"question": ["q"], "answer": ["a"], "contexts": [["a b c"]]})
    assert evaluate(ds, metrics=[context_utilization], llm=FakeJudge(default="yes"))["context_utilization"] == [1.0]


def test_opik_context_recall_example():
    from contextjudge.compat.opik import ContextRecall

    metric = ContextRecall(model=JUDGE)
    score = metric.score(input="What is the capital of France?", output="The capital of France is Paris.",
                         expected_output="Paris", context=["France is a country in Europe."])
    assert score.value == 0.9 and score.reason and score.name == "context_recall_metric"


async def test_opik_ascore_and_failure_is_flagged_not_raised():
    from contextjudge.compat.opik import ContextRecall
    from contextjudge.testing import JudgeHTTPError

    metric = ContextRecall(model=FakeJudge(failures=[JudgeHTTPError(401)]))
    score = await metric.ascore(input="q", output="a", expected_output="b", context=None)
    assert score.scoring_failed and score.value == 0.0 and "credentials" in score.reason

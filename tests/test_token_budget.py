"""Long contexts are split by the token budget so a small judge's window is never overflowed, and the answers of
the parts are merged into the same scores one request would give."""

import pytest

from contextjudge import JudgeOptions, LLMTestCase, evaluate
from contextjudge.judges._protocol import REQUEST_KEY, JudgeRequest
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
from contextjudge.testing import FakeJudge

FILLER = "This paragraph talks about the weather in a town nobody has heard of, at some length. " * 6  # ~130 tokens


def _case(n_nodes=30, useful=(2, 17, 29)):
    nodes = [f"Node {k}: {'Paris is the capital of France. ' if k in useful else ''}{FILLER}"
             for k in range(1, n_nodes + 1)]
    return LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France. The Seine flows through it.",
                       retrieval_context=nodes)


def _judge():
    return FakeJudge(rules={"Paris is the capital": "yes", "Seine": "no"}, default="no")


def _requests(judge):
    return [JudgeRequest.model_validate(c["messages"][-1].additional_kwargs[REQUEST_KEY]) for c in judge.calls]


def _approx(text):
    return max(1, len(text) // 4)


@pytest.mark.parametrize("metric_cls", [ContextualPrecisionMetric, ContextualRelevancyMetric, ContextualRecallMetric])
def test_a_small_budget_splits_the_request_and_gives_the_same_score(metric_cls):
    whole, small = _judge(), _judge()
    budget = 600
    one = evaluate([_case()], [metric_cls(model=whole)], show_progress=False).test_results[0].metrics_data[0]
    split = evaluate([_case()], [metric_cls(model=small, judge_options=JudgeOptions(token_budget=budget))],
                     show_progress=False).test_results[0].metrics_data[0]
    assert len(whole.calls) == 1 and len(small.calls) > 1
    assert split.error is None and split.score == pytest.approx(one.score)
    assert [v["verdict"] for v in split.verdicts] == [v["verdict"] for v in one.verdicts]
    for req in _requests(small):  # every part fits the budget: items and context are each within it
        assert sum(_approx(i.text) + 8 for i in req.items) <= budget or len(req.items) == 1
        assert sum(_approx(c.text) + 8 for c in req.context) <= budget or len(req.context) == 1


def test_every_item_is_asked_exactly_once_and_ids_keep_their_ranks():
    judge = _judge()
    res = evaluate([_case()], [ContextualPrecisionMetric(model=judge, judge_options=JudgeOptions(token_budget=500))],
                   show_progress=False).test_results[0].metrics_data[0]
    asked = [i.id for req in _requests(judge) for i in req.items]
    assert sorted(asked, key=lambda s: int(s[1:])) == [f"n{k}" for k in range(1, 31)]
    assert len(asked) == len(set(asked))
    assert [v["rank"] for v in res.verdicts if v["verdict"] == "yes"] == [2, 17, 29]
    # weighted cumulative precision of useful ranks 2, 17, 29
    assert res.score == pytest.approx((1 / 2 + 2 / 17 + 3 / 29) / 3)


def test_recall_support_found_in_any_context_part_counts_and_supporting_ranks_are_merged():
    judge = _judge()
    res = evaluate([_case()], [ContextualRecallMetric(model=judge, judge_options=JudgeOptions(token_budget=700))],
                   show_progress=False).test_results[0].metrics_data[0]
    reqs = _requests(judge)
    assert len({tuple(c.id for c in r.context) for r in reqs}) > 1  # the context itself was split
    first, second = res.verdicts
    assert first["verdict"] == "yes" and second["verdict"] == "no"
    assert set(first["supporting_ranks"]) == {2, 17, 29}  # from different parts of the context
    assert res.score == pytest.approx(0.5)


def test_a_single_item_larger_than_the_budget_goes_alone_rather_than_being_cut():
    judge = _judge()
    huge = "Paris is the capital of France. " + FILLER * 10
    case = LLMTestCase(input="capital of France?", expected_output="Paris.",
                       retrieval_context=["short node about Rome", huge, "another short node"])
    res = evaluate([case], [ContextualPrecisionMetric(model=judge, judge_options=JudgeOptions(token_budget=200))],
                   show_progress=False).test_results[0].metrics_data[0]
    alone = [r for r in _requests(judge) if any(i.text == huge for i in r.items)]
    assert len(alone) == 1 and len(alone[0].items) == 1 and alone[0].items[0].text == huge
    assert [v["verdict"] for v in res.verdicts] == ["no", "yes", "no"]


def test_a_metrics_own_judge_options_hold_inside_evaluate_not_only_in_measure():
    from contextjudge.testing import JudgeHTTPError

    judge = FakeJudge(failures=[JudgeHTTPError(503)] * 3)
    fast = JudgeOptions(max_attempts=2, backoff_initial=0.0, backoff_max=0.0)
    res = evaluate([_case(3)], [ContextualPrecisionMetric(model=judge, judge_options=fast)],
                   show_progress=False).test_results[0].metrics_data[0]
    assert len(judge.calls) == 2  # the metric's 2 attempts, not the run's default 6
    assert res.error is not None and "2 attempts" in res.error

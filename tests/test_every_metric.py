"""Every metric, single-turn and turn, through each judge behaviour the core must handle."""

import pytest

from contextjudge import ConversationalTestCase, JudgeOptions, JudgeUnavailableError, LLMTestCase, Turn
from contextjudge.metrics import BY_KEY, JUDGE_FREE
from contextjudge.testing import FakeJudge, JudgeHTTPError

JUDGED = sorted(set(BY_KEY) - JUDGE_FREE)  # the ranking metrics call no judge: tested in test_rag_metrics.py

FAST = JudgeOptions(backoff_initial=0.001, backoff_max=0.01)
SINGLE = LLMTestCase(input="What is the refund window?", actual_output="Refunds are accepted for 30 days.",
                     expected_output="Refunds are accepted within 30 days. Gift cards are excluded.",
                     retrieval_context=["Refunds are accepted within 30 days of purchase.", "Gift cards are excluded.",
                                        "Our office is in Lyon."])
CONVO = ConversationalTestCase(turns=[
    Turn(role="user", content="What is the refund window?"),
    Turn(role="assistant", content="30 days.", retrieval_context=SINGLE.retrieval_context),
], expected_outcome="Refunds are accepted within 30 days. Gift cards are excluded.")


def case_for(metric):
    return CONVO if metric.conversational else SINGLE


@pytest.fixture(params=JUDGED)
def metric_cls(request):
    return BY_KEY[request.param]


@pytest.mark.parametrize("style", ["native", "prose"])
def test_answers_natively_or_in_prose(metric_cls, style):
    judge = FakeJudge(style=style, rubric_score=0.7)
    m = metric_cls(model=judge, judge_options=FAST)
    score = m.measure(case_for(m))
    assert 0.0 <= score <= 1.0 and m.error is None and m.reason
    assert {c["method"] for c in judge.calls} == {"json_schema" if style == "native" else "text"}


@pytest.mark.parametrize("key", [k for k in JUDGED if k != "rubric_context_recall"])  # the rubric has no ids
def test_reasks_an_omitted_id(key):
    metric_cls = BY_KEY[key]
    ids = {"n1", "s1", "n1.s1"}
    judge = FakeJudge(omit_ids=ids)
    m = metric_cls(model=judge, judge_options=FAST)
    m.measure(case_for(m))
    assert m.error is None
    assert len(judge.calls) == 2 and set(judge.calls[1]["ids"]) <= ids


def test_rate_limited_twice_then_succeeds(metric_cls):
    judge = FakeJudge(failures=[JudgeHTTPError(429, retry_after=0)] * 2)
    m = metric_cls(model=judge, judge_options=FAST)
    assert 0.0 <= m.measure(case_for(m)) <= 1.0
    assert len(judge.calls) == 3


def test_authentication_error_fails_fast(metric_cls):
    judge = FakeJudge(failures=[JudgeHTTPError(401)] * 3)
    m = metric_cls(model=judge, judge_options=FAST)
    with pytest.raises(JudgeUnavailableError, match="API key"):
        m.measure(case_for(m))
    assert len(judge.calls) == 1

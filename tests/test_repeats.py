"""Judge repeats: a sampling judge is asked k times past the verdict cache, the verdict is the majority (a tie keeps
the first repeat's, and says so), each verdict carries its votes and agreement, the case's score spread is the
variance of the repeats' scores, and a deterministic judge is asked once and says so."""

from __future__ import annotations

import logging

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.errors import ConfigurationError
from contextjudge.judges._context import RunContext
from contextjudge.judges._options import JudgeOptions
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    RubricContextRecallMetric,
)
from contextjudge.testing import FakeJudge

CASE = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                   expected_output="The capital of France is Paris. It lies on the Seine.",
                   retrieval_context=["Paris is the capital of France.", "Lyon is a large French city.",
                                      "Bread is baked from flour."])


def sampling(**kw) -> FakeJudge:
    return FakeJudge(temperature=0.7, default="no", **kw)


def one(judge, metric_cls=ContextualPrecisionMetric, k=3, cases=(CASE,), **kw):
    res = evaluate(list(cases), [metric_cls(model=judge)], show_progress=False, repeats=k, **kw)
    return res, res.test_results[0].metrics_data[0]


def test_the_majority_wins_and_each_verdict_carries_its_votes():
    judge = sampling(sequences={"Paris": ["yes", "no", "yes"], "Lyon": ["no", "yes", "yes"]})
    res, m = one(judge)
    assert len(judge.calls) == 3
    by_id = {v["id"]: v for v in m.verdicts}
    assert by_id["n1"]["votes"] == ["yes", "no", "yes"] and by_id["n1"]["verdict"] == "yes"
    assert by_id["n1"]["agreement"] == pytest.approx(2 / 3)
    assert by_id["n2"]["verdict"] == "yes" and by_id["n3"]["votes"] == ["no"] * 3
    assert by_id["n3"]["agreement"] == 1.0
    # repeat scores: [y, n, n] -> 1.0; [n, y, n] -> 0.5; [y, y, n] -> 1.0; majority [y, y, n] -> 1.0
    assert m.score == 1.0
    assert m.score_spread == pytest.approx(1 / 12)  # sample variance of 1, 0.5, 1: mean 5/6, (2/36+8/36+2/36)/2
    assert res.repeats == {"k": 3, "judges": {"fake-judge": {"items": 3, "not_unanimous": 2,
                                                             "disagreement": pytest.approx(2 / 3)}}}


def test_a_tie_keeps_the_first_repeats_verdict_and_says_so():
    _, m = one(sampling(sequences={"Paris": ["no", "yes"]}), k=2)
    v = m.verdicts[0]
    assert v["verdict"] == "no" and v["votes"] == ["no", "yes"] and v["agreement"] == 0.5
    assert "tied 1 yes to 1 no" in v["reason"] and "first repeat" in v["reason"]
    assert "tied" not in m.verdicts[1]["reason"]


def test_the_spread_of_sentence_and_statement_metrics_uses_their_own_formulas():
    judge = sampling(sequences={"Paris": ["yes", "yes", "no", "no"]})
    _, rel = one(judge, ContextualRelevancyMetric, k=4)
    # 3 sentences; repeats give 1/3, 1/3, 0, 0 relevant; sample variance: mean 1/6, 4 * (1/6)^2 / 3 = 1/27
    assert rel.score_spread == pytest.approx(1 / 27)
    assert rel.score == pytest.approx(1 / 3)  # the tie keeps the first repeat's yes
    judge = sampling(sequences={"Seine": ["yes", "no", "no"]}, rules={"capital": "yes"})
    _, rec = one(judge, ContextualRecallMetric, k=3)
    # statement 1 always supported; statement 2 yes, no, no: scores 1, 0.5, 0.5; variance 1/12
    assert rec.score == 0.5 and rec.score_spread == pytest.approx(1 / 12)


def test_a_rubric_score_is_the_mean_of_its_repeats():
    _, m = one(FakeJudge(temperature=1.0, rubric_scores=[0.2, 0.4, 0.6]), RubricContextRecallMetric)
    assert m.score == pytest.approx(0.4) and m.score_spread == pytest.approx(0.04)
    assert "mean of 3 repeats: 0.20, 0.40, 0.60" in m.reason


def test_repeats_neither_read_nor_write_the_verdict_cache():
    judge = sampling(sequences={"Paris": ["yes", "no", "yes"]})
    ctx = RunContext(options=JudgeOptions(repeats=3))
    evaluate([CASE, CASE], [ContextualPrecisionMetric(model=judge)], show_progress=False, context=ctx)
    assert len(judge.calls) == 6  # the same request twice: asked 3 times each, nothing from the cache
    assert len(ctx.cache) == 0
    ctx1 = RunContext()
    evaluate([CASE, CASE], [ContextualPrecisionMetric(model=judge)], show_progress=False, context=ctx1)
    assert len(judge.calls) == 7 and len(ctx1.cache) == 1  # judged once: the cache works again


def test_a_deterministic_judge_is_asked_once_and_says_so(caplog):
    judge = FakeJudge(default="no", sequences={"Paris": ["yes", "no"]}, model_name="steady-judge")
    with caplog.at_level(logging.INFO, logger="contextjudge"):
        res, m = one(judge, cases=(CASE, CASE.model_copy(update={"input": "Another question?"})))
    assert len(judge.calls) == 2  # one per case, not three
    assert m.score_spread is None and "votes" not in m.verdicts[0]
    said = [r for r in caplog.records if "deterministic" in r.getMessage() and "steady-judge" in r.getMessage()]
    assert len(said) == 1
    assert res.repeats == {"k": 3, "deterministic": ["steady-judge"]}


def test_the_embedded_judge_declares_itself_deterministic():
    from contextjudge.judges._local import LocalJudge

    assert LocalJudge.contextjudge_deterministic is True


def test_a_chat_model_with_no_temperature_set_samples():
    from contextjudge.judges._client import _deterministic

    assert not _deterministic(FakeJudge(temperature=0.2))
    assert _deterministic(FakeJudge())
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    assert not _deterministic(ChatOpenAI(model="m", api_key="x", base_url="http://127.0.0.1:9/v1"))
    assert _deterministic(ChatOpenAI(model="m", api_key="x", base_url="http://127.0.0.1:9/v1", temperature=0))


def test_a_run_without_repeats_reports_none():
    res, m = one(FakeJudge(), k=None)
    assert res.repeats is None and res.tiers is None and m.score_spread is None


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_repeats_say_what_to_pass(k):
    with pytest.raises(ConfigurationError, match="repeats"):
        JudgeOptions(repeats=k)


def test_the_spread_widens_the_runs_interval():
    cases = [CASE.model_copy(update={"input": f"What is the capital of France? ({i})"}) for i in range(6)]
    flaky = sampling(sequences={"Paris": ["yes", "no", "yes"], "Lyon": ["yes", "no", "no", "yes", "yes"]})
    res, _ = one(flaky, cases=cases)
    spreads = [tr.metrics_data[0].score_spread for tr in res.test_results]
    assert all(s is not None for s in spreads) and any(s > 0 for s in spreads)
    from contextjudge import stats

    name = res.metric_names()[0]
    without = stats.mean_interval(res.scores(name))
    with_spread = res.interval(name)
    assert with_spread.estimate == pytest.approx(without.estimate)
    assert (with_spread.high - with_spread.low) > (without.high - without.low)

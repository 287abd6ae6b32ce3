"""Long runs: cases read lazily, results streamed to a callback or the store, compact kept results, bounded cache."""

import asyncio
import dataclasses
import json
import pickle

import pytest

from contextjudge import ContextJudgeError, LLMTestCase, aevaluate, evaluate
from contextjudge._result import MetricResult
from contextjudge.judges._cache import VerdictCache
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge


def case(i):
    return LLMTestCase(input=f"question {i} about Paris", actual_output="Paris.", expected_output=f"Paris {i}.",
                       retrieval_context=[f"Paris fact {i}. It is the capital.", "noise about Rome.", "more noise."])


def metrics(judge=None):
    judge = judge or FakeJudge()
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge)]


def test_a_generator_of_cases_is_read_as_cases_are_scored_not_all_at_once():
    read = [0]
    seen_when_scored: list[int] = []

    def gen():
        for i in range(60):
            read[0] += 1
            yield case(i)

    res = evaluate(gen(), metrics(), max_concurrency=4, show_progress=False,
                   on_result=lambda tr: seen_when_scored.append(read[0]))
    assert len(res) == 60 and [tr.index for tr in res] == list(range(60))
    # when the k-th result arrives, at most k + max_concurrency cases have been read from the generator
    assert all(r <= k + 1 + 4 for k, r in enumerate(seen_when_scored))
    assert seen_when_scored[0] < 60


def test_on_result_gets_every_case_once_and_the_kept_results_are_in_input_order():
    got = []
    res = evaluate([case(i) for i in range(25)], metrics(), show_progress=False, on_result=got.append)
    assert sorted(tr.index for tr in got) == list(range(25))
    assert [tr.index for tr in res] == list(range(25))
    assert {id(tr) for tr in got} == {id(tr) for tr in res}


async def test_an_async_on_result_is_awaited():
    got = []

    async def sink(tr):
        await asyncio.sleep(0)
        got.append(tr.index)

    await aevaluate([case(i) for i in range(10)], metrics(), show_progress=False, on_result=sink)
    assert sorted(got) == list(range(10))


def test_keep_results_false_keeps_nothing_per_case_and_summarises_the_same():
    kept = evaluate([case(i) for i in range(30)], metrics(), show_progress=False)
    streamed = []
    lean = evaluate([case(i) for i in range(30)], metrics(), show_progress=False, keep_results=False,
                    on_result=lambda tr: streamed.append(tr.metrics_data[0].score))
    assert lean.test_results == [] and len(lean) == 30 and len(streamed) == 30
    assert lean.summary() == kept.summary()
    assert lean.metric_names() == kept.metric_names()
    for name in kept.metric_names():
        assert lean.mean(name) == pytest.approx(kept.mean(name))
        assert lean.pass_rate(name) == kept.pass_rate(name)
    with pytest.raises(ContextJudgeError, match="keep_results=False"):
        lean.scores("Contextual Precision")
    with pytest.raises(ContextJudgeError, match="on_result"):
        lean.to_pandas()
    assert "30 cases" in repr(lean)


def test_streaming_into_the_store_loses_nothing(tmp_path):
    store = open_store(str(tmp_path / "long.db"))
    res = evaluate((case(i) for i in range(40)), metrics(), show_progress=False, store=store, run_id="long",
                   keep_results=False)
    back = store.load_run("long")
    assert len(res) == 40 and len(back) == 40
    assert back.summary() == res.summary()
    rel = back.test_results[0].metric("Contextual Relevancy")
    assert [v["statement"] for v in rel.verdicts] == ["Paris fact 0.", "It is the capital.", "noise about Rome.",
                                                      "more noise."]


def test_a_failing_on_result_is_logged_counted_and_the_run_goes_on(caplog):
    def sink(tr):
        if tr.index % 3 == 0:
            raise RuntimeError("sink is full")

    res = evaluate([case(i) for i in range(9)], metrics(), show_progress=False, on_result=sink)
    assert res.callback_errors == 3
    assert len(res) == 9 and all(m.score is not None for tr in res for m in tr.metrics_data)
    assert "on_result failed" in caplog.text


def test_a_generator_item_that_is_not_a_test_case_is_a_per_case_error():
    items = iter([case(0), {"input": "a dict"}, case(2)])
    res = evaluate(items, metrics(), show_progress=False)
    assert [tr.error is None for tr in res] == [True, False, True]
    assert "test_cases[1] is a dict" in res.test_results[1].error


def test_a_list_with_a_bad_item_still_fails_before_any_judge_call():
    judge = FakeJudge()
    with pytest.raises(ContextJudgeError, match=r"test_cases\[1\]"):
        evaluate([case(0), "not a case"], metrics(judge), show_progress=False)
    assert judge.count() == 0


def test_not_an_iterable_of_cases_says_what_to_pass():
    with pytest.raises(ContextJudgeError, match="iterable of test cases"):
        evaluate(case(0), metrics(), show_progress=False)


async def test_raise_exceptions_stops_every_worker():
    bad = LLMTestCase(input="no expected output", retrieval_context=["x"])
    with pytest.raises(Exception, match="expected_output"):
        await aevaluate([case(0), bad, *(case(i) for i in range(2, 40))], metrics(FakeJudge(delay=0.01)),
                        show_progress=False, raise_exceptions=True, max_concurrency=4)
    await asyncio.sleep(0.05)
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftover == []


def test_two_runs_in_a_row_each_stream_their_own_results():
    for _ in range(2):
        got = []
        res = evaluate([case(i) for i in range(5)], metrics(), show_progress=False, on_result=got.append)
        assert len(got) == 5 and len(res) == 5


# ------------------------------------------------------------------------------------------ compact results
def test_verdicts_and_details_round_trip_with_their_types():
    verdicts = [{"rank": k, "id": f"n{k}", "verdict": "yes", "statement": "x" * 300} for k in range(1, 20)]
    m = MetricResult(name="m", score=0.5, threshold=0.5, success=True, verdicts=verdicts,
                     details={"turn_scores": {1: 0.5, 3: 1.0}})
    assert m.verdicts == verdicts and m.details == {"turn_scores": {1: 0.5, 3: 1.0}}
    assert len(m.__dict__["_verdicts_packed"]) < 1000  # held compressed
    assert m.to_dict()["verdicts"] == verdicts
    json.dumps(m.to_dict())
    assert pickle.loads(pickle.dumps(m)) == m
    assert dataclasses.replace(m, score=1.0).verdicts == verdicts
    empty = MetricResult(name="m", score=None, threshold=0.5, success=False, error="x")
    assert empty.verdicts == [] and empty.details == {}


def test_a_read_is_a_copy_and_assignment_changes_the_verdicts():
    m = MetricResult(name="m", score=1.0, threshold=0.5, success=True, verdicts=[{"verdict": "yes"}])
    m.verdicts.append({"verdict": "no"})
    assert m.verdicts == [{"verdict": "yes"}]
    m.verdicts = [{"verdict": "no"}]
    assert m.verdicts == [{"verdict": "no"}]


def test_the_verdict_cache_is_a_bounded_lru_of_copies():
    cache = VerdictCache(max_entries=3)
    for k in "abcd":
        cache.put(k, {"verdicts": {"n1": {"verdict": k}}})
    assert len(cache) == 3 and cache.get("a") is None
    cache.get("b")  # b is now the most recent: e goes in, c goes out
    cache.put("e", {"verdicts": {}})
    assert cache.get("c") is None and cache.get("b") is not None
    got = cache.get("d")
    got["verdicts"]["n1"]["verdict"] = "changed"
    assert cache.get("d")["verdicts"]["n1"]["verdict"] == "d"


def test_metrics_still_share_verdicts_through_the_bounded_cache():
    judge = FakeJudge()
    same = LLMTestCase(input="q about Paris", actual_output="Paris fact.", expected_output="Paris fact.",
                       retrieval_context=["Paris fact.", "noise"])
    evaluate([same], [ContextualPrecisionMetric(model=judge), ContextUtilizationMetric(model=judge)],
             show_progress=False)
    assert judge.count("node_usefulness") == 1


def test_a_hit_from_the_backing_store_is_a_copy_too():
    class Backend:
        def __init__(self):
            self.data = {"k": {"verdicts": {"n1": {"verdict": "yes"}}}}

        def get_verdict(self, key):
            return self.data.get(key)

        def put_verdict(self, key, value):
            self.data[key] = value

    backend = Backend()
    cache = VerdictCache(backend=backend)
    got = cache.get("k")
    got["verdicts"]["n1"]["verdict"] = "changed"
    assert backend.data["k"]["verdicts"]["n1"]["verdict"] == "yes"
    assert cache.get("k")["verdicts"]["n1"]["verdict"] == "yes"

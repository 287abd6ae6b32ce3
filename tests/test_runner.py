"""The runner: concurrency, failures recorded per case, running inside an event loop, exports."""

import asyncio
import json

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda

from contextjudge import ContextJudgeError, LLMTestCase, aevaluate, evaluate
from contextjudge.capture import JUDGE_TAG
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextUtilizationMetric
from contextjudge.testing import FakeJudge


def cases(n):
    return [LLMTestCase(input=f"question {i} about Paris", actual_output="Paris.", expected_output=f"Paris {i}.",
                        retrieval_context=[f"Paris fact {i}", "noise"]) for i in range(n)]


def test_evaluate_inside_a_running_event_loop():
    async def handler():  # what a FastAPI handler or a Jupyter cell does
        return evaluate(cases(3), [ContextualPrecisionMetric(model=FakeJudge())], show_progress=False)

    res = asyncio.run(handler())
    assert len(res) == 3 and all(tr.metrics_data[0].score is not None for tr in res)


async def test_aevaluate_is_the_async_core():
    res = await aevaluate(cases(4), [ContextualPrecisionMetric(model=FakeJudge())], show_progress=False)
    assert [tr.index for tr in res] == [0, 1, 2, 3]


def test_a_failing_case_is_recorded_and_the_run_goes_on():
    good, bad = cases(2)
    bad = LLMTestCase(input="no expected output", retrieval_context=["x"])
    res = evaluate([good, bad], [ContextualPrecisionMetric(model=FakeJudge())], show_progress=False)
    assert res.test_results[0].metrics_data[0].score is not None
    failed = res.test_results[1].metrics_data[0]
    assert failed.score is None and failed.error_type == "MissingTestCaseParamsError"
    assert "expected_output" in failed.error


def test_skip_on_missing_params():
    bad = LLMTestCase(input="q", actual_output="a", retrieval_context=["x"])
    res = evaluate([bad], [ContextualPrecisionMetric(model=FakeJudge()), ContextUtilizationMetric(model=FakeJudge())],
                   skip_on_missing_params=True, show_progress=False)
    assert [m.name for m in res.test_results[0].metrics_data] == ["Context Utilization"]


def test_a_crashing_judge_does_not_stop_the_run():
    class Broken(FakeJudge):
        def answer(self, request):
            if "boom" in request.input:
                raise RuntimeError("judge exploded")
            return super().answer(request)

    cs = cases(2) + [LLMTestCase(input="boom", expected_output="x", retrieval_context=["y"])]
    res = evaluate(cs, [ContextualPrecisionMetric(model=Broken())], show_progress=False)
    assert [m.score is None for tr in res for m in tr.metrics_data] == [False, False, True]
    assert "judge exploded" in res.test_results[2].metrics_data[0].error


def test_judge_calls_are_bounded_per_model():
    import threading

    from contextjudge import JudgeOptions

    in_flight = {"now": 0, "max": 0}

    lock = threading.Lock()

    class Counting(FakeJudge):
        async def _agenerate(self, *a, **k):
            with lock:
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            try:
                return await super()._agenerate(*a, **k)
            finally:
                with lock:
                    in_flight["now"] -= 1

    judge = Counting(delay=0.02, style="json")
    evaluate(cases(12), [ContextualPrecisionMetric(model=judge)], judge_options=JudgeOptions(max_concurrency=3),
             show_progress=False)
    assert in_flight["max"] <= 3 and len(judge.calls) == 12


def test_exports(tmp_path):
    res = evaluate(cases(2), [ContextualPrecisionMetric(model=FakeJudge()), ContextualRecallMetric(model=FakeJudge())],
                   show_progress=False)
    df = res.to_pandas()
    assert len(df) == 4 and set(df["metric"]) == {"Contextual Precision", "Contextual Recall"}
    path = tmp_path / "out.jsonl"
    res.to_jsonl(str(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["metrics"][0]["name"] == "Contextual Precision"
    assert res.summary()["Contextual Precision"]["scored"] == 2
    assert "Contextual Precision=" in repr(res)


def test_no_metrics_is_a_clear_error():
    with pytest.raises(ContextJudgeError, match="at least one metric"):
        evaluate(cases(1), [])


def test_judge_calls_stay_out_of_the_users_traces():
    seen = []

    class UserTracer(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kw):
            seen.append(kw.get("tags"))

        def on_llm_start(self, serialized, prompts, **kw):
            seen.append(kw.get("tags"))

    judge = FakeJudge()

    async def app(question):
        # the user's own chain evaluates inside its run: the judge must not show up in the chain's trace
        await aevaluate(cases(1), [ContextualPrecisionMetric(model=judge)], show_progress=False)
        return question

    chain = RunnableLambda(app)
    asyncio.run(chain.ainvoke("q", config={"callbacks": [UserTracer()]}))
    assert seen == []
    assert judge.calls and all(JUDGE_TAG in c["tags"] for c in judge.calls)


def test_resumed_run_reports_only_its_own_judge_usage(tmp_path):
    store = str(tmp_path / "r.db")
    judge = FakeJudge()
    first = evaluate(cases(3), [ContextualPrecisionMetric(model=judge)], store=store, run_id="r1", show_progress=False)
    assert first.usage.calls == 3
    again = evaluate(cases(3), [ContextualPrecisionMetric(model=judge)], store=store, run_id="r1", show_progress=False)
    assert again.usage.calls == 0 and len(judge.calls) == 3
    assert [m.score for tr in again for m in tr.metrics_data] == [m.score for tr in first for m in tr.metrics_data]


async def test_a_judge_can_ask_for_more_calls_in_flight_than_the_default():
    from contextjudge.judges._context import RunContext
    from contextjudge.judges._options import JudgeOptions

    class Roomy(FakeJudge):
        contextjudge_min_concurrency: int = 20

    ctx = RunContext(options=JudgeOptions(max_concurrency=2))
    assert ctx.limiter("plain", FakeJudge()).limit == 2
    assert ctx.limiter("roomy", Roomy()).limit == 20
    assert RunContext(options=JudgeOptions(max_concurrency=50)).limiter("roomy", Roomy()).limit == 50

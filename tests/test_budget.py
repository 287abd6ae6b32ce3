"""Hard judge budgets: a budget stops judging at its limit and resumes in the next window (fake clock), each call's
tokens are reserved before it is sent (so the overshoot is at most the calls in flight), a dollar limit on a judge
with no price refuses to start, one warning per spent window, prices, and two processes sharing one store (SQLite
and PostgreSQL) that together stay within the limit."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from importlib import resources

import pytest

from contextjudge import JudgeOptions, LLMTestCase, evaluate
from contextjudge.engine import Run, score_case
from contextjudge.errors import BudgetExhaustedError, ConfigurationError
from contextjudge.judges import RunContext
from contextjudge.judges._cache import VerdictCache
from contextjudge.judges._context import use_run_context
from contextjudge.judges._spend import (
    HOUR,
    Budget,
    BudgetLedger,
    MemorySpend,
    Price,
    RateLimit,
    count_tokens,
    price_of,
    register_prices,
    window_start,
)
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

T0 = 1_750_000_000.0 - (1_750_000_000.0 % 86400) + 3 * 3600 + 120  # 03:02 UTC on some day


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"Question {i}: what is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=[f"Paris is the capital of France ({i}).", "Bananas are yellow.",
                                          "France is in Europe."])


def _name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


async def _score_each(run: Run, cases, metric, budget="raise"):
    judged, refused = 0, 0
    for i, tc in enumerate(cases):
        try:
            with use_run_context(run.context):
                out = await score_case(run, f"k{i}-{uuid.uuid4().hex[:4]}", tc, [metric], budget=budget)
        except BudgetExhaustedError as exc:
            refused += 1
            last = exc
            continue
        assert out and out[0].error is None, out
        judged += 1
    return judged, refused, (last if refused else None)


# ---------------------------------------------------------------------------------------------- windows
def test_a_budget_stops_judging_at_its_limit_and_resumes_in_the_next_window(caplog):
    clock = Clock()
    budget = Budget(tokens_per_hour=2500, name=_name())
    judge = FakeJudge(default="yes")
    ctx = RunContext(options=JudgeOptions(budget=budget), clock=clock)
    run = Run(context=ctx)
    metric = ContextualPrecisionMetric(model=judge)
    caplog.set_level(logging.WARNING, logger="contextjudge")

    judged, refused, exc = asyncio.run(_score_each(run, [_case(i) for i in range(20)], metric))
    assert judged >= 2 and refused >= 1 and judged + refused == 20
    assert judge.count() == judged                      # a refused call is never sent
    hour = window_start(clock(), HOUR)
    assert exc.resumes_at == hour + HOUR and exc.scope == f"budget:{budget.name}"
    assert "resumes at" in str(exc)
    spent = ctx.ledger(budget).store.spend_get(f"budget:{budget.name}:hour", hour)
    assert spent["tokens"] <= 2500 and spent["calls"] == judged and spent["refused"] >= 1
    assert ctx.budget_blocked() == hour + HOUR          # a cheap check before a case
    warned = [r for r in caplog.records if "budget" in r.getMessage() and "spent" in r.getMessage()]
    assert len(warned) == 1                             # one warning per window, however many cases are skipped

    clock.t = hour + HOUR + 1                          # the next hour: judging resumes
    assert ctx.budget_blocked() is None
    judged2, refused2, _ = asyncio.run(_score_each(run, [_case(100 + i) for i in range(20)], metric))
    assert judged2 == judged and refused2 == refused     # the same room again
    warned = [r for r in caplog.records if "budget" in r.getMessage() and "spent" in r.getMessage()]
    assert len(warned) == 2                             # and one more warning for the new window


def test_record_mode_gives_an_error_result_that_says_when_judging_resumes():
    clock = Clock()
    budget = Budget(tokens_per_day=1, name=_name())   # no call fits
    judge = FakeJudge(default="yes")
    result = evaluate([_case(0)], [ContextualPrecisionMetric(model=judge)],
                      judge_options=JudgeOptions(budget=budget), show_progress=False)
    m = result.test_results[0].metrics_data[0]
    assert m.score is None and m.error_type == "BudgetExhaustedError"
    assert "resumes at" in m.error and "UTC" in m.error
    assert judge.count() == 0
    del clock


def test_a_day_and_an_hour_limit_both_hold():
    clock = Clock()
    budget = Budget(tokens_per_hour=100_000, tokens_per_day=2500, name=_name())
    ctx = RunContext(options=JudgeOptions(budget=budget), clock=clock)
    judged, refused, exc = asyncio.run(_score_each(Run(context=ctx), [_case(i) for i in range(20)],
                                                   ContextualPrecisionMetric(model=FakeJudge(default="yes"))))
    assert refused and exc.scope == f"budget:{budget.name}"
    assert exc.resumes_at == window_start(clock(), 86400) + 86400
    # the refused day window gave its hour reservation back: the hour holds only what was judged
    led = ctx.ledger(budget)
    day = led.store.spend_get(f"budget:{budget.name}:day", window_start(clock(), 86400))
    hour = led.store.spend_get(f"budget:{budget.name}:hour", window_start(clock(), HOUR))
    assert day["tokens"] == hour["tokens"] <= 2500 and day["calls"] == hour["calls"] == judged


# ---------------------------------------------------------------------------------------------- reservation
class LongAnswerJudge(FakeJudge):
    """Answers at length (2,000 tokens, the issue's case) unless its ``max_tokens`` cuts the answer, as a provider
    does; bills the prompt's real token count."""

    max_tokens: int | None = None

    def _respond(self, messages, method, tags=None):
        msg = super()._respond(messages, method, tags)
        prompt = "\n".join(str(m.content) for m in messages)
        out = 2000 if self.max_tokens is None else min(2000, self.max_tokens)
        msg.usage_metadata = {"input_tokens": count_tokens(prompt, self.model_name), "output_tokens": out,
                              "total_tokens": count_tokens(prompt, self.model_name) + out}
        return msg


def test_a_request_never_spends_more_than_it_reserved_so_a_budget_is_never_overshot():
    budget = Budget(tokens_per_day=3000, name=_name())
    store = MemorySpend()
    scope = f"budget:{budget.name}:day"
    at_call: list[dict] = []

    class Watching(LongAnswerJudge):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            at_call.append(store.spend_get(scope, window_start(clock(), 86400)))
            return await super()._agenerate(messages, stop, run_manager, **kwargs)

    clock = Clock()
    ctx = RunContext(options=JudgeOptions(budget=budget, max_concurrency=6), clock=clock)
    ctx._spend[("ledger", budget, "fake-judge", True)] = BudgetLedger(budget, judge="fake-judge", store=store,
                                                                      clock=clock)
    ctx._spend[("ledger", budget, None, True)] = BudgetLedger(budget, store=store, clock=clock)
    judge = Watching(default="yes", delay=0.05)
    run = Run(context=ctx)
    metric = ContextualPrecisionMetric(model=judge)

    async def main():
        with use_run_context(ctx):
            return await asyncio.gather(*(score_case(run, f"k{i}", _case(i), [metric]) for i in range(24)),
                                        return_exceptions=True)

    results = asyncio.run(main())
    errors = [r[0] for r in results if r[0].error_type == "BudgetExhaustedError"]
    assert errors                                        # the budget ran out ...
    # each call was reserved before it reached the judge: the k-th call to arrive saw at least k reservations
    assert at_call
    for k, row in enumerate(sorted(at_call, key=lambda r: r["calls"]), start=1):
        assert row["calls"] >= k and row["tokens"] > 0
    final = store.spend_get(scope, window_start(clock(), 86400))
    assert ctx.throttle["fake-judge"]["peak_inflight"] >= 1
    # ... and was never overshot: each answer was capped at what its request reserved (without the cap, the
    # 2,000-token answers of the calls in flight passed a 3,000-token budget by 100%)
    assert 0 < final["tokens"] <= 3000


def test_the_embedded_judge_spends_no_token_budget_but_a_call_budget_applies_to_it():
    from contextjudge.metrics import ContextualRelevancyMetric

    cases = [_case(i) for i in range(6)]
    res = evaluate(cases, [ContextualRelevancyMetric(model="local")], show_progress=False,
                   judge_options=JudgeOptions(budget=Budget(tokens_per_day=10, name=_name())))
    # 10 tokens would not pay for one billed call: the embedded judge is billed by nobody, so every case is judged
    assert all(tr.metrics_data[0].error is None for tr in res.test_results)
    calls = Budget(calls_per_day=2, name=_name())
    res = evaluate(cases, [ContextualRelevancyMetric(model="local")], show_progress=False,
                   judge_options=JudgeOptions(budget=calls))
    errs = [tr.metrics_data[0] for tr in res.test_results if tr.metrics_data[0].error]
    assert 0 < len(errs) < 6 and all(m.error_type == "BudgetExhaustedError" for m in errs)
    assert "judge calls" in errs[0].error


def test_a_dollar_limit_on_an_unpriced_judge_without_a_token_limit_refuses_to_start():
    judge = FakeJudge(model_name=f"unpriced-{uuid.uuid4().hex[:6]}", default="yes")
    with pytest.raises(ConfigurationError) as info:
        evaluate([_case(0)], [ContextualPrecisionMetric(model=judge)],
                 judge_options=JudgeOptions(budget=Budget(dollars_per_day=1.0, name=_name())), show_progress=False)
    msg = str(info.value)
    assert "no known price" in msg and "tokens_per_day=" in msg and "register_prices" in msg
    assert judge.count() == 0                           # nothing was judged

    # with a token limit too, the unpriced judge runs, limited by tokens
    ok = evaluate([_case(0)], [ContextualPrecisionMetric(model=judge)], show_progress=False,
                  judge_options=JudgeOptions(budget=Budget(dollars_per_day=1.0, tokens_per_day=10_000, name=_name())))
    assert ok.test_results[0].metrics_data[0].error is None

    # with a price, the dollar limit alone holds, and the cost is counted
    register_prices({judge.model_name: {"input": 1.0, "output": 2.0}})
    priced = evaluate([_case(1)], [ContextualPrecisionMetric(model=judge)], show_progress=False,
                      judge_options=JudgeOptions(budget=Budget(dollars_per_day=1.0, name=_name())))
    m = priced.test_results[0].metrics_data[0]
    assert m.error is None and m.usage.cost == pytest.approx(
        (m.usage.input_tokens * 1.0 + m.usage.output_tokens * 2.0) / 1e6)


def test_a_dollar_budget_stops_a_priced_judge():
    judge = FakeJudge(model_name="gpt-4o-mini", default="yes")
    # a few calls at $0.15/$0.60 per million tokens (each reserves its capped answer, 2,048 tokens, until it settles)
    budget = Budget(dollars_per_hour=0.002, name=_name())
    ctx = RunContext(options=JudgeOptions(budget=budget), clock=Clock())
    judged, refused, exc = asyncio.run(_score_each(Run(context=ctx), [_case(i) for i in range(40)],
                                                   ContextualPrecisionMetric(model=judge)))
    assert judged >= 1 and refused >= 1 and "$" in str(exc)
    row = ctx.ledger(budget).store.spend_get(f"budget:{budget.name}:hour", window_start(T0, HOUR))
    assert 0 < row["dollars"] <= 0.002


def test_budget_and_rate_limit_values_are_checked():
    with pytest.raises(ConfigurationError, match="no limit"):
        Budget()
    with pytest.raises(ConfigurationError, match="tokens_per_day"):
        Budget(tokens_per_day=-5)
    with pytest.raises(ConfigurationError, match="whole number"):
        Budget(tokens_per_hour=1.5)
    with pytest.raises(ConfigurationError, match="no limit"):
        RateLimit()


# ---------------------------------------------------------------------------------------------- prices
def test_the_price_table_ships_with_its_source_and_date_and_finds_dated_releases():
    raw = json.loads(resources.files("contextjudge").joinpath("data/prices.json").read_text("utf-8"))
    assert raw["as_of"] and "check your provider" in raw["note"] and raw["source"]
    assert price_of("gpt-4o-mini") == Price(0.15, 0.60)
    assert price_of("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60)   # a dated release
    assert price_of("openai:gpt-4o") == Price(2.50, 10.00)
    assert price_of("claude-3-5-haiku-20241022") == price_of("claude-3-5-haiku-latest") == Price(0.80, 4.00)
    assert price_of("models/gemini-2.0-flash") == Price(0.10, 0.40)
    assert price_of("gpt-4o-audio-preview") is None                   # another model, not a release of gpt-4o
    assert price_of("my-own-model") is None
    assert price_of("local").cost(10**6, 10**6) == 0.0
    assert price_of(FakeJudge(model_name="gpt-4.1-nano")) == Price(0.10, 0.40)
    with pytest.raises(ConfigurationError):
        register_prices({"x": {"input": -1, "output": 1}})


# ---------------------------------------------------------------------------------------------- shared store
_WORKER = textwrap.dedent("""
    import sys
    from contextjudge.errors import BudgetExhaustedError
    from contextjudge.judges._spend import Budget, BudgetLedger
    from contextjudge.store import open_store
    store = open_store(sys.argv[1])
    led = BudgetLedger(Budget(tokens_per_day=5000, name=sys.argv[2]), judge="x", store=store, clock=lambda: 1e9)
    ok = 0
    for _ in range(40):
        try:
            res = led.reserve(60, 40)
        except BudgetExhaustedError:
            continue
        led.settle(res, {"input_tokens": 60, "output_tokens": 40})
        ok += 1
    print(ok)
""")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "spend.db")
        return
    request.getfixturevalue("pg_store").close()  # emptied (the session's cluster: tests/conftest.py)
    yield request.getfixturevalue("pg_url")


def test_two_processes_sharing_a_store_stay_within_the_budget_together(store_url):
    name = _name()
    open_store(store_url).close()  # the schema, made once before both start
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, store_url, name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    done = [int(o[0].strip()) for o in outs]
    assert sum(done) == 50                               # 5000 tokens / 100 per call, not one more
    with open_store(store_url) as s:
        row = s.spend_get(f"budget:{name}:day", window_start(1e9, 86400))
    assert row["tokens"] == 5000 and row["calls"] == 50 and row["refused"] == 80 - 50


def test_two_ledgers_on_one_store_in_threads_and_the_run_uses_its_store(store_url):
    from concurrent.futures import ThreadPoolExecutor

    name = _name()
    budget = Budget(tokens_per_hour=1000, name=name)
    with open_store(store_url) as store:
        ledgers = [BudgetLedger(budget, judge="x", store=store, clock=lambda: 1e9) for _ in range(2)]

        def spend(led):
            n = 0
            for _ in range(30):
                try:
                    led.reserve(10, 10)
                    n += 1
                except BudgetExhaustedError:
                    pass
            return n

        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(spend, ledgers * 2)) == 50
        # a run with the store keeps its budget windows there (shared with the other processes of the app)
        ctx = RunContext(options=JudgeOptions(budget=budget), cache=VerdictCache(backend=store), clock=lambda: 1e9)
        assert ctx.ledger(budget).store is store
        assert ctx.budget_blocked() == window_start(1e9, HOUR) + HOUR

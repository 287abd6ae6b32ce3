"""A rate-limited judge (HTTP 429s from a real loopback server, through langchain_openai.ChatOpenAI) slows the
scoring down instead of failing cases: the judge's calls in flight halve on a 429 and settle at what the server
takes. Also the limiter itself, and the cluster-wide RateLimit that waits for the next minute."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from fault_server import FaultServer

from contextjudge import JudgeOptions, LLMTestCase
from contextjudge.engine import Run, score_case
from contextjudge.judges import RunContext
from contextjudge.judges._context import use_run_context
from contextjudge.judges._limiter import AdaptiveLimiter
from contextjudge.judges._spend import MemorySpend, RateGate, RateLimit
from contextjudge.metrics import ContextualPrecisionMetric

langchain_openai = pytest.importorskip("langchain_openai")


class CappedServer(FaultServer):
    """Answers 429 (with a short Retry-After) to a request that arrives while ``cap`` requests are already in flight,
    as a provider's concurrency limit does; records the requests in flight at each arrival."""

    def __init__(self, cap: int, **kw) -> None:
        super().__init__(**kw)
        self.cap = cap
        self.arrivals: list[tuple[int, int]] = []   # (in flight including this one, status)

    def handle_chat(self, body):
        with self._lock:
            n = self._inflight
        if n > self.cap:
            with self._lock:
                self.arrivals.append((n, 429))
            record = {"t0": time.time(), "method": "", "status": 429, "fault": "http429", "prompt_tokens": 0}
            return 429, {"retry-after": "0.02"}, json.dumps(
                {"error": {"message": "Rate limit reached, slow down", "type": "rate_limit_error", "code": None}}
            ).encode(), record
        with self._lock:
            self.arrivals.append((n, 200))
        return super().handle_chat(body)


def _cases(n: int) -> list[LLMTestCase]:
    return [LLMTestCase(input=f"Question {i} about Paris?", actual_output="Paris.", expected_output="Paris.",
                        retrieval_context=[f"Paris fact {i}.", "Bananas.", "Paris again."]) for i in range(n)]


def test_429s_slow_the_scoring_instead_of_failing_cases_and_the_in_flight_limit_adapts():
    cap = 3
    with CappedServer(cap, yes_words=["paris"], latency=0.04) as srv:
        judge = langchain_openai.ChatOpenAI(model="fake", base_url=srv.url, api_key="x", max_retries=0,
                                            temperature=0)
        ctx = RunContext(options=JudgeOptions(max_concurrency=8, backoff_initial=0.02, backoff_max=0.2))
        run = Run(context=ctx)

        async def main():
            sem = asyncio.Semaphore(16)  # cases in flight, as evaluate's workers

            async def one(i, tc):
                async with sem:
                    return await score_case(run, f"k{i}", tc, [ContextualPrecisionMetric(model=judge)])

            with use_run_context(ctx):
                return await asyncio.gather(*(one(i, tc) for i, tc in enumerate(_cases(48))))

        results = asyncio.run(main())
        arrivals = list(srv.arrivals)

    errors = [r[0].error for r in results if r[0].error]
    assert errors == []                                  # every case scored: 429s slowed it, failed nothing
    assert all(r[0].score is not None for r in results)
    rejected = [a for a in arrivals if a[1] == 429]
    assert rejected                                      # the server did push back
    stats = ctx.throttle["fake"]
    assert stats["throttled"] == len(rejected) and stats["decreases"] >= 1 and stats["lowest"] <= cap
    assert stats["limit"] <= cap                         # it settled at what the server takes ...
    late = arrivals[len(arrivals) // 2:]
    assert max(n for n, _ in late) <= cap                # ... and the calls in flight stay there
    assert sum(1 for _, s in late if s == 429) == 0


def test_the_limiter_halves_once_per_congestion_and_grows_back_to_below_the_ceiling():
    now = [0.0]
    lim = AdaptiveLimiter(8, grow_after=2, probe_after=30.0, clock=lambda: now[0])

    async def main():
        gens = [await lim.acquire() for _ in range(8)]
        assert lim.inflight == 8 and lim.limit == 8
        for g in gens:                               # eight 429s of the same congestion: halved once
            lim.throttle(g)
            lim.release()
        assert lim.limit == 4 and lim.decreases == 1 and lim.throttled == 8
        g = await lim.acquire()
        lim.throttle(g)
        lim.release()
        assert lim.limit == 2
        for _ in range(10):
            await lim.acquire()
            lim.success()
            lim.release()
        assert lim.limit == 3                        # back to one below the limit that was throttled, no further
        now[0] = 31.0                                # ... until probe_after seconds without a 429
        for _ in range(4):
            await lim.acquire()
            lim.success()
            lim.release()
        assert lim.limit >= 4

        # waiters are served in order and a grown limit wakes them
        small = AdaptiveLimiter(1)
        await small.acquire()
        order = []

        async def wait(i):
            await small.acquire()
            order.append(i)

        tasks = [asyncio.ensure_future(wait(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert order == []
        small.release()
        await asyncio.sleep(0)
        assert order == [0]
        tasks[1].cancel()
        small.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert order == [0, 2] and small.inflight == 1

    asyncio.run(main())


def test_a_rate_limit_waits_for_the_next_minute_instead_of_refusing():
    now = [1_000_020.0]
    slept = []

    async def fake_sleep(s):
        slept.append(s)
        now[0] += s

    limit = RateLimit(requests_per_minute=3, tokens_per_minute=1000, name=f"r-{uuid.uuid4().hex[:6]}")
    store = MemorySpend()
    gates = [RateGate(limit, store=store, clock=lambda: now[0], sleep=fake_sleep) for _ in range(2)]

    async def main():
        starts = []
        for i in range(7):
            start, _ = await gates[i % 2].acquire(100)
            starts.append(start)
        return starts

    starts = asyncio.run(main())
    minute = 1_000_020.0 - 1_000_020.0 % 60
    assert starts == [minute] * 3 + [minute + 60] * 3 + [minute + 120]   # three a minute, shared by both gates
    assert len(slept) == 2 and all(s >= 40 for s in slept)

    # the token limit holds too; a call larger than the minute's allowance still goes (as the allowance)
    now[0] = 2_000_040.0
    tgate = RateGate(RateLimit(tokens_per_minute=500, name=f"t-{uuid.uuid4().hex[:6]}"), store=store,
                     clock=lambda: now[0], sleep=fake_sleep)

    async def tokens():
        a = await tgate.acquire(300)
        b = await tgate.acquire(300)     # waits: 600 > 500
        c = await tgate.acquire(5000)    # waits, then takes the whole minute
        return a[0], b[0], c[0], c[1]

    a, b, c, held = asyncio.run(tokens())
    assert b == a + 60 and c == b + 60 and held == 500


def test_a_rate_limit_in_the_judge_options_paces_the_judge_calls():
    now = [3_000_000.0]

    async def fake_sleep(s):
        now[0] += s

    from contextjudge.testing import FakeJudge

    judge = FakeJudge(default="yes")
    limit = RateLimit(requests_per_minute=2, name=f"j-{uuid.uuid4().hex[:6]}")
    ctx = RunContext(options=JudgeOptions(rate_limit=limit), clock=lambda: now[0], sleep=fake_sleep)
    async def main():
        run = Run(context=ctx)
        with use_run_context(ctx):
            return [await score_case(run, f"k{i}", tc, [ContextualPrecisionMetric(model=judge)])
                    for i, tc in enumerate(_cases(5))]

    t = now[0]
    results = asyncio.run(main())
    assert all(r[0].error is None for r in results) and judge.count() == 5
    assert now[0] - t >= 120 - 1                          # five calls at two a minute: two minutes waited

"""A budget spends what it holds at any concurrency: a worker judging queued cases through a real ``ChatOpenAI``
against a loopback judge (tests/fault_server.py), under a 20,000-token day.

Each call reserves its prompt and its whole answer cap (2,048 tokens) before it is sent, so that no call can pass the
budget. At concurrency 8 the reservations of the calls in flight alone filled the day, the next reservation was
refused as if the budget were spent, and the worker set the queue aside: 21 calls (25% of the budget) and 99 of 120
cases skipped. A reservation that cannot fit now waits for the calls in flight to settle; only one that cannot fit
with nothing in flight is refused. So: never over the budget, and at least 85% of it spent, at concurrency 1 and 8.

The budget still ended short by up to one call's whole cap: the last call that could not reserve 2,048 answer tokens
was refused though this judge's answers take about 60. A call whose whole cap has no room now reserves what this
judge's calls to the task really take (the largest of its recent answers, with a margin) and is sent with that as its
own ``max_tokens``, so it still cannot spend more than it reserved; an answer cut by it is asked again, never read."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from fault_server import FaultServer

from contextjudge import JudgeOptions, LLMTestCase
from contextjudge.engine._worker import Worker
from contextjudge.judges._spend import BUDGET_OUTPUT_CAP, Budget, window_start
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store

pytest.importorskip("langchain_openai")

LIMIT = 20_000


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       retrieval_context=["Paris is the capital of France.", f"Bananas are yellow (case-{i:03d}).",
                                          "The Seine flows through Paris."])


class _GrowingJudge(FaultServer):
    """A judge whose reasons get ``times`` longer from the first request sent with an answer cap below the whole
    one: the calls that reserved what its answers took so far meet longer answers."""

    def __init__(self, *, times: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.times, self.grown = times, False

    def handle_chat(self, body: dict[str, Any]) -> Any:
        cap = _cap(body)
        if cap is not None and cap < BUDGET_OUTPUT_CAP and not self.grown:
            self.grown, self.reason = True, self.reason * self.times
        return super().handle_chat(body)


def _run(tmp_path, concurrency: int, *, limit: int = LIMIT, cases: int = 120, reason: str | None = None,
         server: FaultServer | None = None, then: Any = None) -> tuple[Any, int, list[dict[str, Any]], Any, str]:
    """Judge ``cases`` queued cases under a ``limit``-token day: the worker's counts, the tokens the server billed,
    its requests, the store and the run (``then(store, judge, server)`` runs after, with the server up)."""
    from langchain_openai import ChatOpenAI  # noqa: PLC0415

    store = open_store(str(tmp_path / f"q{concurrency}-{uuid.uuid4().hex[:6]}.db"))
    rid = store.begin_run("prod", {"mode": "worker", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    store.save_cases_queued(rid, [(f"k{i:03d}", i, _case(i)) for i in range(cases)])
    budget = Budget(tokens_per_day=limit, name=f"conc-{uuid.uuid4().hex[:8]}")
    kw: dict[str, Any] = {"reason": reason} if reason else {}
    srv = server or FaultServer(yes_words=["paris"], latency=0.02, **kw)
    with srv:
        # a judge of its own (the sizes of answers are kept per judge identity, process-wide)
        judge = ChatOpenAI(model=f"fake-judge-{uuid.uuid4().hex[:6]}", base_url=srv.url, api_key="x", max_retries=0)
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=16, concurrency=concurrency, cpus=0, nice=0,
                   poll=0.05, judge_options=JudgeOptions(budget=budget, max_concurrency=concurrency))
        counts = w.run(once=True)
        requests = list(srv.requests)
        if then is not None:
            then(store, judge, srv)
    billed = sum(r["prompt_tokens"] + r["completion_tokens"] for r in requests if r.get("status", 200) == 200)
    spent = store.spend_get(f"budget:{budget.name}:day", window_start(time.time(), 86400))
    assert counts.judged + counts.skipped_budget == cases and counts.skipped_budget > 0  # the budget ran out
    assert spent["tokens"] <= limit and billed <= limit, (spent, billed)  # never over
    return counts, billed, requests, store, rid


def _cap(r: dict[str, Any]) -> int | None:
    caps = [c for c in (r.get("max_tokens"), r.get("max_completion_tokens")) if c]
    return min(caps) if caps else None


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_budget_is_spent_to_at_least_85_percent_and_never_passed(tmp_path, concurrency):
    counts, billed, _, _, _ = _run(tmp_path, concurrency)
    assert billed >= 0.85 * LIMIT, (concurrency, billed, counts.judged, counts.skipped_budget)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_the_last_calls_reserve_what_the_answers_really_take(tmp_path, concurrency):
    """The budget ends short by less than two real calls, not by one whole answer cap (on the old code it stopped
    with over 2,000 tokens left: every call reserved 2,048 answer tokens to the end); the calls that reserved less
    were sent with that as their own cap, and it covered every answer."""
    counts, billed, requests, _, _ = _run(tmp_path, concurrency)
    ok = [r for r in requests if r.get("status", 200) == 200]
    biggest = max(r["prompt_tokens"] + r["completion_tokens"] for r in ok)
    assert LIMIT - billed < 2 * biggest, (concurrency, billed, biggest, counts.judged, counts.skipped_budget)
    sized = [r for r in ok if (_cap(r) or BUDGET_OUTPUT_CAP) < BUDGET_OUTPUT_CAP]
    assert sized, "no call was sent with a smaller answer cap"
    assert all(r["finish_reason"] != "length" for r in ok)  # none cut: the size covers this judge's answers
    assert all(r["completion_tokens"] <= _cap(r) for r in sized)


def test_verdicts_judged_under_a_smaller_cap_stay_in_the_cache(tmp_path):
    """The answer cap sent with a request is no part of the judge's identity: the same cases queued again, under a
    budget with room (the same answer cap on the judge), are answered from the verdict cache for every case judged
    before (those sent with a smaller cap included); only the cases the budget skipped reach the judge."""
    again: dict[str, Any] = {}

    def rerun(store, judge, srv) -> None:
        before = len(srv.requests)
        rid = store.begin_run("again", {"mode": "worker", "metrics": [{"class": "ContextualRelevancyMetric"}]})
        store.save_cases_queued(rid, [(f"k{i:03d}", i, _case(i)) for i in range(120)])
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=16, concurrency=8, cpus=0, nice=0, poll=0.05,
                   judge_options=JudgeOptions(max_concurrency=8, budget=Budget(tokens_per_day=10**9,
                                                                                 name=uuid.uuid4().hex[:8])))
        again["counts"] = w.run(once=True)
        again["requests"] = srv.requests[before:]

    counts, _, requests, _, _ = _run(tmp_path, 8, then=rerun)
    assert any((_cap(r) or BUDGET_OUTPUT_CAP) < BUDGET_OUTPUT_CAP for r in requests)
    assert again["counts"].judged == 120
    assert len(again["requests"]) == counts.skipped_budget, (len(again["requests"]), counts)


def test_the_reserved_answer_follows_the_judges_real_answers(tmp_path):
    """A judge that writes six times longer reasons gets a reservation (and a request cap) that grows with them."""
    caps = {}
    answers = {}
    for name, reason in (("short", None), ("long", "The text bears on the question as asked. " * 6)):
        _, _, requests, _, _ = _run(tmp_path, 4, limit=8_000, cases=40, reason=reason)
        ok = [r for r in requests if r.get("status", 200) == 200]
        caps[name] = [_cap(r) for r in ok if (_cap(r) or BUDGET_OUTPUT_CAP) < BUDGET_OUTPUT_CAP]
        answers[name] = max(r["completion_tokens"] for r in ok)
        assert caps[name] and min(caps[name]) >= answers[name], (name, caps[name], answers[name])
        assert max(caps[name]) <= 2 * answers[name] + 32, (name, caps[name], answers[name])
    assert answers["long"] > 3 * answers["short"]
    assert min(caps["long"]) > 2 * max(caps["short"]), caps


def test_an_answer_cut_by_its_reserved_cap_is_asked_again_never_read(tmp_path):
    """A judge whose answers grow past the size its last calls reserved: each cut answer is asked again with a
    larger cap, or its case skipped for the budget; every judged case has the score of a whole answer, no error,
    and the budget is never passed."""
    srv = _GrowingJudge(times=4, yes_words=["paris"], latency=0.02)
    counts, _, requests, store, rid = _run(tmp_path, 4, server=srv)
    cut = [r for r in requests if r.get("finish_reason") == "length"]
    assert cut and all(_cap(r) < BUDGET_OUTPUT_CAP for r in cut)
    prompts = {r["prompt_hash"] for r in cut}
    again = [r for r in requests if r["prompt_hash"] in prompts and r.get("finish_reason") not in (None, "length")]
    assert again and all(_cap(r) >= 2 * min(_cap(c) for c in cut) for r in again)  # asked again with more room
    scores = [m.score for t in store.iter_test_results(rid) for m in t.metrics_data if m.error is None]
    errors = [m.error for t in store.iter_test_results(rid) for m in t.metrics_data if m.error is not None]
    assert len(scores) == counts.judged and counts.errors == 0, (errors, counts)
    assert scores and all(s == pytest.approx(2 / 3) for s in scores), scores

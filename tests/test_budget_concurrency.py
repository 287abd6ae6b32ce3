"""A budget spends what it holds at any concurrency: a worker judging 120 queued cases through a real
``ChatOpenAI`` against a loopback judge (tests/fault_server.py), under a 20,000-token day.

Each call reserves its prompt and its whole answer cap (2,048 tokens) before it is sent, so that no call can pass the
budget. At concurrency 8 the reservations of the calls in flight alone filled the day, the next reservation was
refused as if the budget were spent, and the worker set the queue aside: 21 calls (25% of the budget) and 99 of 120
cases skipped. A reservation that cannot fit now waits for the calls in flight to settle; only one that cannot fit
with nothing in flight is refused. So: never over the budget, and at least 85% of it spent, at concurrency 1 and 8."""

from __future__ import annotations

import time
import uuid

import pytest
from fault_server import FaultServer

from contextjudge import JudgeOptions, LLMTestCase
from contextjudge.engine._worker import Worker
from contextjudge.judges._spend import Budget, window_start
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store

pytest.importorskip("langchain_openai")

LIMIT = 20_000


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       retrieval_context=["Paris is the capital of France.", f"Bananas are yellow (case-{i:03d}).",
                                          "The Seine flows through Paris."])


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_budget_is_spent_to_at_least_85_percent_and_never_passed(tmp_path, concurrency):
    from langchain_openai import ChatOpenAI  # noqa: PLC0415

    store = open_store(str(tmp_path / "q.db"))
    rid = store.begin_run("prod", {"mode": "worker", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    store.save_cases_queued(rid, [(f"k{i:03d}", i, _case(i)) for i in range(120)])
    budget = Budget(tokens_per_day=LIMIT, name=f"conc-{uuid.uuid4().hex[:8]}")
    with FaultServer(yes_words=["paris"], latency=0.02) as srv:
        judge = ChatOpenAI(model="fake-judge", base_url=srv.url, api_key="x", max_retries=0)
        w = Worker(store, [ContextualRelevancyMetric()], judge, batch=16, concurrency=concurrency, cpus=0, nice=0,
                   poll=0.05, judge_options=JudgeOptions(budget=budget, max_concurrency=concurrency))
        counts = w.run(once=True)
        billed = sum(r["prompt_tokens"] + r["completion_tokens"] for r in srv.requests if r.get("status", 200) == 200)
    spent = store.spend_get(f"budget:{budget.name}:day", window_start(time.time(), 86400))
    assert counts.judged + counts.skipped_budget == 120 and counts.skipped_budget > 0  # the budget ran out
    assert spent["tokens"] <= LIMIT and billed <= LIMIT, (spent, billed)  # never over
    assert billed >= 0.85 * LIMIT, (concurrency, billed, counts.judged, counts.skipped_budget)

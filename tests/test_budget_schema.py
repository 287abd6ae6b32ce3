"""A hard budget reserves each judge call's prompt as the provider bills it: the messages with the chat format's
tokens, and the structured-output answer schema the request carries (the ``response_format``'s JSON schema, or the
tools for function calling), which OpenAI-compatible providers bill as input. A real ``ChatOpenAI`` against the
loopback judge (tests/fault_server.py, counting o200k_base tokens as such a provider bills them).

Before, the reservation counted only the messages' text: about 150 tokens of schema and 11 of chat format a call
under what was billed. With an answer cap near the answers' size (``max_output_tokens``), nothing covered that gap
from the first call on, and a 3,000-token day was billed 3,010."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fault_server import Fault, FaultServer

from contextjudge import JudgeOptions, LLMTestCase, evaluate
from contextjudge.judges._spend import Budget, BudgetLedger, count_tokens
from contextjudge.metrics import ContextualRelevancyMetric

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI

LIMIT = 3_000


def _cases(n: int) -> list[LLMTestCase]:
    return [LLMTestCase(input=f"case-{i:02d}: what is the capital of France?", actual_output="Paris.",
                        retrieval_context=["Paris is the capital of France.", f"Bananas are yellow ({i}).",
                                           "The Seine flows through Paris."]) for i in range(n)]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_each_call_reserves_the_schema_it_sends_so_a_tight_budget_is_never_passed(monkeypatch, method):
    settled: list[tuple[int, int]] = []  # (input tokens reserved, input tokens billed) per call
    settle = BudgetLedger.settle

    def watch(self: BudgetLedger, res: Any, usage: Any = None) -> None:
        if usage:
            settled.append((res.input_tokens, int(usage.get("input_tokens", 0) or 0)))
        settle(self, res, usage)

    monkeypatch.setattr(BudgetLedger, "settle", watch)
    faults = ([Fault("http", times=None, status=400, methods=("json_schema",),
                     message="response_format json_schema is not supported by this server")]
              if method == "function_calling" else [])
    with FaultServer(yes_words=["paris"], faults=faults,
                     count_tokens=lambda t: count_tokens(t, "gpt-4o-mini")) as server:
        # a judge of its own: the sizes of a judge's answers and prompts are learnt per judge, process-wide
        judge = ChatOpenAI(model=f"gpt-4o-mini-{uuid.uuid4().hex[:6]}", base_url=server.url, api_key="sk-test",
                           max_retries=0)
        budget = Budget(tokens_per_day=LIMIT, name=f"schema-{uuid.uuid4().hex[:8]}")
        result = evaluate(_cases(12), [ContextualRelevancyMetric(model=judge)], max_concurrency=4,
                          judge_options=JudgeOptions(budget=budget, max_concurrency=4, max_output_tokens=120),
                          show_progress=False)
        ok = [r for r in server.requests if r.get("status", 200) == 200]
    sent = "json_schema" if method == "json_schema" else "tools"
    assert ok and {r["method"] for r in ok} == {sent}
    assert all(r["schema_tokens"] > 100 for r in ok)  # the schema is a large part of each prompt
    skipped = [m for t in result.test_results for m in t.metrics_data if m.error_type == "BudgetExhaustedError"]
    assert skipped and len(ok) + len(skipped) == 12  # the budget ran out, and stopped the rest
    # every call reserved at least the prompt it was billed for, from the first call on ...
    assert len(settled) == len(ok)
    assert all(reserved >= billed for reserved, billed in settled), settled
    # ... as the provider counts it (the same tokenizer here): the messages' text, 4 tokens a message with its
    # role, 3 priming the reply, and the schema
    assert all(reserved - billed <= 2 for reserved, billed in settled), settled
    # so the budget was never passed
    billed = sum(r["prompt_tokens"] + r["completion_tokens"] for r in ok)
    assert billed <= LIMIT, billed

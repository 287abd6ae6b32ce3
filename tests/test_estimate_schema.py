"""The estimate counts the structured-output answer schema each judge call sends, which OpenAI-compatible providers
bill as input (a ``response_format``'s json_schema, or the tools for function calling): held against what a real
``ChatOpenAI`` judge was billed by the loopback server for the same goldens. Before, the estimate left the schema
out (about 150 tokens a call, a third of a small call's input)."""

from __future__ import annotations

import pytest
from fault_server import Fault, FaultServer
from langchain_openai import ChatOpenAI

from contextjudge import Golden, LLMTestCase, evaluate
from contextjudge.engine._estimate import estimate
from contextjudge.judges._spend import count_tokens
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)

GOLDENS = [
    {"input": f"How many vacation days do staff in office {k} get?",
     "expected_output": f"Staff in office {k} get {20 + k} vacation days. Unused days carry over until March.",
     "retrieval_context": [f"Employees of office {k} accrue {20 + k} vacation days per year.",
                           "Unused vacation days carry over until March of the following year.",
                           f"The garage of office {k} has {100 + k} parking spaces."]}
    for k in range(6)
]
KEYS = ["contextual_precision", "contextual_recall", "contextual_relevancy", "context_utilization"]


def _metrics(judge):
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]


def _cases():
    # the app's answer differs from the expected one: no request of one metric is another's (the verdict cache)
    return [LLMTestCase(input=g["input"], actual_output="You get " + g["expected_output"],
                        expected_output=g["expected_output"], retrieval_context=g["retrieval_context"])
            for g in GOLDENS]


def _served(server, before):
    after = server.totals()
    return {k: after[k] - before.get(k, 0) for k in after}


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_the_estimates_input_is_within_a_band_of_what_a_loopback_run_was_billed(method):
    faults = ([Fault("http", times=None, status=400, methods=("json_schema",),
                     message="response_format json_schema is not supported by this server")]
              if method == "function_calling" else [])
    with FaultServer(verdict=lambda text, _: "yes", faults=faults,
                     count_tokens=lambda t: count_tokens(t, "gpt-4o-mini")) as server:
        judge = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        if method == "function_calling":
            # a first run finds the method this server takes (json_schema refused, then tools); the estimate of
            # the same model object counts the tools it now sends
            evaluate(_cases()[:1], [ContextualPrecisionMetric(model=judge)], show_progress=False)
        est = estimate(_cases(), KEYS, model=judge)
        before = server.totals()
        result = evaluate(_cases(), _metrics(judge), show_progress=False)
        served = _served(server, before)
        sent = [r for r in server.requests[-served["calls"]:]]
    assert all(m.success is not None for r in result.test_results for m in r.metrics_data)
    assert {r["method"] for r in sent} == {"json_schema" if method == "json_schema" else "tools"}
    assert served["calls"] == est.calls == 4 * len(GOLDENS)
    # the schema as sent: the same count the server billed, call for call
    assert served["schema_tokens"] > 100 * served["calls"]
    assert est.schema_tokens == served["schema_tokens"], (est.schema_tokens, served["schema_tokens"])
    assert 0.9 <= est.input_tokens / served["prompt_tokens"] <= 1.1, (est.input_tokens, served["prompt_tokens"])
    assert f"answer schema sent with each call ({method}" in str(est)


def test_the_embedded_judge_and_a_json_mode_judge_send_no_schema():
    assert estimate([Golden.from_dict(g) for g in GOLDENS], KEYS, model="local").schema_tokens == 0
    faults = [Fault("http", times=None, status=400, methods=("json_schema", "tools"),
                    message="structured output (json_schema, tools) is not supported")]
    with FaultServer(verdict=lambda text, _: "yes", faults=faults,
                     count_tokens=lambda t: count_tokens(t, "gpt-4o-mini")) as server:
        judge = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        evaluate(_cases()[:1], [ContextualPrecisionMetric(model=judge)], show_progress=False)  # finds JSON mode
        est = estimate(_cases(), KEYS, model=judge)
        before = server.totals()
        evaluate(_cases(), _metrics(judge), show_progress=False)
        served = _served(server, before)
    assert served["schema_tokens"] == 0 == est.schema_tokens
    assert 0.9 <= est.input_tokens / served["prompt_tokens"] <= 1.1, (est.input_tokens, served["prompt_tokens"])


def test_the_estimate_of_cases_counts_each_messages_chat_format_and_meets_the_bill_exactly():
    """For cases with the app's answer, the estimate's prompts are the real run's: with each message's chat-format
    tokens (4 a message with its role, 3 priming the reply, as tiktoken's documentation counts OpenAI's chat
    models) and the schema, its input is what the server billed, to the token. Before, it left the chat format out:
    11 tokens a call (a system and a user message) under the bill."""
    with FaultServer(verdict=lambda text, _: "yes", count_tokens=lambda t: count_tokens(t, "gpt-4o-mini")) as server:
        judge = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        est = estimate(_cases(), KEYS, model=judge)
        before = server.totals()
        evaluate(_cases(), _metrics(judge), show_progress=False)
        served = _served(server, before)
    assert served["calls"] == est.calls == 4 * len(GOLDENS)
    assert est.input_tokens == served["prompt_tokens"], (est.input_tokens, served["prompt_tokens"])

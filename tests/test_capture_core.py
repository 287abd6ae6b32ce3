"""The framework-agnostic capture scorer: modes, goldens, bounded memory."""

import logging
import time

import pytest

from contextjudge import ConfigurationError, LLMTestCase
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.testing import FakeJudge


def _case(i):
    return CapturedCase(LLMTestCase(input=f"What is the refund window {i}?", actual_output="30 days",
                                    retrieval_context=["Refunds are accepted within 30 days.", "Office in Lyon."]))


def test_background_scores_and_goldens_fill_expected_output():
    got = []
    scorer = CaptureSession([ContextualPrecisionMetric(), ContextualRelevancyMetric()], model=FakeJudge(),
                           goldens=[{"input": "what is the refund window 1", "expected_output": "30 days."}],
                           on_result=lambda c, r: got.append(r))
    for i in range(3):
        scorer.submit(_case(i))
    assert scorer.flush(10)
    assert scorer.cases[1].test_case.expected_output == "30 days."
    # precision needs expected_output: the case matching a golden is scored, the two others are error results that
    # say what to do (never a silent skip)
    precision = [r for r in got if r.name == "Contextual Precision"]
    assert len(precision) == 3 and [r.score is not None for r in precision].count(True) == 1
    errors = [r for r in precision if r.error]
    assert len(errors) == 2 and all(r.error_type == "MissingTestCaseParamsError" for r in errors)
    assert all("needs an expected_output, and no golden matched this input" in r.error for r in errors)
    assert all("pass goldens" in r.error for r in errors)
    assert [r.score is not None for r in got if r.name == "Contextual Relevancy"] == [True] * 3
    scorer.close()


def test_default_metrics_without_goldens_need_no_expected_output():
    """Production capture with no goldens: no wall of precision/recall errors, only the metrics that can run."""
    got = []
    scorer = CaptureSession(model=FakeJudge(), on_result=lambda c, r: got.append(r))
    assert [m.key for m in scorer.metrics] == ["contextual_relevancy", "context_utilization", "faithfulness",
                                               "turn_contextual_relevancy"]
    for i in range(2):
        scorer.submit(_case(i))
    assert scorer.flush(10)
    assert len(got) == 6 and not any(r.error for r in got)
    scorer.close()
    with_goldens = CaptureSession(model=FakeJudge(), goldens=[{"input": "q", "expected_output": "a"}])
    assert [m.key for m in with_goldens.metrics][:2] == ["contextual_precision", "contextual_recall"]
    with_goldens.close()
    # asked for explicitly without goldens: precision runs, and says on each case why it cannot score it
    asked = CaptureSession([ContextualPrecisionMetric()], model=FakeJudge(), mode="off", max_kept=None)
    asked.submit(_case(0))
    result = asked.score_deferred(show_progress=False)
    (m,) = result.test_results[0].metrics_data
    assert m.score is None and "needs an expected_output" in m.error
    asked.close()


def test_memory_stays_bounded_for_scored_cases():
    scorer = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), max_kept=5)
    for i in range(25):
        scorer.submit(_case(i))
        scorer.flush(10)  # a judge that keeps up: scored cases are forgotten first, nothing unscored is dropped
    assert len(scorer.cases) <= 5 and scorer.evicted >= 20 and scorer.dropped == 0
    scorer.close()


def test_deferred_mode_without_a_store_needs_max_kept_and_off_mode_does_not():
    with pytest.raises(ConfigurationError, match="max_kept"):
        CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred")
    with pytest.raises(ValueError, match="store="):  # the error still is a ValueError, as before
        CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred")
    # "off" captures only (README): the cases are the caller's, bounded by the default max_kept, never "unscored"
    off = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="off")
    assert off.max_kept == 10_000
    off.submit(_case(0))
    off.close()
    assert len(off.test_cases) == 1


def test_off_mode_with_max_kept_drops_the_oldest_and_counts_them(caplog):
    scorer = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="off", max_kept=2)
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        for i in range(4):
            scorer.submit(_case(i))
    assert [c.test_case.input[-2] for c in scorer.cases] == ["2", "3"] and scorer.dropped == 2
    assert sum("dropping its oldest unscored cases" in r.message for r in caplog.records) == 1
    result = scorer.score_deferred(show_progress=False)
    assert len(result) == 2 and all(c.results for c in scorer.cases)
    scorer.close()


def test_off_mode_with_unbounded_max_kept_keeps_everything():
    scorer = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="off", max_kept=None)
    for i in range(30):
        scorer.submit(_case(i))
    assert len(scorer.cases) == 30 and scorer.dropped == 0
    scorer.close()


def test_a_full_scoring_queue_drops_its_oldest_case_and_counts_it(caplog):
    dead = FakeJudge(delay=3600.0)  # down for an hour
    scorer = CaptureSession([ContextualRelevancyMetric()], model=dead, max_queue=3, max_kept=1000, concurrency=1)
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        scorer.submit(_case(0))
        deadline = time.monotonic() + 120  # a bound on the wait, not a speed
        while not scorer._mode._scoring:  # noqa: SLF001 - wait until it is with the judge
            assert time.monotonic() < deadline, "case 0 never reached the judge"
            time.sleep(0.01)
        for i in range(1, 10):
            scorer.submit(_case(i))
        assert scorer.flush(0.2) is False
    # one case is with the judge; the queue holds the newest 3; the rest were dropped, oldest first, and counted
    assert scorer.pending == 4 and scorer.dropped == 6 and len(scorer.cases) == 4
    assert [c.test_case.input[-2] for c in scorer.cases][-3:] == ["7", "8", "9"]
    assert sum("scoring queue is full" in r.message for r in caplog.records) == 1
    assert scorer.close(timeout=0.5) is False


def test_close_honours_its_timeout_once():
    scorer = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=3600.0), max_kept=100)
    for i in range(5):
        scorer.submit(_case(i))
    t0 = time.monotonic()
    assert scorer.close(timeout=3.0) is False
    # one timeout for handing over, scoring and stopping together: well under the three (9 s) it would be if each
    # step had its own, with seconds to spare for a busy machine
    assert time.monotonic() - t0 < 7.5

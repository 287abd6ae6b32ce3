"""The framework-agnostic capture scorer: modes, goldens, bounded memory."""

from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, CaptureScorer
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.testing import FakeJudge


def _case(i):
    return CapturedCase(LLMTestCase(input=f"What is the refund window {i}?", actual_output="30 days",
                                    retrieval_context=["Refunds are accepted within 30 days.", "Office in Lyon."]))


def test_background_scores_and_goldens_fill_expected_output():
    got = []
    scorer = CaptureScorer([ContextualPrecisionMetric(), ContextualRelevancyMetric()], model=FakeJudge(),
                           goldens=[{"input": "what is the refund window 1", "expected_output": "30 days."}],
                           on_result=lambda c, r: got.append(r.name))
    for i in range(3):
        scorer.submit(_case(i))
    assert scorer.flush(10)
    # precision needs expected_output: only the case matching a golden gets it
    assert got.count("Contextual Precision") == 1 and got.count("Contextual Relevancy") == 3
    assert scorer.cases[1].test_case.expected_output == "30 days."
    scorer.close()


def test_memory_stays_bounded_for_scored_cases():
    scorer = CaptureScorer([ContextualRelevancyMetric()], model=FakeJudge(), max_kept=5)
    for i in range(20):
        scorer.submit(_case(i))
    scorer.flush(10)
    for i in range(20, 25):
        scorer.submit(_case(i))
    scorer.flush(10)
    assert len(scorer.cases) <= 10 and scorer.evicted >= 10
    scorer.close()


def test_off_mode_keeps_unscored_cases_without_a_store():
    scorer = CaptureScorer([ContextualRelevancyMetric()], model=FakeJudge(), mode="off", max_kept=2)
    for i in range(4):
        scorer.submit(_case(i))
    assert len(scorer.cases) == 4  # never dropped before they are scored or stored
    result = scorer.score_deferred(show_progress=False)
    assert len(result) == 4 and all(c.results for c in scorer.cases)

"""The pytest plugin and ``assert_test``, run inside pytester sessions (the plugin loads through its pytest11 entry
point, exactly as for a user who installed contextjudge)."""

from __future__ import annotations

import os
import textwrap

import pytest

import contextjudge
from contextjudge import LLMTestCase, assert_test
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

pytest_plugins = ["pytester"]

CASES = textwrap.dedent('''
    from contextjudge import LLMTestCase

    GOOD = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=["Paris is the capital of France.", "Bananas are yellow."])
    BAD = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                      expected_output="Paris is the capital of France. The Louvre opened in 1793.",
                      retrieval_context=["Bananas are yellow.", "Paris is the capital of France."])
''')


INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture
def ptr(pytester):
    pytester.makepyfile(cjcases=CASES)
    pytester.makeini(INI)
    pytester.syspathinsert()
    return pytester


def test_plugin_is_registered_and_inert_until_used(ptr):
    ptr.makepyfile(test_plain="def test_nothing():\n    assert 1 + 1 == 2\n")
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert f"contextjudge-{contextjudge.__version__}" in out  # registered through the pytest11 entry point
    assert "contextjudge:" not in out  # and silent: no summary line when no test used it
    help_text = ptr.runpytest_inprocess("--help").stdout.str()
    assert "--contextjudge-model" in help_text and "--contextjudge-store" in help_text


def test_assert_test_failure_lists_score_threshold_and_reason(ptr):
    ptr.makepyfile(test_gate=textwrap.dedent('''
        from contextjudge import assert_test
        from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric
        from contextjudge.testing import FakeJudge
        from cjcases import GOOD, BAD

        def test_good():
            j = FakeJudge()
            assert_test(GOOD, [ContextualPrecisionMetric(model=j), ContextualRecallMetric(model=j)])

        def test_bad():
            j = FakeJudge()
            assert_test(BAD, [ContextualPrecisionMetric(threshold=0.9, model=j),
                              ContextualRecallMetric(threshold=0.9, model=j)])
    '''))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: 2 of 2 metrics failed for 'What is the capital of France?':",
        "*- Contextual Precision: score 0.500 < threshold 0.900: 1 of 2 nodes are useful*rank 2*",
        "*- Contextual Recall: score 0.500 < threshold 0.900: 1 of 2 statements*Unsupported*Louvre*",
    ])
    result.stdout.fnmatch_lines(["*contextjudge: 2 test case(s) scored, 1 below threshold, 0 with an error*"])


def test_options_fixture_and_store(ptr, tmp_path):
    db = tmp_path / "pytest-results.db"
    ptr.makepyfile(test_opts=textwrap.dedent('''
        from contextjudge import assert_test
        from contextjudge.metrics import ContextualPrecisionMetric
        from contextjudge.testing import FakeJudge
        from cjcases import GOOD

        def test_fixture_gives_the_configured_judge(contextjudge_judge, contextjudge_store, contextjudge):
            assert isinstance(contextjudge_judge, FakeJudge)
            assert contextjudge_store is not None and contextjudge.run_id == "ci-run"

        def test_metric_without_model_uses_the_option():
            assert_test(GOOD, [ContextualPrecisionMetric()])   # no model= : the --contextjudge-model judge

        def test_bound_assert(contextjudge):
            contextjudge.assert_test(GOOD, [ContextualPrecisionMetric()])
    '''))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider", "--contextjudge-model", "fake",
                                     "--contextjudge-store", str(db), "--contextjudge-run-id", "ci-run")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*contextjudge: 2 test case(s) scored, 0 below threshold, 0 with an error; "
                                 f"results in run ci-run of {db}*"])
    s = open_store(str(db))
    info = s.run_info("ci-run")
    assert info.cases == 1 and info.results == 1  # the same case twice is stored (and judged) once
    s.close()


def test_ini_options(ptr):
    ptr.makeini(INI + "contextjudge_model = fake\n")
    ptr.makepyfile(test_ini=textwrap.dedent('''
        from contextjudge.testing import FakeJudge

        def test_judge(contextjudge_judge):
            assert isinstance(contextjudge_judge, FakeJudge)
    '''))
    ptr.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_example_ci_gate_runs(ptr):
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                           "test_rag_with_pytest.py")
    with open(example, encoding="utf-8") as fh:
        ptr.makepyfile(test_rag_with_pytest=fh.read())
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider", "--contextjudge-model", "fake")
    result.assert_outcomes(passed=3)


# ---------------------------------------------------------------------------------------------- outside the plugin
def test_assert_test_returns_the_result_when_everything_passes():
    case = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=["Paris is the capital of France."])
    res = assert_test(case, [ContextualPrecisionMetric(model=FakeJudge())])
    assert res.test_results[0].metrics_data[0].score == 1.0


def test_assert_test_reports_errors_and_keeps_the_callers_metric_untouched():
    from contextjudge.testing import JudgeHTTPError

    case = LLMTestCase(input="q?", expected_output="a.", retrieval_context=["a."])
    metric = ContextualRecallMetric()
    judge = FakeJudge(failures=[JudgeHTTPError(401)])
    with pytest.raises(AssertionError, match=r"Contextual Recall: error \(threshold 0.500\): .*credentials"):
        assert_test(case, [metric], model=judge)
    assert metric._model_arg is None  # noqa: SLF001 - the caller's metric was copied, not changed


def test_faithfulness_answer_relevancy_and_ranking_in_assert_test_and_the_summary(ptr):
    ptr.makepyfile(test_rag=textwrap.dedent('''
        from contextjudge import LLMTestCase, RetrievedNode, assert_test
        from contextjudge.metrics import AnswerRelevancyMetric, FaithfulnessMetric, MRRMetric
        from contextjudge.testing import FakeJudge

        CASE = LLMTestCase(input="What is the capital of France?",
                           actual_output="Paris is the capital. The Louvre opened in 1793.",
                           retrieval_context=[RetrievedNode("Bananas are yellow.", id="b"),
                                              RetrievedNode("Paris is the capital of France.", id="p")],
                           expected_context_ids=["p"])

        def test_rag():
            j = FakeJudge(rules={"Louvre": "no"}, default="yes")
            assert_test(CASE, [FaithfulnessMetric(threshold=0.9, model=j), AnswerRelevancyMetric(model=j),
                               MRRMetric(threshold=0.9)])
    '''))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: 2 of 3 metrics failed for 'What is the capital of France?':",
        "*- Faithfulness: score 0.500 < threshold 0.900: 1 of 2 statements of the actual_output*Louvre*",
        "*- MRR: score 0.500 < threshold 0.900: MRR 0.500: 1 of 1 expected ids found*rank 2*",
    ])
    result.stdout.fnmatch_lines(["*Faithfulness: mean 0.500*", "*Answer Relevancy: mean 0.500*", "*MRR: mean 0.500*"])

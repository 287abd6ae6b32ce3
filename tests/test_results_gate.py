"""Results a person can read and gate on: the wide DataFrame, errors counted, the judge named, pytest's summary and
tracebacks (issue 15)."""

from __future__ import annotations

import textwrap
import warnings

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.errors import JudgeChoiceWarning
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric, _base
from contextjudge.testing import FakeJudge

pytest_plugins = ["pytester"]

CASES = [
    LLMTestCase(input="What is the refund window?", actual_output="30 days.", name="refunds",
                expected_output="Refunds are accepted within 30 days.",
                retrieval_context=["Refunds are accepted within 30 days.", "The office is in Lyon."]),
    LLMTestCase(input="Where is the office?", actual_output="Lyon.",
                retrieval_context=["The office is in Lyon."]),  # no expected_output: precision and recall error
]


def _result():
    j = FakeJudge()
    return evaluate(CASES, [ContextualPrecisionMetric(model=j), ContextualRecallMetric(model=j),
                            ContextualRelevancyMetric(model=j)], show_progress=False)


def test_to_pandas_wide_has_one_row_per_case_and_a_column_per_metric():
    pytest.importorskip("pandas")
    result = _result()
    wide = result.to_pandas(wide=True)
    assert list(wide.columns) == ["case_index", "name", "input", "actual_output", "expected_output",
                                  "retrieval_context", "Contextual Precision", "Contextual Recall",
                                  "Contextual Relevancy", "success", "error"]
    assert len(wide) == 2 and list(wide["input"]) == [c.input for c in CASES]
    assert wide.loc[0, "name"] == "refunds" and wide.loc[0, "expected_output"] == CASES[0].expected_output
    assert wide.loc[0, "retrieval_context"] == ["Refunds are accepted within 30 days.", "The office is in Lyon."]
    assert wide.loc[0, "Contextual Precision"] == result.test_results[0].metric("Contextual Precision").score
    assert wide["Contextual Precision"].isna().tolist() == [False, True]  # the error, not a zero
    assert "needs an expected_output" in wide.loc[1, "error"] and wide["error"].isna().tolist() == [True, False]
    assert len(result.to_pandas()) == 6  # the long layout is unchanged: one row per (case, metric)


def test_errors_are_counted_and_the_judge_named():
    result = _result()
    s = result.summary()
    assert s["Contextual Precision"]["errors"] == 1 and s["Contextual Relevancy"]["errors"] == 0
    assert result.judges() == ["fake-judge"]
    assert "2 metric error(s)" in repr(result) and "judge fake-judge" in repr(result)


def test_the_default_judge_is_named_once_without_configuring_logging(monkeypatch):
    monkeypatch.delenv("CONTEXTJUDGE_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(_base, "_announced", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            evaluate([CASES[1]], [ContextualRelevancyMetric()], show_progress=False)
    said = [w for w in seen if issubclass(w.category, JudgeChoiceWarning)]
    assert len(said) == 1  # once per process and judge, however many metrics and runs
    assert "embedded offline judge 'contextjudge-local'" in str(said[0].message)
    assert "Pass model=... or set CONTEXTJUDGE_MODEL" in str(said[0].message)
    with warnings.catch_warnings(record=True) as seen:  # a judge the user chose is not announced
        warnings.simplefilter("always")
        monkeypatch.setattr(_base, "_announced", set())
        evaluate([CASES[1]], [ContextualRelevancyMetric(model=FakeJudge())], show_progress=False)
        monkeypatch.setenv("CONTEXTJUDGE_MODEL", "local")
        evaluate([CASES[1]], [ContextualRelevancyMetric()], show_progress=False)
    assert not [w for w in seen if issubclass(w.category, JudgeChoiceWarning)]


INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


def test_pytest_hides_assert_test_frames_and_counts_errors(pytester):
    pytester.makeini(INI)
    pytester.makepyfile(test_gate=textwrap.dedent('''
        from contextjudge import LLMTestCase, assert_test
        from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge

        def test_below():
            case = LLMTestCase(input="q", expected_output="Paris.", retrieval_context=["Bananas.", "Paris."])
            assert_test(case, [ContextualPrecisionMetric(threshold=0.9, model=FakeJudge())])

        def test_error(contextjudge):
            case = LLMTestCase(input="q", retrieval_context=["Paris."])
            contextjudge.assert_test(case, [ContextualPrecisionMetric(model=FakeJudge()),
                                            ContextualRelevancyMetric(model=FakeJudge(), threshold=0)])
    '''))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "contextjudge/engine/_assertions.py" not in out and "contextjudge/pytest_plugin.py" not in out
    assert "test_gate.py" in out and "needs an expected_output" in out
    summary = "*contextjudge: 2 test case(s) scored, 1 below threshold, 1 with an error; errors: Contextual Precision 1*"
    result.stdout.fnmatch_lines([summary])

"""The pytest plugin's intervals and pass-rate gate, in pytester sessions (``--contextjudge-min-pass-rate``)."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

# precision 1.0 on GOOD (the useful node first) and 0.0 on BAD (no node shares the expected output's words)
CASES = textwrap.dedent('''
    import pytest
    from contextjudge import LLMTestCase, assert_test
    from contextjudge.metrics import ContextualPrecisionMetric
    from contextjudge.testing import FakeJudge

    GOOD = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=["Paris is the capital of France.", "Bananas are yellow."])
    BAD = LLMTestCase(input="Who wrote Hamlet?", actual_output="Shakespeare.",
                      expected_output="William Shakespeare wrote Hamlet.",
                      retrieval_context=["Bananas are yellow.", "Apples are red."])

    def metric():
        return ContextualPrecisionMetric(model=FakeJudge(), threshold=0.5)
''')


@pytest.fixture
def ptr(pytester):
    pytester.makepyfile(cjgate=CASES)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.syspathinsert()
    return pytester


def _tests(good: int, bad: int) -> str:
    return ("from cjgate import GOOD, BAD, metric, assert_test\n"
            "import pytest\n\n"
            f"@pytest.mark.parametrize('i', range({good}))\n"
            "def test_good(i):\n    assert_test(GOOD, [metric()])\n\n"
            f"@pytest.mark.parametrize('i', range({bad}))\n"
            "def test_bad(i):\n    assert_test(BAD, [metric()])\n")


def test_summary_shows_mean_and_pass_rate_with_intervals(ptr):
    ptr.makepyfile(test_cases=_tests(3, 1))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)  # no gate: a below-threshold case fails its test, as before
    # mean 0.75 over 4 (t interval, s = 0.5, t_3 3.179 -> +- 0.795, clipped), pass rate 3 of 4 (Wilson)
    assert ("Contextual Precision: mean 0.750 [0.000, 1.000], pass rate 0.750 [0.301, 0.954] (4 scored)"
            in result.stdout.str())


def test_gate_passes_when_the_interval_reaches_the_rate(ptr):
    ptr.makepyfile(test_cases=_tests(3, 2))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider", "--contextjudge-min-pass-rate", "0.8")
    # 3 of 5 pass: 0.6 [0.231, 0.882] reaches 0.8, so no failure; the two low cases do not fail their tests
    result.assert_outcomes(passed=5)
    assert result.ret == 0
    out = result.stdout.str()
    assert "pass rate 0.600 [0.231, 0.882]" in out and "pass-rate gate 0.8 passed" in out


def test_gate_fails_the_session_when_the_whole_interval_is_below(ptr):
    ptr.makepyfile(test_cases=_tests(2, 10))
    ptr.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\ncontextjudge_min_pass_rate = 0.8\n")
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)  # every test passes on its own ...
    assert result.ret == 1  # ... and the session fails on the pass rate: 2 of 12, [0.047, 0.448] < 0.8
    assert ("contextjudge: FAILED: Contextual Precision pass rate 0.167 [0.047, 0.448] over 12 result(s) is below "
            "0.8 with its whole 95% interval") in result.stdout.str()


def test_errors_still_fail_their_tests_under_the_gate(ptr):
    ptr.makepyfile(test_cases=textwrap.dedent('''
        from cjgate import GOOD, metric, assert_test
        from contextjudge import LLMTestCase

        def test_no_expected_output():
            assert_test(LLMTestCase(input="q", actual_output="a", retrieval_context=["x"]), [metric()])
    '''))
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider", "--contextjudge-min-pass-rate", "0.1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*needs an expected_output*"])


def test_a_bad_rate_is_a_usage_error(ptr):
    ptr.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = ptr.runpytest_inprocess("-p", "no:cacheprovider", "--contextjudge-min-pass-rate", "80%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--contextjudge-min-pass-rate '80%': expected a share between 0 and 1*"])

"""The error tree: user mistakes raise a ContextJudgeError subclass that is still the built-in it stands for."""

from __future__ import annotations

import pytest

import contextjudge
from contextjudge import (
    ConfigurationError,
    ConfigurationTypeError,
    ContextJudgeError,
    EvaluationResult,
    MetricNotFoundError,
    MetricResult,
    MLLMImage,
    TestResult,
    UsageError,
    cli,
)
from contextjudge.cli import _shared
from contextjudge.judges import resolve_model
from contextjudge.metrics import ContextualPrecisionMetric, TurnContextualPrecisionMetric


def test_each_error_is_the_builtin_it_replaces():
    assert issubclass(ConfigurationError, ContextJudgeError) and issubclass(ConfigurationError, ValueError)
    assert issubclass(ConfigurationTypeError, ConfigurationError) and issubclass(ConfigurationTypeError, TypeError)
    assert issubclass(MetricNotFoundError, ContextJudgeError) and issubclass(MetricNotFoundError, KeyError)
    assert issubclass(UsageError, ContextJudgeError)
    assert _shared.UsageError is UsageError


def test_every_error_is_documented_in_the_tree():
    doc = contextjudge.errors.__doc__
    for name in contextjudge.errors.__all__:
        assert name in doc, name


@pytest.mark.parametrize("make, builtin, says", [
    (lambda: resolve_model(42), TypeError, "not int"),
    (lambda: ContextualPrecisionMetric(threshold=1.5, model="local"), ValueError, "threshold=0.5"),
    (lambda: ContextualPrecisionMetric(threshold="high", model="local"), ValueError, "between 0 and 1"),
    (lambda: TurnContextualPrecisionMetric(window_size=0, model="local"), ValueError, "window_size=10"),
    (lambda: MLLMImage(), ValueError, "url="),
    (lambda: MLLMImage.from_token("[[nope]]"), ValueError, "str(image)"),
    (lambda: MetricResult(name="m", score=float("nan"), threshold=0.5, success=False), ValueError, "score=None"),
])
def test_a_wrong_argument_raises_a_configuration_error(make, builtin, says):
    with pytest.raises(ConfigurationError) as info:
        make()
    assert isinstance(info.value, builtin)
    assert says in str(info.value)


def test_render_report_without_a_result_or_store_is_a_type_error():
    from contextjudge.report import render_report

    with pytest.raises(ConfigurationTypeError, match="pass one of them"):
        render_report()
    with pytest.raises(TypeError):
        render_report(EvaluationResult(test_results=[]), compare="run-1")


def test_asking_a_result_for_a_missing_metric_names_the_ones_it_has():
    tr = TestResult(index=0, name="c", test_case=None, metrics_data=[
        MetricResult(name="Contextual Precision", score=1.0, threshold=0.5, success=True)])
    with pytest.raises(MetricNotFoundError) as info:
        tr.metric("Recall")
    assert isinstance(info.value, KeyError)
    assert str(info.value) == "no result for metric 'Recall'; use one of ['Contextual Precision']"


def test_the_cli_usage_error_still_prints_one_line_and_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.jsonl").write_text('{"input": "q"}\n')
    rc = cli.main(["eval", "--app", "not-a-spec", "--goldens", "g.jsonl"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "write it like myapp.chain:rag_chain" in err[0]

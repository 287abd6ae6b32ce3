"""DeepEval's ``evaluate`` / ``assert_test`` and its config objects, over contextjudge's ``evaluate``.

What each config does here:

- ``AsyncConfig(run_async, throttle_value, max_concurrent)``: ``max_concurrent`` cases in flight (1 when
  ``run_async=False``); ``throttle_value`` seconds between starting cases is not applied (judge calls are already
  bounded per model by ``JudgeOptions``).
- ``DisplayConfig(show_indicator, print_results, verbose_mode, display_option, results_folder, results_subfolder)``:
  the progress bar, the printed results table and pass rates (all, failing or passing cases), every metric's
  intermediate steps printed (``verbose_mode`` overrides the metrics' own), and a JSON file of the run written to
  ``results_folder[/results_subfolder]/test_run_<time>.json``. ``file_type``/``file_output_dir`` are accepted and
  not used (``contextjudge report`` writes the HTML report from a store).
- ``ErrorConfig(ignore_errors, skip_on_missing_params)``: a case missing a field a metric needs is left out of that
  metric's results with ``skip_on_missing_params``; a judge error is recorded on its result and the run goes on
  whatever ``ignore_errors`` says (DeepEval stops at the first one unless it is True).
- ``CacheConfig(write_cache, use_cache)``: verdicts are kept in (``write_cache``) and read from (``use_cache``) a
  SQLite file under ``.deepeval/`` (or ``$DEEPEVAL_CACHE_FOLDER``), keyed by judge, prompt and content, so a second
  run of the same cases with ``use_cache=True`` makes no judge call. Only when a ``cache_config`` is passed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..._result import EvaluationResult as _CoreResult
from ...engine import evaluate as _evaluate
from ...errors import ConfigurationError
from ._verbose import print_verbose

__all__ = ["AsyncConfig", "CacheConfig", "DisplayConfig", "ErrorConfig", "EvaluationResult", "TestRunResultDisplay",
           "assert_test", "evaluate", "evaluate_traces", "log_hyperparameters", "on_test_run_end", "print_results"]

_logged: list[Any] = []  # the @log_hyperparameters functions, newest last
_run_end: list[Any] = []  # the @on_test_run_end functions


def log_hyperparameters(func: Any = None, **_: Any) -> Any:
    """DeepEval's ``@deepeval.log_hyperparameters``: the decorated function returns a dict of hyperparameters, which
    every later ``evaluate`` (given none of its own) keeps with its run."""
    def decorate(fn: Any) -> Any:
        _logged.append(fn)
        return fn

    return decorate(func) if callable(func) else decorate


def on_test_run_end(func: Any) -> Any:
    """DeepEval's ``@deepeval.on_test_run_end``: called after each ``evaluate`` ends."""
    _run_end.append(func)
    return func


def _hyperparameters(given: Any) -> Any:
    if given is not None or not _logged:
        return given
    try:
        return dict(_logged[-1]())
    except Exception as exc:  # noqa: BLE001 - the user's function failing never stops the run
        import logging  # noqa: PLC0415

        logging.getLogger("contextjudge").warning("contextjudge: @log_hyperparameters function failed: %s", exc)
        return None


class TestRunResultDisplay(Enum):
    __test__ = False  # not a pytest test class

    ALL = "all"
    FAILING = "failing"
    PASSING = "passing"


@dataclass
class AsyncConfig:
    run_async: bool = True
    throttle_value: float = 0
    max_concurrent: int = 20

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise ConfigurationError("AsyncConfig(max_concurrent=...) must be at least 1.")
        if self.throttle_value < 0:
            raise ConfigurationError("AsyncConfig(throttle_value=...) must be at least 0.")


@dataclass
class DisplayConfig:
    show_indicator: bool = True
    print_results: bool = True
    verbose_mode: bool | None = None
    display_option: TestRunResultDisplay | str | None = TestRunResultDisplay.ALL
    results_folder: str | None = None
    results_subfolder: str | None = None
    truncate_passing_cases: bool = True
    inspect_after_run: bool = True
    file_type: str | None = None
    file_output_dir: str | None = None


@dataclass
class CacheConfig:
    write_cache: bool = True
    use_cache: bool = False


@dataclass
class ErrorConfig:
    ignore_errors: bool = False
    skip_on_missing_params: bool = False


@dataclass(repr=False)
class EvaluationResult(_CoreResult):
    """contextjudge's ``EvaluationResult`` with DeepEval's two extra names (``test_run_id``, ``confident_link``)."""

    @property
    def test_run_id(self) -> str | None:
        return self.run_id

    @property
    def confident_link(self) -> None:
        return None  # no hosted platform

    @classmethod
    def of(cls, result: _CoreResult) -> EvaluationResult:
        """The core result, each unnamed test result named as DeepEval names it: ``test_case_0``, ``test_case_1``,
        ... in run order (``conversational_test_case_N`` for a conversation); a name the case carries is kept."""
        for tr in result.test_results:
            if not tr.name:
                tr.name = f"{'conversational_' if tr.conversational else ''}test_case_{tr.index}"
        return cls(**{f.name: getattr(result, f.name) for f in dataclasses.fields(_CoreResult)})

    __repr__ = _CoreResult.__repr__


# ------------------------------------------------------------------------------------------------ the verdict cache
class _CacheFile:
    """The ``CacheConfig`` verdict cache: a results store used as the verdict cache's backend, read and/or written."""

    def __init__(self, config: CacheConfig) -> None:
        from ...store import open_store  # noqa: PLC0415

        folder = Path(os.environ.get("DEEPEVAL_CACHE_FOLDER") or ".deepeval")
        folder.mkdir(parents=True, exist_ok=True)
        self.store = open_store(str(folder / "contextjudge-verdicts.db"))
        self.config = config

    def get_verdict(self, key: str) -> dict[str, Any] | None:
        return self.store.get_verdict(key) if self.config.use_cache else None

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        if self.config.write_cache:
            self.store.put_verdict(key, value)


def _run_kwargs(async_config: Any, display_config: Any, cache_config: Any, error_config: Any, identifier: Any,
                hyperparameters: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if async_config is not None:
        out.setdefault("max_concurrency", async_config.max_concurrent if async_config.run_async else 1)
    if display_config is not None and display_config.show_indicator is False:
        out.setdefault("show_progress", False)
    if error_config is not None and error_config.skip_on_missing_params:
        out.setdefault("skip_on_missing_params", True)
    if identifier is not None:
        out.setdefault("run_name", str(identifier))
    if hyperparameters:
        out.setdefault("run_config", {"hyperparameters": {k: str(v) for k, v in dict(hyperparameters).items()}})
    if cache_config is not None and (cache_config.use_cache or cache_config.write_cache) and "context" not in out \
            and "run" not in out:
        from ...judges import (
            JudgeOptions,  # noqa: PLC0415
            RunContext,  # noqa: PLC0415
            VerdictCache,  # noqa: PLC0415
        )

        options = out.pop("judge_options", None) or JudgeOptions()
        out["context"] = RunContext(options=options, cache=VerdictCache(backend=_CacheFile(cache_config)))
    return out


def _with_verbose(metrics: Any, display_config: Any) -> Any:
    """``DisplayConfig(verbose_mode=...)`` overrides each metric's own, on copies (the user's metrics stay as they
    are)."""
    if metrics is None or display_config is None or display_config.verbose_mode is None:
        return metrics
    out = []
    for m in metrics:
        m2 = copy.copy(m)
        m2.verbose_mode = bool(display_config.verbose_mode)
        out.append(m2)
    return out


# ---------------------------------------------------------------------------------------------------- printing
def _fmt(x: Any, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _cut(text: Any, n: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "\u2026"


_AUTO_NAME = re.compile(r"(conversational_)?test_case_\d+")  # the names ``EvaluationResult.of`` gives


def print_results(result: _CoreResult, display_config: DisplayConfig | None = None) -> None:
    """The results table (per case and metric: score, threshold, pass, reason or error) and each metric's pass
    rate, printed to stdout as DeepEval does after ``evaluate``."""
    option = getattr(display_config, "display_option", None) or TestRunResultDisplay.ALL
    option = TestRunResultDisplay(option.value if isinstance(option, TestRunResultDisplay) else str(option))
    rows = []
    for tr in result.test_results:
        if option is TestRunResultDisplay.FAILING and tr.success:
            continue
        if option is TestRunResultDisplay.PASSING and not tr.success:
            continue
        label = (tr.name if tr.name and not _AUTO_NAME.fullmatch(tr.name)
                 else _cut(tr.input or ("conversation" if tr.conversational else ""), 40))
        if not tr.metrics_data:
            rows.append((str(tr.index + 1), label, "-", "n/a", "n/a", "ERROR", _cut(tr.error, 70)))
        for m in tr.metrics_data:
            verdict = "ERROR" if m.error else "PASS" if m.success else "FAIL"
            rows.append((str(tr.index + 1), label, m.name, _fmt(m.score), _fmt(m.threshold, ".2f"), verdict,
                         _cut(m.error or m.reason or "", 70)))
    head = ("#", "test case", "metric", "score", "threshold", "result", "reason")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print()
    print("=" * 78)
    print(f"Evaluation results ({len(result.test_results)} test case(s); judge {', '.join(result.judges()) or 'n/a'})")
    print("=" * 78)
    print(line.format(*head))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    print()
    print("Overall metric pass rates")
    for name in result.metric_names():
        rate = result.pass_rate(name)
        data = [m for tr in result.test_results for m in tr.metrics_data if m.name == name]
        errors = sum(1 for m in data if m.error)
        tail = f", {errors} error(s)" if errors else ""
        print(f"  {name}: {_fmt(None if rate is None else rate * 100, '.2f')}% pass rate "
              f"({sum(1 for m in data if m.success)} of {len(data)}{tail})")
    print("=" * 78)


def _print_verbose(result: _CoreResult) -> None:
    for tr in result.test_results:
        for m in tr.metrics_data:
            if m.verbose_logs:
                print_verbose(m, m)


def _write_folder(result: _CoreResult, results_folder: str, display_config: DisplayConfig, identifier: Any,
                  hyperparameters: Any) -> None:
    folder = Path(results_folder)
    if display_config.results_subfolder:
        folder = folder / display_config.results_subfolder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"test_run_{time.strftime('%Y%m%d_%H%M%S')}_{(result.run_id or 'run')[:8]}.json"
    payload = {"test_run_id": result.run_id, "identifier": identifier,
               "hyperparameters": {k: str(v) for k, v in dict(hyperparameters or {}).items()},
               "summary": result.summary(), "test_results": [tr.to_dict() for tr in result.test_results]}
    path.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")


def _finish(result: _CoreResult, display_config: DisplayConfig | None, identifier: Any,
            hyperparameters: Any) -> EvaluationResult:
    out = EvaluationResult.of(result)
    for fn in tuple(_run_end):
        try:
            fn()
        except Exception:  # noqa: BLE001 - the user's hook failing never loses the results
            import logging  # noqa: PLC0415

            logging.getLogger("contextjudge").exception("contextjudge: an @on_test_run_end function failed")
    display = display_config or DisplayConfig()
    _print_verbose(out)
    if display.print_results:
        print_results(out, display)
    if display.results_folder:
        _write_folder(out, display.results_folder, display, identifier, hyperparameters)
    return out


# --------------------------------------------------------------------------------------------------- evaluate
def evaluate(test_cases: Any = None, metrics: list[Any] | None = None, metric_collection: str | None = None,
             hyperparameters: dict[str, Any] | None = None, identifier: str | None = None,
             async_config: AsyncConfig | None = None, display_config: DisplayConfig | None = None,
             cache_config: CacheConfig | None = None, error_config: ErrorConfig | None = None,
             **kwargs: Any) -> EvaluationResult:
    """DeepEval's ``evaluate(test_cases=, metrics=, ...configs)`` (an ``EvaluationDataset`` is taken as its test
    cases), or ``evaluate(observed_callback=app, goldens=[...])``; prints the results table unless
    ``display_config`` says not to. Any of contextjudge's own ``evaluate`` keywords (``store``, ``model``, ...) may
    be added."""
    if metric_collection is not None:
        raise ConfigurationError("evaluate(metric_collection=...) names metrics kept on Confident AI; pass the "
                                 "metrics themselves: metrics=[ContextualPrecisionMetric(...), ...].")
    for peer_only in ("official", "classifiers", "mcp_servers", "_skip_reset"):  # Confident AI / MCP: not used
        kwargs.pop(peer_only, None)
    if hasattr(test_cases, "test_cases") and hasattr(test_cases, "goldens"):  # an EvaluationDataset
        test_cases = test_cases.test_cases
    hyperparameters = _hyperparameters(hyperparameters)
    run = _run_kwargs(async_config, display_config, cache_config, error_config, identifier, hyperparameters, kwargs)
    result = _evaluate(test_cases=test_cases, metrics=_with_verbose(metrics, display_config), **run)
    return _finish(result, display_config, identifier, hyperparameters)


def evaluate_traces(traces: list[Any], metrics: list[Any] | None = None, *, hyperparameters: Any = None,
                    identifier: Any = None, display_config: Any = None, cache_config: Any = None,
                    error_config: Any = None, async_config: Any = None, **kwargs: Any) -> EvaluationResult:
    """Score traces the app already ran (``EvaluationDataset.evals_iterator``), as ``evaluate`` would."""
    hyperparameters = _hyperparameters(hyperparameters)
    run = _run_kwargs(async_config, display_config, cache_config, error_config, identifier, hyperparameters, kwargs)
    result = _evaluate(metrics=_with_verbose(metrics, display_config), traces=traces, **run)
    return _finish(result, display_config, identifier, hyperparameters)


def assert_test(test_case: Any = None, metrics: list[Any] | None = None, golden: Any = None,
                run_async: bool = True, observed_callback: Any = None, **kwargs: Any) -> Any:
    """DeepEval's ``assert_test``: raise ``AssertionError`` listing each failing metric.

    ``assert_test(test_case=..., metrics=[...])`` scores one test case. ``assert_test(golden=golden,
    observed_callback=app)`` runs ``app(golden.input)`` in a trace and scores its ``@observe`` spans (and, with
    ``metrics=``, the whole trace); ``assert_test(golden=golden, metrics=[...])`` without a callback scores the
    trace of the ``@observe`` app this test called last (DeepEval 4.x's form: the app is called in the test body).
    """
    __tracebackhide__ = True
    kwargs.pop("classifiers", None)
    if not run_async:
        kwargs.setdefault("max_concurrency", 1)
    if test_case is not None:
        from ...engine import assert_test as _assert  # noqa: PLC0415 - lives with the pytest tooling

        return _assert(test_case, metrics or [], **kwargs)
    if golden is None:
        raise ConfigurationError("assert_test() needs test_case=... (with metrics=[...]) or golden=... (with "
                                 "observed_callback=app, or after calling an @observe app in the test).")
    from ..._aio import run_sync  # noqa: PLC0415
    from ..._tracing import run_traces  # noqa: PLC0415
    from ...engine import format_failures  # noqa: PLC0415
    from .tracing import take_recorded_trace  # noqa: PLC0415

    if observed_callback is not None:
        traces = run_sync(run_traces(observed_callback, [golden]))
    else:
        trace = take_recorded_trace()
        if trace is None:
            raise ConfigurationError(
                "assert_test(golden=...) found no trace: call the @observe-decorated app (decorated with "
                "contextjudge.compat.deepeval.tracing.observe) in this test before assert_test, or pass "
                "observed_callback=app.")
        trace.golden = golden
        traces = [trace]
    kwargs.setdefault("show_progress", False)
    result = _evaluate(metrics=metrics or [], traces=traces, **kwargs)
    failures = [m for tr in result.test_results for m in tr.metrics_data if not m.success]
    broken = [tr.error for tr in result.test_results if tr.error and not tr.metrics_data]
    if broken:
        raise AssertionError("contextjudge: the golden's trace could not be scored: " + "; ".join(broken))
    if failures:
        total = sum(len(tr.metrics_data) for tr in result.test_results)
        raise AssertionError(f"{len(failures)} of {total} metrics failed for golden {golden.input!r}:\n"
                             + format_failures(failures))
    return EvaluationResult.of(result)

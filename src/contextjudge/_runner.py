"""The runner: score many test cases with many metrics, concurrently, recording failures per case.

``aevaluate`` is the async core; ``evaluate`` is its sync facade and works inside a running event loop. Concurrency
is bounded on judge calls per model (``JudgeOptions.max_concurrency``) and on cases in flight. A metric that fails
on a case is recorded with its error and the run goes on. With a ``store``, every result is written as soon as it
is scored, and a run started again with the same ``run_id`` skips what is already stored.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import os
import sys
import time
import uuid
from typing import Any, Callable, Iterable, Sequence

from ._aio import run_sync
from ._judge import RunContext, VerdictCache, use_run_context
from ._result import EvaluationResult, MetricResult, Tally, TestResult, Usage
from ._retry import JudgeOptions
from ._testcase import ConversationalTestCase, LLMTestCase
from .errors import ContextJudgeError, InvalidTestCaseError, MissingTestCaseParamsError

__all__ = ["aevaluate", "case_key", "evaluate"]

logger = logging.getLogger("contextjudge")


def case_key(index: int, test_case: Any) -> str:
    """The key of a case within a run: its own id when it has one, else its position and content hash."""
    own = getattr(test_case, "id", None)
    if own:
        return str(own)
    fp = test_case.fingerprint() if hasattr(test_case, "fingerprint") else str(index)
    return f"{index}-{fp}"


def _metric_config(metric: Any) -> dict[str, Any]:
    return {"class": type(metric).__name__, "name": getattr(metric, "name", None),
            "threshold": getattr(metric, "threshold", None), "strict_mode": getattr(metric, "strict_mode", None),
            "template": getattr(getattr(metric, "evaluation_template", None), "__qualname__", None)}


def _judges(metrics: Sequence[Any]) -> list[dict[str, Any]]:
    """Which judges score this run (name and identity), for the store; a judge that cannot load is left out."""
    from ._models import judge_identity, judge_name  # noqa: PLC0415

    out: list[dict[str, Any]] = []
    for m in metrics:
        try:
            model = m.model
            entry = {"name": judge_name(model), "identity": judge_identity(model)}
        except Exception:  # noqa: BLE001 - the metric reports its own judge failure when it runs
            continue
        if entry not in out:
            out.append(entry)
    return out


class _Progress:
    def __init__(self, total: int, enabled: bool | None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm  # noqa: PLC0415
                self.bar = tqdm(total=total, desc="contextjudge", unit="case", leave=True)
            except Exception:  # noqa: BLE001 - a progress bar is never worth failing a run
                self.bar = None
        self.calls = 0
        self.hits = 0

    def on_call(self, event: dict[str, Any]) -> None:
        if event.get("cached"):
            self.hits += 1
        else:
            self.calls += 1
        if self.bar is not None:
            self.bar.set_postfix(judge_calls=self.calls, cache_hits=self.hits, refresh=False)

    def case_done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def _score_case(index: int, tc: Any, metrics: Sequence[Any], *, run_id: str | None, recorder: Any,
                      done: dict[tuple[str, str], MetricResult], skip_on_missing_params: bool,
                      raise_exceptions: bool) -> TestResult:
    key = case_key(index, tc)
    tr = TestResult(index=index, name=getattr(tc, "name", None), test_case=tc)
    if recorder is not None and run_id is not None:
        recorder.save_case(run_id, key, index, tc)

    async def one(metric: Any) -> MetricResult | None:
        prior = done.get((key, metric.name))
        if prior is not None:
            return prior
        try:
            result = await metric.a_score(tc)
        except (MissingTestCaseParamsError, InvalidTestCaseError) as exc:
            if raise_exceptions:
                raise
            if skip_on_missing_params and isinstance(exc, MissingTestCaseParamsError):
                return None
            result = MetricResult(name=metric.name, score=None, threshold=metric.threshold, success=False,
                                  error=str(exc), error_type=type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - one bad metric never aborts a run
            if raise_exceptions:
                raise
            logger.exception("contextjudge: %s failed on case %s", metric.name, key)
            result = MetricResult(name=metric.name, score=None, threshold=getattr(metric, "threshold", 0.5),
                                  success=False, error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__)
        if recorder is not None and run_id is not None:
            recorder.save_result(run_id, key, result)
        return result

    applicable = [m for m in metrics
                  if isinstance(tc, ConversationalTestCase) == bool(getattr(m, "conversational", False))]
    results = await asyncio.gather(*(one(m) for m in applicable))
    tr.metrics_data = [r for r in results if r is not None]
    if not applicable:
        tr.error = "no metric applies to this test case (single-turn metrics need LLMTestCase, Turn* metrics " \
                   "need ConversationalTestCase)"
    return tr


async def aevaluate(
    test_cases: Iterable[LLMTestCase | ConversationalTestCase] | None = None,
    metrics: Sequence[Any] | None = None,
    *,
    observed_callback: Any = None,
    goldens: Any = None,
    max_concurrency: int = 16,
    judge_options: JudgeOptions | None = None,
    show_progress: bool | None = None,
    store: Any = None,
    run_id: str | None = None,
    run_name: str | None = None,
    skip_on_missing_params: bool = False,
    raise_exceptions: bool = False,
    context: RunContext | None = None,
    run_config: dict[str, Any] | None = None,
    on_result: Callable[[TestResult], Any] | None = None,
    keep_results: bool = True,
) -> EvaluationResult:
    """Score every test case with every applicable metric. See ``evaluate`` for the parameters."""
    case_metrics: list[Sequence[Any]] | None = None
    failed: list[TestResult] = []
    if observed_callback is not None:
        from .tracing import observed_cases, run_traces  # noqa: PLC0415 - component-level evaluation

        traces = await run_traces(observed_callback, goldens, max_concurrency=max_concurrency)
        observed = observed_cases(traces, metrics)
        ok = [o for o in observed if o.test_case is not None]
        failed = [TestResult(index=-1, name=o.name, test_case=None, error=o.error)
                  for o in observed if o.test_case is None]
        cases = [*(list(test_cases) if test_cases is not None else []), *(o.test_case for o in ok)]
        case_metrics = [list(metrics or [])] * (len(cases) - len(ok)) + [o.metrics for o in ok]
        metrics = list(dict.fromkeys([*(metrics or []), *(m for o in observed for m in o.metrics)]))
        if not metrics:
            raise ContextJudgeError("evaluate(observed_callback=...) found no metrics: pass metrics= to "
                                    "@observe(metrics=[...]) on the components to score, or metrics=[...] to evaluate.")
    else:
        if test_cases is None:
            raise ContextJudgeError("evaluate() needs test_cases=[...] (or observed_callback=app with goldens=[...]).")
        cases = test_cases
    if not metrics:
        raise ContextJudgeError("evaluate() needs at least one metric, e.g. metrics=[ContextualPrecisionMetric()].")
    if isinstance(cases, (LLMTestCase, ConversationalTestCase)):
        raise ContextJudgeError("evaluate(test_cases=...) takes an iterable of test cases, got one test case: pass "
                                "test_cases=[case] (or use metric.measure(case)).")
    if isinstance(cases, (str, bytes, dict)) or not hasattr(cases, "__iter__"):
        raise ContextJudgeError(f"evaluate(test_cases=...) takes a list or another iterable of test cases, got a "
                                f"{type(cases).__name__}.")
    sized = hasattr(cases, "__len__") and hasattr(cases, "__getitem__")
    if sized:  # a list is checked whole before any judge call; a generator is checked case by case as it is read
        for i, tc in enumerate(cases):
            _check_case(i, tc)
    recorder = store
    if isinstance(store, (str, os.PathLike)):
        from .store import open_store  # noqa: PLC0415 - optional module, loaded when asked for

        recorder = open_store(store)
    opts = judge_options or JudgeOptions()
    ctx = context or RunContext(options=opts, cache=VerdictCache(backend=recorder))
    progress = _Progress(len(cases) if sized else None, show_progress)
    ctx.on_call.append(progress.on_call)
    done: dict[tuple[str, str], MetricResult] = {}
    if recorder is not None:
        from . import __version__  # noqa: PLC0415

        run_id = recorder.begin_run(run_id, {**(run_config or {}), "name": run_name,
                                             "metrics": [_metric_config(m) for m in metrics],
                                             "judges": _judges(metrics), "contextjudge": __version__,
                                             "cases": len(cases) if sized else None})
        done = recorder.completed_results(run_id)
        ctx.on_call.append(lambda ev: recorder.save_judge_call(run_id, ev))
    elif run_id is None:
        run_id = uuid.uuid4().hex[:12]
    t0 = time.perf_counter()
    # A fixed pool of max_concurrency workers pulls cases one at a time, so nothing is created per case up front
    # (a task per case would hold every case's coroutine until its turn) and a generator of cases is read only as
    # fast as it is scored.
    source = iter(enumerate(cases))
    slots: list[TestResult | None] = []
    tally = Tally()
    callback_errors = [0]

    async def deliver(tr: TestResult) -> None:
        tally.add(tr)
        if keep_results:
            slots[tr.index] = tr
        if on_result is not None:
            try:
                out = on_result(tr)
                if inspect.isawaitable(out):
                    await out
            except Exception:  # noqa: BLE001 - the user's sink failing never stops the run
                callback_errors[0] += 1
                logger.exception("contextjudge: on_result failed on case %s; the run goes on", tr.index)

    async def worker() -> None:
        while True:
            try:
                i, tc = next(source)
            except StopIteration:
                return
            if keep_results:
                slots.append(None)
            try:
                if not sized:
                    try:
                        _check_case(i, tc)
                    except InvalidTestCaseError as exc:
                        await deliver(TestResult(index=i, name=None, test_case=tc, error=str(exc)))
                        continue
                own = metrics if case_metrics is None else case_metrics[i]
                tr = await _score_case(i, tc, own, run_id=run_id, recorder=recorder, done=done,
                                       skip_on_missing_params=skip_on_missing_params,
                                       raise_exceptions=raise_exceptions)
                await deliver(tr)
            finally:
                progress.case_done()

    usage_before = copy.copy(ctx.usage)
    try:
        with use_run_context(ctx):
            workers = [asyncio.ensure_future(worker()) for _ in range(max(1, max_concurrency))]
            try:
                await asyncio.gather(*workers)
            except BaseException:
                for w in workers:  # raise_exceptions=True, or the caller cancelled: stop the other workers too
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                raise
    finally:
        progress.close()
    n_cases = len(slots) if keep_results else tally.cases
    for k, tr in enumerate(failed, start=n_cases):
        tr.index = k
        if keep_results:
            slots.append(None)
        await deliver(tr)
    # the run's usage is the judge work this run did: results resumed from the store cost nothing now
    usage = Usage(calls=ctx.usage.calls - usage_before.calls,
                  cache_hits=ctx.usage.cache_hits - usage_before.cache_hits,
                  input_tokens=ctx.usage.input_tokens - usage_before.input_tokens,
                  output_tokens=ctx.usage.output_tokens - usage_before.output_tokens,
                  seconds=ctx.usage.seconds - usage_before.seconds)
    result = EvaluationResult(test_results=[tr for tr in slots if tr is not None], usage=usage, run_id=run_id,
                              duration_seconds=time.perf_counter() - t0,
                              tally=None if keep_results else tally, callback_errors=callback_errors[0])
    if recorder is not None:
        recorder.end_run(run_id, {"summary": result.summary(), "usage": usage.to_dict(),
                                  "duration_seconds": result.duration_seconds})
    return result


def _check_case(i: int, tc: Any) -> None:
    if not isinstance(tc, (LLMTestCase, ConversationalTestCase)):
        raise InvalidTestCaseError(
            f"test_cases[{i}] is a {type(tc).__name__}; pass LLMTestCase or ConversationalTestCase objects.",
            field=f"test_cases[{i}]")


def evaluate(
    test_cases: Iterable[LLMTestCase | ConversationalTestCase] | None = None,
    metrics: Sequence[Any] | None = None,
    **kwargs: Any,
) -> EvaluationResult:
    """Score ``test_cases`` with ``metrics`` and return an ``EvaluationResult``.

    Works from plain scripts, from inside a running event loop (a Jupyter cell, a FastAPI handler) and from threads.
    Keyword arguments: ``max_concurrency`` (cases in flight, default 16), ``judge_options`` (retries, timeouts,
    judge calls in flight per model), ``show_progress`` (default: when stderr is a terminal), ``store`` (a results
    store or its path/URL), ``run_id`` (resume that run), ``run_name``, ``run_config`` (extra facts kept with the
    run in the store, such as the app and its code version), ``skip_on_missing_params``, ``raise_exceptions``
    (default False: failures are recorded per case).

    Long runs: ``test_cases`` may be any iterable, a generator included; it is read as cases are scored, never
    all at once. ``on_result`` (a function or coroutine function) gets each ``TestResult`` as soon as it is
    scored, in completion order (``TestResult.index`` is its position in the input); a failing callback is logged
    and the run goes on. ``keep_results=False`` keeps no per-case results in memory (the returned result has
    the run's summary, means, pass rates and usage, and no ``test_results``): with ``on_result`` or a ``store``,
    a million cases never need to fit in memory.

    Component-level evaluation: ``evaluate(observed_callback=app, goldens=[Golden(input=..., ...)])`` calls
    ``app(golden.input)`` once per golden and scores every ``@observe`` span that carries metrics (see
    ``contextjudge.tracing``); ``metrics=`` then also scores one end-to-end test case per trace. Spans that cannot
    become a test case, and goldens on which the app raised, are recorded as results with ``error`` set.
    """
    observed = kwargs.get("observed_callback") is not None
    if not observed and (test_cases is None or metrics is None):
        raise ContextJudgeError("evaluate() needs test_cases=[...] and metrics=[...] (or observed_callback=app "
                                "with goldens=[...]).")
    return run_sync(aevaluate(test_cases, metrics, **kwargs))

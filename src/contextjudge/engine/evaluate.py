"""The runner: score many test cases with many metrics, concurrently, recording failures per case.

``aevaluate`` is the async core; ``evaluate`` is its sync facade and works inside a running event loop. Concurrency
is bounded on judge calls per model (``JudgeOptions.max_concurrency``) and on cases in flight. A metric that fails
on a case is recorded with its error and the run goes on. With a ``store``, every result is written as soon as it
is scored, and a run started again with the same ``run_id`` skips what is already stored.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import logging
import sys
import time
from typing import Any, Callable, Iterable, Sequence

from .._aio import run_sync
from .._result import EvaluationResult, Tally, TestResult, Usage
from ..cases.identity import case_key
from ..cases.testcase import ConversationalTestCase, LLMTestCase
from ..errors import ConfigurationError, ConfigurationTypeError, InvalidTestCaseError
from ..judges.context import RunContext, tally_since, use_run_context
from ..judges.options import JudgeOptions
from .run import Run
from .score import NO_METRIC_APPLIES, score_case

__all__ = ["aevaluate", "case_key", "evaluate"]

logger = logging.getLogger("contextjudge")


class _Progress:
    def __init__(self, total: int, enabled: bool | None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm  # noqa: PLC0415
                self.bar = tqdm(total=total, desc="scoring", unit="case", leave=True)
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


async def aevaluate(
    test_cases: Iterable[LLMTestCase | ConversationalTestCase] | None = None,
    metrics: Sequence[Any] | None = None,
    *,
    observed_callback: Any = None,
    goldens: Any = None,
    traces: Any = None,
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
    model: Any = None,
    run: Run | None = None,
    case_keys: Sequence[str] | None = None,
    repeats: int | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int | None = None,
) -> EvaluationResult:
    """Score every test case with every applicable metric. See ``evaluate`` for the parameters."""
    if engine != "local":
        kw = _ray_kwargs(engine, test_cases, metrics, locals())
        return await asyncio.to_thread(_evaluate_on_ray, **kw)
    if repeats is not None:
        if run is not None or context is not None:
            raise ConfigurationError("evaluate(repeats=...) sets the judge options of a run it starts; with run= or "
                                     "context=, set JudgeOptions(repeats=...) on that run's judge options instead.")
        judge_options = dataclasses.replace(judge_options or JudgeOptions(), repeats=repeats)
    case_metrics: list[Sequence[Any]] | None = None
    failed: list[TestResult] = []
    if observed_callback is not None or traces is not None:
        from ..tracing import observed_cases, run_traces  # noqa: PLC0415 - component-level evaluation

        if traces is None:
            traces = await run_traces(observed_callback, goldens, max_concurrency=max_concurrency)
        observed = observed_cases(traces, metrics)
        ok = [o for o in observed if o.test_case is not None]
        failed = [TestResult(index=-1, name=o.name, test_case=None, error=o.error)
                  for o in observed if o.test_case is None]
        cases = [*(list(test_cases) if test_cases is not None else []), *(o.test_case for o in ok)]
        case_metrics = [list(metrics or [])] * (len(cases) - len(ok)) + [o.metrics for o in ok]
        metrics = list(dict.fromkeys([*(metrics or []), *(m for o in observed for m in o.metrics)]))
        if not metrics:
            raise ConfigurationError("evaluate(observed_callback=...) found no metrics: pass metrics= to "
                                    "@observe(metrics=[...]) on the components to score, or metrics=[...] to evaluate.")
    else:
        if test_cases is None:
            raise ConfigurationError("evaluate() needs test_cases=[...] (or observed_callback=app with goldens=[...]).")
        cases = test_cases
    if not metrics:
        raise ConfigurationError("evaluate() needs at least one metric, e.g. metrics=[ContextualPrecisionMetric()].")
    if isinstance(cases, (LLMTestCase, ConversationalTestCase)):
        raise ConfigurationTypeError("evaluate(test_cases=...) takes an iterable of test cases, got one test case: pass "
                                "test_cases=[case] (or use metric.measure(case)).")
    if isinstance(cases, (str, bytes, dict)) or not hasattr(cases, "__iter__"):
        raise ConfigurationTypeError(f"evaluate(test_cases=...) takes a list or another iterable of test cases, got a "
                                f"{type(cases).__name__}.")
    sized = hasattr(cases, "__len__") and hasattr(cases, "__getitem__")
    if sized:  # a list is checked whole before any judge call; a generator is checked case by case as it is read
        for i, tc in enumerate(cases):
            _check_case(i, tc)
    owns_run = run is None
    if run is None:
        run = Run(store=store, run_id=run_id, name=run_name, config=run_config, judge_options=judge_options,
                  model=model, context=context)
        ctx = run.context
    else:
        given = [n for n, v in (("store", store), ("run_id", run_id), ("judge_options", judge_options),
                                ("context", context)) if v is not None]
        if given:
            raise ConfigurationError(f"evaluate(run=...) takes its store, id, judge options and context from the run; "
                                     f"do not also pass {', '.join(given)}.")
        ctx = run.context
        if model is not None and model is not ctx.default_model:
            # this call's default judge only: the run's own context (shared with its other callers) is left as is;
            # the copy shares its cache, usage, hooks and semaphores
            ctx = dataclasses.replace(ctx, default_model=model, _default_resolved=None)
    progress = _Progress(len(cases) if sized else None, show_progress)
    ctx.on_call.append(progress.on_call)
    run_id = await run.abegin(metrics, cases=len(cases) if sized else None)
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
                key = case_key(i, tc) if case_keys is None else case_keys[i]
                await run.asave_case(key, i, tc)
                tr = TestResult(index=i, name=getattr(tc, "name", None), test_case=tc)
                scored = await score_case(run, key, tc, own, raise_exceptions=raise_exceptions,
                                          missing="skip" if skip_on_missing_params else "record")
                if scored is None:
                    tr.error = NO_METRIC_APPLIES
                else:
                    tr.metrics_data = scored
                await deliver(tr)
            finally:
                progress.case_done()

    usage_before = copy.copy(ctx.usage)
    tiers_before, repeats_before = copy.deepcopy(ctx.tiers), copy.deepcopy(ctx.repeats)
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
    except BaseException:
        if owns_run:  # stopped by raise_exceptions=True, a cancel or Ctrl-C: the run still ends, as interrupted
            run.end({"error": "the run was stopped before every case was scored"}, status="interrupted")
        raise
    finally:
        progress.close()
        if progress.on_call in ctx.on_call:
            ctx.on_call.remove(progress.on_call)
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
                  seconds=ctx.usage.seconds - usage_before.seconds,
                  cost=None if ctx.usage.cost is None else ctx.usage.cost - (usage_before.cost or 0.0))
    result = EvaluationResult(test_results=[tr for tr in slots if tr is not None], usage=usage, run_id=run_id,
                              duration_seconds=time.perf_counter() - t0,
                              tally=None if keep_results else tally, callback_errors=callback_errors[0],
                              tiers=tally_since(ctx.tiers, tiers_before) or None,
                              repeats=_repeats_summary(tally_since(ctx.repeats, repeats_before)))
    result.store_error = getattr(run, "store_error", None)
    if owns_run:
        errored = (sum(bool(tr.error or any(m.error for m in tr.metrics_data)) for tr in result.test_results)
                   if keep_results else None)
        await run.aend({"summary": result.summary(), "usage": usage.to_dict(),
                        "duration_seconds": result.duration_seconds,
                        "judges": result.judges(), "cases_with_errors": errored,
                        **({"tiers": result.tiers} if result.tiers else {}),
                        **({"repeats": result.repeats} if result.repeats else {})})
    return result


def _ray_kwargs(engine: str, test_cases: Any, metrics: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The arguments of ``engine_ray.evaluate_on_ray`` from evaluate's, refusing what the Ray engine does not do."""
    if engine != "ray":
        raise ConfigurationError(f"evaluate(engine={engine!r}): the engines are 'local' (this process) and 'ray'.")
    unsupported = [name for name, default in (("observed_callback", None), ("goldens", None), ("traces", None),
                                              ("context", None),
                                              ("run", None), ("on_result", None), ("keep_results", True),
                                              ("raise_exceptions", False), ("skip_on_missing_params", False))
                   if given.get(name, default) is not default and given.get(name, default) != default]
    if unsupported:
        raise ConfigurationError(f"evaluate(engine='ray') does not take {', '.join(unsupported)}: the Ray actors "
                                 "score stored cases; use the local engine for these.")
    if test_cases is None or not metrics:
        raise ConfigurationError("evaluate(engine='ray') needs test_cases=[...] and metrics=[...].")
    cases = list(test_cases)
    for i, tc in enumerate(cases):
        _check_case(i, tc)
    options = given.get("judge_options")
    if given.get("repeats") is not None:
        options = dataclasses.replace(options or JudgeOptions(), repeats=given["repeats"])
    return {"cases": cases, "metrics": list(metrics), "model": given.get("model"), "store": given.get("store"),
            "run_id": given.get("run_id"), "run_name": given.get("run_name"), "run_config": given.get("run_config"),
            "case_keys": given.get("case_keys"), "ray_address": given.get("ray_address"),
            "workers": given.get("workers"), "judge_options": options}


def _evaluate_on_ray(**kw: Any) -> EvaluationResult:
    from .ray_engine import evaluate_on_ray  # noqa: PLC0415 - imports ray only when asked for

    return evaluate_on_ray(**kw)


def _repeats_summary(counts: dict[str, Any]) -> dict[str, Any] | None:
    """The judge's own disagreement under repeats: per judge, the share of items whose k answers were not
    unanimous."""
    if not counts or (not counts.get("judges") and not counts.get("deterministic")):
        return None
    for row in (counts.get("judges") or {}).values():
        row["disagreement"] = row["not_unanimous"] / row["items"] if row["items"] else None
    return counts


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
    (default False: failures are recorded per case), ``repeats`` (ask a sampling judge each request k times:
    the majority verdict, ``votes`` and ``agreement`` on each verdict, the score's spread in ``score_spread``, and the
    judge's own disagreement in the result's ``repeats``; a deterministic judge is asked once).

    Long runs: ``test_cases`` may be any iterable, a generator included; it is read as cases are scored, never
    all at once. ``on_result`` (a function or coroutine function) gets each ``TestResult`` as soon as it is
    scored, in completion order (``TestResult.index`` is its position in the input); a failing callback is logged
    and the run goes on. ``keep_results=False`` keeps no per-case results in memory (the returned result has
    the run's summary, means, pass rates and usage, and no ``test_results``): with ``on_result`` or a ``store``,
    a million cases never need to fit in memory.

    Scale-out: ``engine="ray"`` scores the cases on Ray actors (``pip install "contextjudge[ray]"``): a local Ray
    instance with ``workers`` actors (default: one per CPU), or the cluster at ``ray_address`` (then ``store=`` must
    be a PostgreSQL URL every node reaches). The cases are written to ``store`` (default: a temporary SQLite file),
    each actor builds the judge (``model``) once and claims cases from the store's queue, and the results come
    back in the cases' order, the same as the local engine's. Not with ``observed_callback``, ``on_result``,
    ``keep_results=False``, ``raise_exceptions`` or ``skip_on_missing_params``.

    Component-level evaluation: ``evaluate(observed_callback=app, goldens=[Golden(input=..., ...)])`` calls
    ``app(golden.input)`` once per golden and scores every ``@observe`` span that carries metrics (see
    ``contextjudge.tracing``); ``metrics=`` then also scores one end-to-end test case per trace. Spans that cannot
    become a test case, and goldens on which the app raised, are recorded as results with ``error`` set.
    ``traces=`` scores traces the app already ran (``contextjudge.tracing.Trace`` objects, as
    ``compat.deepeval``'s ``EvaluationDataset.evals_iterator`` collects them) the same way.
    """
    observed = kwargs.get("observed_callback") is not None or kwargs.get("traces") is not None
    if not observed and (test_cases is None or metrics is None):
        raise ConfigurationError("evaluate() needs test_cases=[...] and metrics=[...] (or observed_callback=app "
                                "with goldens=[...]).")
    engine = kwargs.pop("engine", "local")
    if engine != "local":  # the Ray driver runs here, in the caller's thread (no event loop needed)
        given = dict(inspect.signature(aevaluate).bind(test_cases, metrics, **kwargs).arguments)
        return _evaluate_on_ray(**_ray_kwargs(engine, test_cases, metrics, given))
    return run_sync(aevaluate(test_cases, metrics, **kwargs))

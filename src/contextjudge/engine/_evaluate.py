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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._aio import run_sync
from .._result import EvaluationResult, Tally, TestResult, Usage
from ..cases.identity import case_key
from ..cases.testcase import ConversationalTestCase, LLMTestCase
from ..errors import ConfigurationError, ConfigurationTypeError, InvalidTestCaseError
from ..judges import JudgeOptions, RunContext, tally_since, use_run_context
from ._run import Run
from ._score import NO_METRIC_APPLIES, score_case

if TYPE_CHECKING:
    import os

    from ..store import RunWrites

__all__ = ["EvaluationOptions", "aevaluate", "case_key", "evaluate"]

logger = logging.getLogger("contextjudge")


class _Progress:
    def __init__(self, total: int | None, enabled: bool | None) -> None:
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


@dataclass(frozen=True)
class EvaluationOptions:
    """How ``evaluate`` / ``aevaluate`` run, as one object to build once and pass to several calls (``options=``).

    Every field is also a keyword of ``evaluate``, and a keyword given with ``options=`` wins over the object's
    field: ``evaluate(cases, metrics, options=nightly, run_name="try 2")``. The fields, by group:

    - the run and its store: ``store`` (a results store or its path/URL), ``run_id`` (resume that run),
      ``run_name``, ``run_config`` (facts kept with the run, such as the app and its code version), ``case_keys``
      (each case's key in the run, instead of its id or position), ``run`` (an existing ``Run`` to score into; it
      brings its own store, id, judge options and context) and ``context`` (a ``RunContext`` to share);
    - judging: ``model`` (the judge of metrics built without one), ``judge_options`` (retries, timeouts, judge
      calls in flight per model, budget) and ``repeats`` (ask a sampling judge each request k times);
    - concurrency and display: ``max_concurrency`` (cases in flight, default 16) and ``show_progress`` (default:
      when stderr is a terminal);
    - results and failures: ``on_result`` (a function or coroutine function given each ``TestResult`` as soon as it
      is scored), ``keep_results`` (False: no per-case results kept in memory), ``raise_exceptions`` (default False:
      failures are recorded per case) and ``skip_on_missing_params``;
    - scale-out: ``engine`` (``"local"`` or ``"ray"``), ``ray_address`` and ``workers``.
    """

    store: RunWrites | str | os.PathLike[str] | None = None
    run_id: str | None = None
    run_name: str | None = None
    run_config: dict[str, Any] | None = None
    case_keys: Sequence[str] | None = None
    run: Run | None = None
    context: RunContext | None = None
    model: Any = None
    judge_options: JudgeOptions | None = None
    repeats: int | None = None
    max_concurrency: int = 16
    show_progress: bool | None = None
    on_result: Callable[[TestResult], Any] | None = None
    keep_results: bool = True
    raise_exceptions: bool = False
    skip_on_missing_params: bool = False
    engine: str = "local"
    ray_address: str | None = None
    workers: int | None = None


_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(EvaluationOptions))


def _options(options: EvaluationOptions | None, kwargs: dict[str, Any]) -> EvaluationOptions:
    """``options`` (default: the defaults) with the keywords given to ``evaluate`` laid over it."""
    if options is not None and not isinstance(options, EvaluationOptions):
        raise ConfigurationTypeError(f"evaluate(options=...) takes an EvaluationOptions, got a "
                                     f"{type(options).__name__}; pass its fields as keywords, or "
                                     "options=EvaluationOptions(...).")
    unknown = sorted(set(kwargs) - _OPTION_NAMES)
    if unknown:
        raise ConfigurationTypeError(f"evaluate() got an unexpected keyword argument {unknown[0]!r}; its keywords "
                                     f"are observed_callback, goldens, traces, options and "
                                     f"{', '.join(sorted(_OPTION_NAMES))}.")
    return dataclasses.replace(options or EvaluationOptions(), **kwargs)


@dataclass
class _Plan:
    """What one evaluation scores: the cases, the metrics, each case's own metrics (component-level evaluation:
    those of its ``@observe`` span), the results of spans and goldens that gave no case, and whether the cases are a
    sized sequence (checked whole up front) or an iterable read as it is scored."""

    cases: Any
    metrics: Sequence[Any]
    case_metrics: list[Sequence[Any]] | None = None
    failed: list[TestResult] = field(default_factory=list)
    sized: bool = False


async def aevaluate(
    test_cases: Iterable[LLMTestCase | ConversationalTestCase] | None = None,
    metrics: Sequence[Any] | None = None,
    *,
    observed_callback: Any = None,
    goldens: Any = None,
    traces: Any = None,
    options: EvaluationOptions | None = None,
    **kwargs: Any,
) -> EvaluationResult:
    """Score every test case with every applicable metric. See ``evaluate`` for the parameters."""
    opts = _options(options, kwargs)
    if opts.engine != "local":
        kw = _ray_kwargs(test_cases, metrics, opts, (observed_callback, goldens, traces))
        return await asyncio.to_thread(_evaluate_on_ray, **kw)
    if opts.repeats is not None:
        if opts.run is not None or opts.context is not None:
            raise ConfigurationError("evaluate(repeats=...) sets the judge options of a run it starts; with run= or "
                                     "context=, set JudgeOptions(repeats=...) on that run's judge options instead.")
        opts = dataclasses.replace(opts, judge_options=dataclasses.replace(opts.judge_options or JudgeOptions(),
                                                                           repeats=opts.repeats))
    plan = await _plan(test_cases, metrics, observed_callback, goldens, traces, opts.max_concurrency)
    run, ctx = _open_run(opts)
    if opts.run is None and opts.context is None:
        await _store_calibrated_judges(run, ctx, plan.metrics)
    return await _Evaluation(plan, opts, run, ctx, owns_run=opts.run is None).score_all()


async def _store_calibrated_judges(run: Run, ctx: RunContext, metrics: Sequence[Any]) -> None:
    """With a store that holds labels, the metrics judged by the bare embedded judge are judged by it calibrated on
    them (``store_calibrated``, as eval, score and report do): swapped in this run's context only."""
    store = run.store
    if store is None or not callable(getattr(store, "labelled_cases", None)):
        return
    from ..judges import judge_name  # noqa: PLC0415
    from ._store_calibration import store_calibrated  # noqa: PLC0415

    for m in metrics:
        try:
            judge = ctx.judge_for(m)
        except Exception:  # noqa: BLE001 - a judge that cannot load: the metric reports it when it runs
            continue
        if judge is None or id(judge) in ctx.judge_swap:
            continue
        # the fit judges the labelled cases on contextjudge's loop: from a thread, so this loop is free meanwhile
        got, kept = await asyncio.to_thread(store_calibrated, store, judge)  # type: ignore[arg-type]
        ctx.judge_swap[id(judge)] = (judge, got)
        for fam, words in ((kept or {}).get("summary") or {}).items():
            logger.info("contextjudge: judge %s, %s %s", judge_name(got), fam, words)


async def _plan(test_cases: Any, metrics: Sequence[Any] | None, observed_callback: Any, goldens: Any, traces: Any,
                max_concurrency: int) -> _Plan:
    """The cases and metrics to score, checked: a list whole before any judge call, a generator as it is read."""
    plan = _Plan(cases=test_cases, metrics=list(metrics or []))
    if observed_callback is not None or traces is not None:
        from .._tracing import observed_cases, run_traces  # noqa: PLC0415 - component-level evaluation

        if traces is None:
            traces = await run_traces(observed_callback, goldens, max_concurrency=max_concurrency)
        observed = observed_cases(traces, metrics)
        ok = [o for o in observed if o.test_case is not None]
        plan.failed = [TestResult(index=-1, name=o.name, test_case=None, error=o.error)
                       for o in observed if o.test_case is None]
        plan.cases = [*(list(test_cases) if test_cases is not None else []), *(o.test_case for o in ok)]
        plan.case_metrics = [list(metrics or [])] * (len(plan.cases) - len(ok)) + [o.metrics for o in ok]
        plan.metrics = list(dict.fromkeys([*(metrics or []), *(m for o in observed for m in o.metrics)]))
        if not plan.metrics:
            raise ConfigurationError("evaluate(observed_callback=...) found no metrics: pass metrics= to "
                                     "@observe(metrics=[...]) on the components to score, or metrics=[...] to "
                                     "evaluate.")
    elif test_cases is None:
        raise ConfigurationError("evaluate() needs test_cases=[...] (or observed_callback=app with goldens=[...]).")
    cases = plan.cases
    if not plan.metrics:
        raise ConfigurationError("evaluate() needs at least one metric, e.g. metrics=[ContextualPrecisionMetric()].")
    if isinstance(cases, (LLMTestCase, ConversationalTestCase)):
        raise ConfigurationTypeError("evaluate(test_cases=...) takes an iterable of test cases, got one test case: "
                                     "pass test_cases=[case] (or use metric.measure(case)).")
    if isinstance(cases, (str, bytes, dict)) or not hasattr(cases, "__iter__"):
        raise ConfigurationTypeError(f"evaluate(test_cases=...) takes a list or another iterable of test cases, got "
                                     f"a {type(cases).__name__}.")
    plan.sized = hasattr(cases, "__len__") and hasattr(cases, "__getitem__")
    if plan.sized:
        for i, tc in enumerate(cases):
            _check_case(i, tc)
    return plan


def _open_run(opts: EvaluationOptions) -> tuple[Run, RunContext]:
    """The run to score in (a new one, or ``opts.run``) and the judge context this call uses."""
    if opts.run is None:
        run = Run(store=opts.store, run_id=opts.run_id, name=opts.run_name, config=opts.run_config,
                  judge_options=opts.judge_options, model=opts.model, context=opts.context)
        return run, run.context
    given = [n for n, v in (("store", opts.store), ("run_id", opts.run_id), ("judge_options", opts.judge_options),
                            ("context", opts.context)) if v is not None]
    if given:
        raise ConfigurationError(f"evaluate(run=...) takes its store, id, judge options and context from the run; "
                                 f"do not also pass {', '.join(given)}.")
    ctx = opts.run.context
    if opts.model is not None and opts.model is not ctx.default_model:
        # this call's default judge only: the run's own context (shared with its other callers) is left as is;
        # the copy shares its cache, usage, hooks and semaphores
        ctx = dataclasses.replace(ctx, default_model=opts.model, _default_resolved=None)
    return opts.run, ctx


class _Evaluation:
    """One evaluation in flight: a fixed pool of ``max_concurrency`` workers pulls cases one at a time, so nothing
    is created per case up front (a task per case would hold every case's coroutine until its turn) and a generator
    of cases is read only as fast as it is scored. Each result goes to the running totals, the kept results and
    ``on_result``; at the end the run is ended (when this call began it) and the result built."""

    def __init__(self, plan: _Plan, opts: EvaluationOptions, run: Run, ctx: RunContext, owns_run: bool) -> None:
        self.plan, self.opts, self.run, self.ctx, self.owns_run = plan, opts, run, ctx, owns_run
        self.source = iter(enumerate(plan.cases))
        self.slots: list[TestResult | None] = []
        self.tally = Tally()
        self.callback_errors = 0
        self.progress = _Progress(len(plan.cases) if plan.sized else None, opts.show_progress)

    async def deliver(self, tr: TestResult) -> None:
        """Count a result, keep it (``keep_results``) and hand it to ``on_result``, whose failure never stops the
        run."""
        self.tally.add(tr)
        if self.opts.keep_results:
            self.slots[tr.index] = tr
        if self.opts.on_result is not None:
            try:
                out = self.opts.on_result(tr)
                if inspect.isawaitable(out):
                    await out
            except Exception:  # noqa: BLE001 - the user's sink failing never stops the run
                self.callback_errors += 1
                logger.exception("contextjudge: on_result failed on case %s; the run goes on", tr.index)

    async def worker(self) -> None:
        """Score cases until the source has none left."""
        plan, opts = self.plan, self.opts
        while True:
            try:
                i, tc = next(self.source)
            except StopIteration:
                return
            if opts.keep_results:
                self.slots.append(None)
            try:
                if not plan.sized:
                    try:
                        _check_case(i, tc)
                    except InvalidTestCaseError as exc:
                        await self.deliver(TestResult(index=i, name=None, test_case=tc, error=str(exc)))
                        continue
                own = plan.metrics if plan.case_metrics is None else plan.case_metrics[i]
                key = case_key(i, tc) if opts.case_keys is None else opts.case_keys[i]
                await self.run.asave_case(key, i, tc)
                tr = TestResult(index=i, name=getattr(tc, "name", None), test_case=tc)
                scored = await score_case(self.run, key, tc, own, raise_exceptions=opts.raise_exceptions,
                                          missing="skip" if opts.skip_on_missing_params else "record")
                if scored is None:
                    tr.error = NO_METRIC_APPLIES
                else:
                    tr.metrics_data = scored
                await self.deliver(tr)
            finally:
                self.progress.case_done()

    async def score_all(self) -> EvaluationResult:
        """Score every case, then the results of spans and goldens that gave no case; the result."""
        ctx = self.ctx
        ctx.on_call.append(self.progress.on_call)
        run_id = await self.run.abegin(self.plan.metrics, cases=len(self.plan.cases) if self.plan.sized else None)
        t0 = time.perf_counter()
        usage_before = copy.copy(ctx.usage)
        tiers_before, repeats_before = copy.deepcopy(ctx.tiers), copy.deepcopy(ctx.repeats)
        try:
            with use_run_context(ctx):
                await self._pool()
        except BaseException:
            if self.owns_run:  # stopped by raise_exceptions=True, a cancel or Ctrl-C: the run ends, as interrupted
                self.run.end({"error": "the run was stopped before every case was scored"}, status="interrupted")
            raise
        finally:
            self.progress.close()
            if self.progress.on_call in ctx.on_call:
                ctx.on_call.remove(self.progress.on_call)
        n_cases = len(self.slots) if self.opts.keep_results else self.tally.cases
        for k, tr in enumerate(self.plan.failed, start=n_cases):
            tr.index = k
            if self.opts.keep_results:
                self.slots.append(None)
            await self.deliver(tr)
        result = EvaluationResult(test_results=[tr for tr in self.slots if tr is not None],
                                  usage=_usage_since(ctx.usage, usage_before), run_id=run_id,
                                  duration_seconds=time.perf_counter() - t0,
                                  tally=None if self.opts.keep_results else self.tally,
                                  callback_errors=self.callback_errors,
                                  tiers=tally_since(ctx.tiers, tiers_before) or None,
                                  repeats=_repeats_summary(tally_since(ctx.repeats, repeats_before)))
        result.store_error = getattr(self.run, "store_error", None)
        if self.owns_run:
            await self._end(result)
        return result

    async def _pool(self) -> None:
        workers = [asyncio.ensure_future(self.worker()) for _ in range(max(1, self.opts.max_concurrency))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for w in workers:  # raise_exceptions=True, or the caller cancelled: stop the other workers too
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise

    async def _end(self, result: EvaluationResult) -> None:
        errored = (sum(bool(tr.error or any(m.error for m in tr.metrics_data)) for tr in result.test_results)
                   if self.opts.keep_results else None)
        await self.run.aend({"summary": result.summary(), "usage": result.usage.to_dict(),
                             "duration_seconds": result.duration_seconds, "judges": result.judges(),
                             "cases_with_errors": errored,
                             **({"tiers": result.tiers} if result.tiers else {}),
                             **({"repeats": result.repeats} if result.repeats else {})})


def _usage_since(now: Usage, before: Usage) -> Usage:
    """The judge work done since ``before``: results resumed from the store cost nothing now."""
    return Usage(calls=now.calls - before.calls, cache_hits=now.cache_hits - before.cache_hits,
                 input_tokens=now.input_tokens - before.input_tokens,
                 output_tokens=now.output_tokens - before.output_tokens, seconds=now.seconds - before.seconds,
                 cost=None if now.cost is None else now.cost - (before.cost or 0.0))


def _ray_kwargs(test_cases: Any, metrics: Any, opts: EvaluationOptions, observed: tuple[Any, Any, Any]
                ) -> dict[str, Any]:
    """The arguments of ``ray_engine.evaluate_on_ray`` from evaluate's, refusing what the Ray engine does not do."""
    if opts.engine != "ray":
        raise ConfigurationError(f"evaluate(engine={opts.engine!r}): the engines are 'local' (this process) and "
                                 "'ray'.")
    given = dict(zip(("observed_callback", "goldens", "traces"), observed, strict=True))
    given.update({name: getattr(opts, name) for name in ("context", "run", "on_result", "keep_results",
                                                         "raise_exceptions", "skip_on_missing_params")})
    unsupported = [name for name, default in (("observed_callback", None), ("goldens", None), ("traces", None),
                                              ("context", None),
                                              ("run", None), ("on_result", None), ("keep_results", True),
                                              ("raise_exceptions", False), ("skip_on_missing_params", False))
                   if given[name] is not default and given[name] != default]
    if unsupported:
        raise ConfigurationError(f"evaluate(engine='ray') does not take {', '.join(unsupported)}: the Ray actors "
                                 "score stored cases; use the local engine for these.")
    if test_cases is None or not metrics:
        raise ConfigurationError("evaluate(engine='ray') needs test_cases=[...] and metrics=[...].")
    cases = list(test_cases)
    for i, tc in enumerate(cases):
        _check_case(i, tc)
    options = opts.judge_options
    if opts.repeats is not None:
        options = dataclasses.replace(options or JudgeOptions(), repeats=opts.repeats)
    return {"cases": cases, "metrics": list(metrics), "model": opts.model, "store": opts.store,
            "run_id": opts.run_id, "run_name": opts.run_name, "run_config": opts.run_config,
            "case_keys": opts.case_keys, "ray_address": opts.ray_address, "workers": opts.workers,
            "judge_options": options}


def _evaluate_on_ray(**kw: Any) -> EvaluationResult:
    from ._ray_engine import evaluate_on_ray  # noqa: PLC0415 - imports ray only when asked for

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
    *,
    observed_callback: Any = None,
    goldens: Any = None,
    traces: Any = None,
    options: EvaluationOptions | None = None,
    **kwargs: Any,
) -> EvaluationResult:
    """Score ``test_cases`` with ``metrics`` and return an ``EvaluationResult``.

    Works from plain scripts, from inside a running event loop (a Jupyter cell, a FastAPI handler) and from threads.
    How it runs is set by keywords, or by one ``EvaluationOptions`` passed as ``options=`` (built once, passed to
    several calls; keywords given beside it win over its fields). Keyword arguments: ``max_concurrency`` (cases in flight, default 16), ``judge_options`` (retries, timeouts,
    judge calls in flight per model), ``show_progress`` (default: when stderr is a terminal), ``store`` (a results
    store or its path/URL), ``run_id`` (resume that run), ``run_name``, ``run_config`` (extra facts kept with the
    run in the store, such as the app and its code version), ``skip_on_missing_params``, ``raise_exceptions``
    (default False: failures are recorded per case), ``repeats`` (ask a sampling judge each request k times:
    the majority verdict, ``votes`` and ``agreement`` on each verdict, the score's spread in ``score_spread``, and the
    judge's own disagreement in the result's ``repeats``; a deterministic judge is asked once).

    With a ``store`` that holds gold labels (``contextjudge label``, the labelling page), metrics judged by the bare
    embedded judge are judged by it calibrated on those labels, as ``contextjudge eval`` does (``store_calibrated``:
    fitted once and kept in the store until a label changes; the judge's identity carries the fit's hash).

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
    ``contextjudge._tracing``); ``metrics=`` then also scores one end-to-end test case per trace. Spans that cannot
    become a test case, and goldens on which the app raised, are recorded as results with ``error`` set.
    ``traces=`` scores traces the app already ran (``contextjudge._tracing.Trace`` objects, as
    ``compat.deepeval``'s ``EvaluationDataset.evals_iterator`` collects them) the same way.
    """
    opts = _options(options, kwargs)
    if observed_callback is None and traces is None and (test_cases is None or metrics is None):
        raise ConfigurationError("evaluate() needs test_cases=[...] and metrics=[...] (or observed_callback=app "
                                 "with goldens=[...]).")
    if opts.engine != "local":  # the Ray driver runs here, in the caller's thread (no event loop needed)
        return _evaluate_on_ray(**_ray_kwargs(test_cases, metrics, opts, (observed_callback, goldens, traces)))
    return run_sync(aevaluate(test_cases, metrics, observed_callback=observed_callback, goldens=goldens,
                              traces=traces, options=opts))

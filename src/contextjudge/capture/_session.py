"""The capture session: takes captured cases, decides which are judged, and hands them to its mode object.

A ``CaptureSession`` matches goldens, then, by mode (one object each, chosen at construction):

- ``"background"`` (``BackgroundScoring``): scores on the shared event loop, off the request path; the app never
  waits for a judge.
- ``"deferred"`` (``KeepOnly``): keeps the cases (and writes them to the store) for a later ``contextjudge score``
  or ``session.score_deferred()``; ``"off"`` (``CaptureOnly``) keeps them only, for the caller (a test's
  ``assert_test``, ``contextjudge eval``), with no store or ``max_kept`` required and no word of "unscored".
- ``"worker"`` (``WorkerWriter``): only writes the cases, with a queue row each, to the store from a
  ``contextjudge-writer`` thread, in batches; a ``contextjudge worker`` process scores them, and while ``on_result``
  callbacks listen the results come back as events for the cases it still holds (bounded).

Before any of that, ``sample_rate`` / ``sampling`` (``Sampling``) decide which cases are judged, deterministically
by conversation or input; the others are counted and forgotten. ``budget`` (a ``judges._spend.Budget``) caps the
judge's spend: a case the budget refuses is skipped and counted, with one warning per budget window.
``session.counters`` counts it all.

Everything is scored inside one ``Run`` (``engine._run``) through ``score_case`` (``engine._score``), like
``evaluate``; the run begins with the first case and ends at ``close()``, when ``score_deferred`` finishes it, or at
interpreter exit (mode "worker": the run ends "captured", or "finished" when the store's queue for it is done).
Memory is bounded by ``max_kept`` (``KeptCases``). Cases may be assembled lazily (``CapturedCase.assembled`` /
``assemble()``): the session assembles them off the request path, matches their goldens then, and leaves out a case
whose assembly failed. Integrations with work of their own in flight register it with ``add_drain``, so ``flush``,
``close`` and exit wait for it.

Every failure inside the session is logged and contained: capture never breaks the user's app.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._result import EvaluationResult, MetricResult
from ..cases.goldens import load_goldens
from ..engine import Run
from ..errors import CaptureError, ConfigurationError
from ..judges import JudgeOptions
from . import _exit
from ._background import BackgroundScoring
from ._case import CapturedCase, Mode, ResultCallback, default_metrics
from ._conversations import idle_seconds
from ._hooks import IntegrationHooks
from ._intake import Intake
from ._keep import CaptureOnly, KeepOnly
from ._kept import Counts, KeptCases
from ._mode import CaptureMode
from ._roots import RootWatch
from ._sampling import Sampling
from ._scoring import CaseScoring, score_unscored
from ._writer import WorkerWriter

if TYPE_CHECKING:
    import os
    from typing import TypeAlias

    from ..store import ResultsStore

    StoreArg: TypeAlias = ResultsStore | str | os.PathLike[str] | None
    """What ``store=`` takes: a results store, or the path or URL that opens one; None: no store."""

__all__ = ["CaptureSession"]

logger = logging.getLogger("contextjudge")

_UNSET: Any = object()
_MODES: dict[str, Any] = {"background": BackgroundScoring, "deferred": KeepOnly, "off": CaptureOnly,
                          "worker": WorkerWriter}
_DEFAULT_MAX_KEPT = 10_000
_WORKER_MAX_KEPT = 1_000  # mode "worker": written cases held for their results to come back (None are needed else)
_CONVERSATION_IDLE = 300.0  # seconds without a turn after which an open conversation is submitted


def _max_kept(mode: str, max_kept: Any, store: StoreArg) -> int | None:
    """``max_kept`` checked, or its default for ``mode``."""
    if max_kept is _UNSET:
        if mode == "worker":
            return _WORKER_MAX_KEPT
        if _MODES[mode].needs_max_kept_without_store and store is None:
            raise ConfigurationError(
                f"capture in mode={mode!r} without a store keeps every captured case in memory, and they are "
                "the only copy of that work. Pass store='captured.db' (then `contextjudge score` or "
                "score_deferred() scores them), or max_kept=N to hold at most N cases (older ones are "
                "dropped and counted), or max_kept=None to hold every case.")
        return _DEFAULT_MAX_KEPT
    if max_kept is not None and (not isinstance(max_kept, int) or max_kept < 1):
        raise ConfigurationError(f"max_kept must be a positive whole number or None, not {max_kept!r}.")
    return max_kept


def _check(mode: str, store: StoreArg, warn_after_roots: Any) -> None:
    if mode not in _MODES:
        raise ConfigurationError(f"capture mode must be 'background', 'deferred', 'off' or 'worker', not {mode!r}.")
    if mode == "worker" and store is None:
        raise ConfigurationError(
            "capture in mode='worker' only writes the captured cases for a `contextjudge worker` process to "
            "score, so it needs a store both can reach: pass store='captured.db' (SQLite, one worker) or a "
            "PostgreSQL URL (several workers), and run `contextjudge worker --store <the same>`.")
    if warn_after_roots is not None and (not isinstance(warn_after_roots, int) or warn_after_roots < 0):
        raise ConfigurationError(f"warn_after_roots must be a whole number of calls (0 or None: never warn), "
                                 f"not {warn_after_roots!r}.")


def _new_run(name: str, mode: str, store: StoreArg, sampler: Sampling | None, options: JudgeOptions | None, budget: Any,
             model: Any, goldens: Any = None) -> Run:
    """The session's run (begun with the first case); ``budget`` is shorthand for ``JudgeOptions(budget=...)``."""
    if budget is not None:
        options = dataclasses.replace(options or JudgeOptions(), budget=budget)
    config: dict[str, Any] = {"mode": mode}
    if sampler is not None:
        config["sample_rate"] = sampler.rate
    fingerprint = goldens.fingerprint() if goldens is not None else None
    if fingerprint:  # which goldens the run ran: compare and trend say when two runs ran different ones
        config["goldens_fingerprint"] = fingerprint
    return Run(store=store, name=name, config=config, judge_options=options, model=model, contain_store_errors=True)


def _mode_for(mode: str, kept: KeptCases, scoring: CaseScoring, *, concurrency: int, handoff_delay: float,
              batch: int, poll_interval: float, owner: object) -> CaptureMode:
    """The object that does what ``mode`` does with the cases the sampling lets through."""
    if mode == "background":
        return BackgroundScoring(kept, scoring, concurrency=concurrency, handoff_delay=handoff_delay, owner=owner)
    if mode == "worker":
        return WorkerWriter(kept, batch=batch, handoff_delay=handoff_delay, poll_interval=poll_interval, owner=owner)
    return CaptureOnly(kept, mode) if mode == "off" else KeepOnly(kept, mode)


def one_case(test_cases: list[Any], counters: dict[str, int]) -> Any:
    """The one single-turn case of a capture block, for ``assert_test``::

        with capture(mode="off", goldens=goldens) as session:
            chain.invoke("How many PTO days do I get?")
        assert_test(session.case, [ContextualPrecisionMetric(threshold=0.7, model="local")])

    A ``CaptureError`` that says what was seen when the block captured no retrieval, or several (then
    ``session.test_cases`` lists them, oldest first)."""
    cases = [tc for tc in test_cases if getattr(tc, "input", None) is not None]  # conversations left out
    if len(cases) == 1:
        return cases[0]
    if not cases:
        roots = counters.get("roots_without_retrieval", 0)
        raise CaptureError("no retrieval was captured" + (f" ({roots} call(s) of the app ran without one)"
                                                         if roots else "")
                           + ": call the app inside the block, and check that it retrieves in a way capture sees "
                             "(README.md#what-is-captured).")
    raise CaptureError(f"{len(cases)} test cases were captured (one per retrieval), so there is no one case: use "
                       "session.test_cases[i] (oldest first), or capture one call per block.")


class CaptureSession:
    """Receives captured cases and scores, keeps or stores them according to ``mode``.

    ``metrics`` default to ``metrics.default_metrics`` for what the ``goldens`` carry (ranking metrics with expected
    ids, precision and recall with expected outputs; relevancy, utilization, faithfulness and turn relevancy always);
    a metric that cannot run on a case (precision
    on a case no golden matched) gives an error result that says what to do. ``model`` is the judge of metrics built
    without one (the metric objects themselves are never changed); ``goldens`` fill expected outputs; ``store`` (a
    store or its path/URL) keeps cases, results and the run. ``max_kept`` bounds the cases held in memory
    (default 10,000; None: no bound). In "deferred" mode without a store the kept cases are the only copy of the
    work, so that combination needs ``max_kept`` given explicitly; "off" captures only (the default bound). ``max_queue`` bounds the cases waiting
    for a judge; ``concurrency`` the cases scored at once; ``on_result(case, result)`` is called for every result;
    ``exit_timeout`` is how long interpreter exit waits for pending scores (mode "worker": pending writes).

    ``sample_rate`` (0 to 1) is shorthand for ``sampling=Sampling(rate=...)``: the cases judged, decided by the
    conversation (``THREAD_KEY``), a user key function or the normalised input, so a conversation is judged whole or
    not at all and reruns pick the same cases; filters by retriever, chain, tags and metadata. ``budget`` (a
    ``judges._spend.Budget``) is shorthand for ``JudgeOptions(budget=...)``. Mode ``"worker"`` needs ``store``; it
    writes batches of up to ``batch`` cases at most every ``handoff_delay`` seconds (default 0.2), holds at most
    ``max_kept`` written cases (default 1,000) while their results may come back, and polls for those results every
    ``poll_interval`` seconds while ``on_result`` callbacks listen. ``counters`` says what became of every case.
    In mode "background", ``handoff_delay`` > 0 hands cases to the scoring task in batches, at most this many
    seconds after the first one (one wake-up per batch: the app's thread is interrupted less often).
    """

    def __init__(
        self,
        metrics: Sequence[Any] | None = None,
        *,
        model: Any = None,
        goldens: Any = None,
        mode: Mode = "background",
        store: StoreArg = None,
        judge_options: JudgeOptions | None = None,
        max_queue: int = 10_000,
        max_kept: int | None = _UNSET,
        concurrency: int = 4,
        on_result: ResultCallback | None = None,
        run_name: str | None = None,
        handoff_delay: float | None = None,
        exit_timeout: float = 5.0,
        sample_rate: float | None = None,
        sampling: Sampling | None = None,
        budget: Any = None,
        batch: int = 64,
        poll_interval: float = 1.0,
        conversation_idle: float | None = _CONVERSATION_IDLE,
        warn_after_roots: int | None = 20,
    ) -> None:
        _check(mode, store, warn_after_roots)
        sampler = self.sampling = Sampling.of(sample_rate, sampling)
        idle = idle_seconds(conversation_idle)
        kept_bound = _max_kept(mode, max_kept, store)
        self.goldens = load_goldens(goldens)
        self.metrics = (list(metrics) if metrics is not None
                        else default_metrics(goldens=self.goldens.items))
        self.mode = mode
        self.run_name = run_name or f"capture-{time.strftime('%Y%m%d-%H%M%S')}"
        self.run = _new_run(self.run_name, mode, store, sampler, judge_options, budget, model, self.goldens)
        self.judge_options = self.run.context.options
        self.max_queue = max(1, int(max_queue))
        self.max_kept = kept_bound
        self.concurrency = max(1, concurrency)
        self.exit_timeout = exit_timeout
        self.handoff_delay = max(0.0, _MODES[mode].handoff_delay_default if handoff_delay is None else handoff_delay)
        self.batch = max(1, int(batch))
        self.poll_interval = max(0.05, float(poll_interval))
        # the integrations submit an open conversation (a LangChain thread, a LlamaIndex agent's memory) once it has
        # had no turn for this many seconds (IdleConversations), and at flush/close; None or 0: at flush/close only
        self.conversation_idle = idle
        self._kept = KeptCases(self.run, self.metrics, max_kept=kept_bound, max_queue=self.max_queue)
        if on_result:
            self._kept.on_result.append(on_result)
        self._scoring = CaseScoring(self._kept)
        self._intake = Intake(self._kept, sampler, self.goldens)
        self._roots = RootWatch(self._kept, warn_after_roots)
        self.warn_after_roots = self._roots.warn_after
        self._mode = _mode_for(mode, self._kept, self._scoring, concurrency=self.concurrency,
                               handoff_delay=self.handoff_delay, batch=self.batch, poll_interval=self.poll_interval,
                               owner=self)
        self._hooks = IntegrationHooks()
        self._closed = False
        self.handler: Any = None  # the framework object feeding this session (LangChain's callback handler)
        _exit.register(self._at_exit)

    def __repr__(self) -> str:
        """The mode, the cases held and the counters that are not zero."""
        counts = ", ".join(f"{k}={v}" for k, v in self.counters.items() if v or k in ("seen", "dropped"))
        return (f"{type(self).__name__}(mode={self.mode!r}, cases={len(self._kept.cases)}, {counts}, "
                f"run_id={self.run.id!r})")

    # ----------------------------------------------------------------------------------------------- counters
    @property
    def counters(self) -> dict[str, int]:
        """What the session did with the cases it was given (a snapshot; also in the run's summary at its end).

        ``seen``: cases submitted. ``sampled`` / ``unsampled`` / ``filtered``: the sampling's decisions (a lazily
        assembled case is decided at its assembly). ``judged``: cases scored (mode "worker": whose results came back
        to this session). ``skipped_budget``: cases not judged because the judge budget was spent. ``dropped``:
        cases dropped to keep memory bounded (``max_queue`` / ``max_kept``) or that could not be written.
        ``results_received``: metric results that reached the session (``session.results``), scored here or, in
        mode "worker", sent back by a worker. ``written``: mode "worker", cases written for a worker.
        ``roots``: the app's top-level calls the integration saw end (a chain or graph run, a query/chat/retrieve
        call, an agent or workflow run); ``roots_without_retrieval``: those in which no retrieval was captured.
        Each counter is also an attribute of the session (``session.dropped``), as are ``evicted`` (scored or
        stored cases forgotten from memory) and ``evicted_unscored``.
        """
        with self._kept.lock:
            return self._kept.counts.public()

    def note_root(self, retrievals: int, seen: dict[str, Any] | None = None, shapes: str = "") -> None:
        """An integration saw one of the app's top-level calls end, with ``retrievals`` retrievals captured in it.

        ``seen`` says what the call ran, by kind (``{"chains": ["LangGraph"], "graph nodes": [...], "tools": [...],
        "LLM calls": 3}``: names, or a count); ``shapes`` names what the integration captures. When
        ``warn_after_roots`` calls (20 by default; None turns it off) have run and not one retrieved anything, one
        warning names what was seen and the shapes that are captured: the app retrieves in a way capture does not
        see, and would otherwise get no test case and no word about it.
        """
        self._roots.note(retrievals, seen, shapes)

    # ----------------------------------------------------------------------------------------------- access
    @property
    def store(self) -> Any:
        """The store the session keeps its run in (None without one)."""
        return self.run.store

    @property
    def run_id(self) -> str | None:
        """The run's id once it has begun, else None."""
        return self.run.id if self.run.begun else None

    @property
    def on_result(self) -> list[ResultCallback]:
        """The result callbacks, ``callback(case, result)``; append to add one."""
        return self._kept.on_result

    @property
    def test_cases(self) -> list[Any]:
        """The test cases kept in memory (lazily assembled ones are assembled now; failed ones are left out)."""
        return [c.test_case for c in self.ready_cases()]

    @property
    def case(self) -> Any:
        """The one test case this session captured, for ``assert_test`` in a test (``one_case``)."""
        return one_case(self.test_cases, self.counters)

    @property
    def results(self) -> list[tuple[CapturedCase, MetricResult]]:
        """Every (case, result) pair of the cases held in memory."""
        self._hooks.sync()
        with self._kept.lock:
            return [(c, r) for c in self._kept.cases for r in c.results]

    @property
    def cases(self) -> list[CapturedCase]:
        """The captured cases held in memory, oldest first (cases an integration is still assembling join first)."""
        self._hooks.sync()
        return self._kept.cases

    @cases.setter
    def cases(self, value: list[CapturedCase]) -> None:
        with self._kept.lock:
            self._kept.cases = list(value)

    def kept(self) -> list[CapturedCase]:
        """A snapshot of the captured cases held in memory, oldest first."""
        self._hooks.sync()
        with self._kept.lock:
            return list(self._kept.cases)

    def ready_cases(self) -> list[CapturedCase]:
        """The kept cases, lazily built ones assembled now (and goldens matched); failed ones are left out."""
        return [c for c in self.kept() if self._kept.prepare(c)]

    @property
    def pending(self) -> int:
        """Cases waiting for a judge or being scored."""
        return self._mode.pending()

    # ----------------------------------------------------------------------------------------------- integrations
    def add_sync(self, sync: Callable[[], Any]) -> None:
        """Register an integration's quick hand-over of cases it is assembling, run before the cases are read."""
        self._hooks.syncs.append(sync)

    def add_drain(self, drain: Callable[[float | None], Any]) -> None:
        """Register an integration's own pending work: ``drain(timeout)`` hands over what it still holds, and returns
        False when it could not within ``timeout``."""
        self._hooks.drains.append(drain)

    def add_close_hook(self, hook: Callable[[], Any]) -> None:
        """Call ``hook()`` when the session is closed (an integration takes off what it put on: a patch, a
        handler). A hook that raises is logged; the others still run."""
        self._hooks.close_hooks.append(hook)

    # ----------------------------------------------------------------------------------------------- intake
    def apply_golden(self, case: CapturedCase) -> None:
        """Fill the case's expected outputs from the goldens (see ``contextjudge.identity.match_golden``)."""
        self._intake.apply_golden(case)

    def submit(self, case: CapturedCase) -> None:
        """Take a captured case. Never raises and never blocks on a judge (nor, in mode "worker", on the store).

        The sampling decides here when it can without assembling the case (a plain case; its filters and key are
        in its metadata), else at the case's assembly, off the request path; either way before any judging or
        store write. A case left out is counted and forgotten.
        """
        try:
            self._closed = False  # a case after close(): exit looks after this session again
            if self._intake.take(case):
                self._mode.submit(case)
        except Exception:  # noqa: BLE001 - capture never breaks the app
            logger.exception("contextjudge: could not take a captured case")

    async def score_case(self, case: CapturedCase) -> list[MetricResult]:
        """Score one case with every applicable metric, in the session's run; a metric missing a field gives an
        error result that says what to do (never a silent skip)."""
        return await self._scoring.score(case)

    # ----------------------------------------------------------------------------------------------- waiting
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted case is scored (mode "worker": written to the store for a worker; see
        ``wait_results``). Returns False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._hooks.drain(timeout):
            return False
        return self._mode.flush(deadline)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async form of ``flush``: waits without blocking the caller's event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def wait_results(self, timeout: float | None = None) -> bool:
        """Mode "worker": write what is queued, then wait until the results of every case this session holds came
        back from a worker (only held while ``on_result`` callbacks listen). False when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.flush(timeout):
            return False
        return self._mode.wait_results(deadline)

    def score_deferred(self, **kwargs: Any) -> EvaluationResult:
        """Score what this session captured and has not scored yet, attach the results to the cases in memory, and
        end the session's run. With a store, that includes the unscored cases it holds for this run (cases dropped
        or forgotten from memory). Keyword arguments go to ``evaluate`` (``max_concurrency``, ``show_progress``...)."""
        self._mode.check_score_deferred()
        self._hooks.drain(None)
        result = score_unscored(self._kept, self.ready_cases(), self._mode.in_flight, **kwargs)
        self._end_run()
        return result

    # ----------------------------------------------------------------------------------------------- ending
    def _end_run(self) -> None:
        if self.run.begun and not self.run.ended:
            summary, left = self._kept.run_summary()
            self.run.end(summary, status=self._mode.end_status(left))

    def close(self, timeout: float | None = 30.0) -> bool:
        """Hand over, score what is pending, stop the scoring task and end the run; ``timeout`` bounds it all.

        Returns False when the timeout passed with cases still unscored (they stay in the store, when there is
        one, for ``contextjudge score``). A summary of dropped cases is logged, if any were dropped.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        done = self.flush(left())
        self._mode.close(left())
        self._closed = True
        self._finish(at_exit=False)
        self._hooks.closed()
        return done

    def _finish(self, *, at_exit: bool) -> None:
        """Keep what is unscored, end the run and log what was not done (at close or at exit)."""
        unscored = self._mode.keep_unscored()  # mode "worker": the cases not written yet
        self._end_run()
        dropped = self._kept.counts.dropped
        if unscored or dropped:
            parts, where = self._mode.report(unscored, dropped, at_exit)
            if parts:
                logger.warning("contextjudge: %s, %s; %s.", "at exit" if at_exit else "at close", "; ".join(parts),
                               where)

    def _at_exit(self) -> None:
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + max(0.0, self.exit_timeout)

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        self._hooks.drain(left())
        self._mode.at_exit(left)
        self._finish(at_exit=True)


def _counter(name: str) -> property:
    return property(lambda self: getattr(self._kept.counts, name), doc=f"The ``{name}`` counter (see ``counters``).")


for _name in (*Counts.PUBLIC, "evicted", "evicted_unscored"):
    setattr(CaptureSession, _name, _counter(_name))

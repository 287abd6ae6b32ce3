"""``Worker``: the claim loop (claim, start, nap, wind down, signals) and its public face (``run``, ``stop``, counts).

The concepts it composes live beside it: ``_leases`` (the cases held, the heartbeat), ``_scoring`` (one case scored
and settled, the group commit), ``_outage`` (the judge down), ``_budget`` (cases a spent budget set aside),
``_calibration`` (the store's labels' calibration, kept current), ``_retention`` (the retention thread), ``_metrics``
(which metrics a run is scored with), ``_counts`` (what it did) and ``_cpu`` (the process kept off part of the machine).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._aio import in_store_thread
from ..._result import is_embedded_judge
from ...errors import ConfigurationError
from ...judges import JudgeOptions
from .._run import Run
from ._budget import _SetAside
from ._calibration import _StoreCalibration
from ._counts import WorkerCounts, budget_windows
from ._cpu import limit_cpu
from ._leases import _Leases
from ._metrics import MetricsByRun
from ._outage import _Outage
from ._retention import _RetentionThread
from ._scoring import OnResults, _CaseScoring

if TYPE_CHECKING:
    from ...store import ResultsStore

__all__ = ["OnResults", "Worker"]

logger = logging.getLogger("contextjudge")


class Worker:
    """Claims queued cases of ``store`` (every run's, or ``run_id``'s), scores them and writes their results once.

    ``metrics``: a list of metric objects for every run, a callable ``(run config) -> metrics``, or None (each
    run's own metrics from its configuration, else the defaults: ``metrics_for_run``). ``model``: the judge of
    metrics built without one. ``lease``: seconds a claim holds before another worker may take the case (renewed
    every third of it while the case is scored). ``batch``: cases claimed at once. ``concurrency``: cases scored at
    once (judge calls in flight per judge: ``judge_options.max_concurrency``). ``on_results``: hooks called as
    ``hook(test_case, results, case_key, run_id)`` after a case's results are written (the OTel exporter); one
    failing is logged and the worker goes on. ``poll``: seconds between looks at an empty queue. ``cpus`` / ``nice``:
    ``limit_cpu`` when the worker starts (``cpus=0, nice=0`` leave the process as it is). ``grace``: seconds a
    stopping worker gives the cases it is scoring before it gives them back. ``log``: where progress lines go
    (None: the logger, at INFO); ``report_every``: a line per that many cases. ``backoff_max``: the longest pause
    in claiming while the judge is down (a case whose every result says the judge is unavailable goes back to the
    queue uncounted and claiming pauses 1 s, doubling up to this, until a judge call succeeds again; ``run(once=
    True)`` stops instead and leaves the cases queued). ``exclusive=False`` skips the one-worker lock of a SQLite
    store (``QueueStore.worker_slot``): for the Ray engine's actors on one machine, which share the file knowingly
    (each claim is one atomic UPDATE ... RETURNING, and SQLite serialises the writers). ``recalibrate_every``:
    with the bare embedded judge as ``model``, seconds between looks at the store's labels; the judge is the one
    calibrated on them, and a label given while the worker runs takes over between cases (``_calibration``; None:
    ``model`` as given).
    """

    def __init__(self, store: ResultsStore | str | os.PathLike[str], metrics: Sequence[Any] | Callable[[dict[str, Any]], Sequence[Any]] | None = None,
                 model: Any = None, *, owner: str | None = None, lease: float = 60.0, batch: int = 8,
                 concurrency: int = 4, run_id: str | None = None, judge_options: JudgeOptions | None = None,
                 on_results: Sequence[OnResults] = (), poll: float = 1.0, cpus: int | None = None,
                 nice: int | None = 10, grace: float = 10.0, max_attempts: int = 5,
                 log: Callable[[str], None] | None = None, report_every: int = 100,
                 backoff_max: float = 60.0, exclusive: bool = True, requeue_skipped: bool = False,
                 prune_every: float | None = 3600.0, recalibrate_every: float | None = 30.0) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ...store import open_store

            store = open_store(store)
        if not hasattr(store, "claim"):
            raise ConfigurationError(f"Worker needs a results store (open_store(...)), not {type(store).__name__}.")
        if lease <= 0 or batch < 1 or concurrency < 1:
            raise ConfigurationError("Worker: lease must be > 0 seconds, batch and concurrency >= 1.")
        self.store = store
        self.metrics = metrics
        self.model = model
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.lease = float(lease)
        self.batch = int(batch)
        self.concurrency = int(concurrency)
        self.run_id = run_id
        self.judge_options = judge_options
        self.on_results = list(on_results)
        self.poll = float(poll)
        self.cpus = cpus
        self.nice = nice
        self.grace = float(grace)
        self.max_attempts = int(max_attempts)
        self.report_every = max(1, int(report_every))
        self.backoff_max = max(0.01, float(backoff_max))
        self.exclusive = bool(exclusive)
        self.requeue_skipped = bool(requeue_skipped)
        # the store's retention setting applied this often (None: never), from a thread of its own (_RetentionThread)
        self.prune_every, self.pruned_cases = None if prune_every is None else max(0.05, float(prune_every)), 0
        self._set_aside = _SetAside(self.requeue_skipped)
        self.recalibrate_every = None if recalibrate_every is None else max(0.0, float(recalibrate_every))
        self._calibration = _StoreCalibration(self.store, self.model, self.recalibrate_every)
        self.call_hooks: list[Callable[[dict[str, Any]], Any]] = []  # judge-call events, e.g. WorkerMetrics
        self._outage = _Outage(self.backoff_max)
        self._log = log
        self.counts = WorkerCounts()
        self._run: Run | None = None
        self._metrics_for = MetricsByRun(self.store, metrics)
        self._leases = _Leases(self.store, self.owner, self.lease)
        self._scoring = _CaseScoring(self, self._outage, self._leases, self._set_aside, self._metrics_for, self._say)
        self._tasks: dict[tuple[str, str], asyncio.Task] = {}
        self._stop = threading.Event()
        self._hard = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.started_line = ""

    def __repr__(self) -> str:
        return f"Worker(owner={self.owner!r}, store={self.store!r}, {self.counts.to_dict()})"

    @property
    def counters(self) -> dict[str, int]:
        """The worker's counts by name (``WorkerCounts.to_dict``)."""
        return self.counts.to_dict()

    # ------------------------------------------------------------------------------------------ control
    def stop(self, now: bool = False) -> None:
        """Stop claiming; finish the cases in hand within ``grace`` and give back the rest (``now``: give back
        everything at once). Safe from any thread."""
        self._stop.set()
        if now:
            self._hard.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def run(self, stop: threading.Event | None = None, *, once: bool = False, handle_signals: bool = False
            ) -> WorkerCounts:
        """Work until ``stop`` is set (or ``stop()`` is called; with ``once``, until the queue has nothing to claim)
        and return the counts. ``handle_signals``: SIGTERM and SIGINT stop the worker cleanly (a second one: at
        once); the CLI sets it. Every case it still holds when it returns has been given back (``queued``)."""
        desc = limit_cpu(self.cpus, self.nice) if (self.cpus != 0 or self.nice) else "CPU and niceness unchanged"
        where = f"run {self.run_id}" if self.run_id else "every run"
        self.started_line = (f"worker {self.owner}: {where} of {self.store!r}; lease {self.lease:g}s, batch "
                             f"{self.batch}, {self.concurrency} case(s) at once; {desc}")
        self._say(self.started_line)
        slot = self.store.worker_slot(self.owner) if self.exclusive else contextlib.nullcontext()
        with slot:
            asyncio.run(self._main(stop, once, handle_signals))
        self._say(self.summary())
        return self.counts

    def summary(self) -> str:
        """One line: what the worker did, and what to do about the cases a budget set aside."""
        return self.counts.line(self.owner)

    def billable(self, judge: str) -> bool:
        """Whether a provider bills ``judge``'s tokens (the embedded judge's pseudo-tokens cost nothing)."""
        return not is_embedded_judge(judge)

    def budget_windows(self) -> list[tuple[str, str, str, float, float | None]]:
        """(budget name, window kind, unit, spent in the current window, limit) of the worker's budget, read from
        the store's spend windows (shared by every process on the store); for the worker's metrics."""
        return budget_windows(self.store, getattr(self.judge_options, "budget", None))

    def _say(self, text: str) -> None:
        if self._log is not None:
            self._log(text)
        else:
            logger.info("contextjudge: %s", text)

    # ------------------------------------------------------------------------------------------ the loop
    async def _main(self, stop: threading.Event | None, once: bool, handle_signals: bool) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._wake = loop, asyncio.Event()
        if stop is not None and stop.is_set():
            self._stop.set()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - not the main thread
                    pass
        watcher = None
        if stop is not None:  # the caller's event, polled from a thread that only waits
            watcher = threading.Thread(target=self._watch, args=(stop,), name="contextjudge-worker-stop", daemon=True)
            watcher.start()
        if self._calibration.due():  # the store's labels calibrate the embedded judge from the first case
            self._calibration.changed(await in_store_thread(self._calibration.look))
            if self._calibration.pending is not None:
                self._say(f"worker {self.owner}: {self._calibration.take_over(first=True)}")
        run = self._run = Run(store=None, judge_options=self.judge_options, model=self._calibration.judge)
        run.context.cache.backend = self.store  # verdicts shared by every worker (and later run) on this store
        self._scoring.run = run
        run.context.on_call.append(self._scoring.on_call)
        run.begin()
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._leases.beat, args=(beat_stop, self._lost_elsewhere),
                                name="contextjudge-heartbeat", daemon=True)
        beat.start()
        keeper = _RetentionThread.start(self, beat_stop)
        waiting: collections.deque = collections.deque()
        try:
            from ...judges import use_run_context

            with use_run_context(run.context):
                await self._loop_body(waiting, once)
        finally:
            await self._wind_down(waiting)
            beat_stop.set()
            beat.join(timeout=5)
            _RetentionThread.join(keeper)
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    try:
                        loop.remove_signal_handler(sig)
                    except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                        pass
            self._loop = None
            self._stop.set()  # ends the watcher thread

    def _untrack(self, ref: tuple[str, str]) -> Callable[[asyncio.Future], None]:
        """The done callback of the task that scores ``ref``: it forgets the task."""
        def done(_task: asyncio.Future) -> None:
            self._tasks.pop(ref, None)
        return done

    def _on_signal(self, sig: int) -> None:
        first = not self._stop.is_set()
        self._say(f"worker {self.owner}: {signal.Signals(sig).name}: " +
                  ("stopping (finishing the cases in hand, giving back the rest; again to stop at once)" if first
                   else "stopping now, giving back every case in hand"))
        self.stop(now=not first)

    def _watch(self, stop: threading.Event) -> None:
        while not self._stop.is_set():
            if stop.wait(0.2):
                self.stop()
                return

    async def _nap(self, seconds: float) -> None:
        """Wait ``seconds``, or until a case finishes or the worker is told to stop."""
        assert self._wake is not None
        waits = [asyncio.ensure_future(self._wake.wait()), *self._tasks.values()]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waits[0].cancel()
        if not self._stop.is_set():
            self._wake.clear()

    async def _loop_body(self, waiting: collections.deque, once: bool) -> None:
        last_report = 0
        self._scoring.once = once
        await in_store_thread(self._set_aside.queue_again, self, True)
        while not self._stop.is_set():
            if self._set_aside.due():
                await in_store_thread(self._set_aside.queue_again, self)
            if self._calibration.due():
                self._calibration.changed(await in_store_thread(self._calibration.look))
            if self._calibration.pending is not None:  # a new calibration: once the cases in flight are done
                if self._tasks:
                    await self._nap(self.poll)
                    continue
                self._say(f"worker {self.owner}: {self._calibration.take_over()}")
                if self._run is not None:
                    self._run.context.default_model = self._calibration.judge
            paused = self._outage.paused()
            if paused > 0:  # the judge is down: start and claim nothing until the pause ends
                await self._nap(min(paused, self.poll if self._tasks else paused))
                continue
            while waiting and len(self._tasks) < self.concurrency:
                sc = waiting.popleft()
                ref = (sc.run_id, sc.case_key)
                task = self._tasks[ref] = asyncio.ensure_future(self._scoring.score(sc))
                task.add_done_callback(self._untrack(ref))
            if not waiting and len(self._tasks) < self.concurrency:
                # a case may be given back while this claim runs: --once ends only on an empty claim made when
                # nothing was being scored
                busy = bool(self._tasks)
                got = await in_store_thread(self.store.claim, self.owner, limit=self.batch, lease=self.lease,
                                            run_id=self.run_id, max_attempts=self.max_attempts)
                if got:
                    self._leases.add((sc.run_id, sc.case_key) for sc in got)
                    self.counts.claimed += len(got)
                    waiting.extend(got)
                    continue
                if once and not busy and not self._tasks:
                    return
                await self._nap(self.poll)
            else:
                await self._nap(self.poll)
            done = self.counts.judged + self.counts.skipped_budget
            if done - last_report >= self.report_every:
                last_report = done - done % self.report_every
                self._say(self.summary())

    async def _wind_down(self, waiting: collections.deque) -> None:
        """Give back what was claimed and not started; give the cases being scored ``grace`` seconds (none after a
        second signal), then cancel them; give back every case still held."""
        for sc in waiting:
            await self._scoring.give_back(sc.run_id, sc.case_key)
        waiting.clear()
        if self._tasks and not self._hard.is_set():
            deadline = time.monotonic() + self.grace
            while self._tasks and not self._hard.is_set() and time.monotonic() < deadline:
                await self._nap(min(0.2, max(0.0, deadline - time.monotonic())))
        pending = list(self._tasks.values())
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self._scoring.flushed()
        for run_id, key in self._leases.held():
            await self._scoring.give_back(run_id, key)

    # ------------------------------------------------------------------------------------------ heartbeat
    def _lost_elsewhere(self, lost: list[tuple[str, str]]) -> None:
        """From the heartbeat: cancel, on the worker's loop, the cases whose lease another worker took."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._scoring.cancel_lost, lost, self._tasks)

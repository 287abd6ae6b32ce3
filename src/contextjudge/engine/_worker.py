"""``Worker``: score the cases a store's queue holds, out of the app's process (``contextjudge worker``).

A worker claims batches of queued cases with leases (``store/_queue.py``), scores each with ``score_case`` inside a
``Run`` that has no store (so nothing is written outside ``complete``) and whose verdict cache is backed by the
store (a verdict one worker paid for serves them all), keeps its leases alive from a heartbeat thread while it
scores, and completes each case in one transaction that writes its results only while it still holds the lease.
So every case's results are written once; a killed worker's cases are claimed again when their leases expire, and
only the judge calls that were in flight are repeated.

Several workers may share a PostgreSQL store; a SQLite store takes one (``QueueStore.worker_slot``), except the Ray
engine's actors on one machine (``exclusive=False``).

Objects: ``Worker`` (the loop: claim, start, nap, wind down, signals) with ``_CaseScoring`` (one case scored and
settled: completed, given back or set aside), ``_Leases`` (the cases held and the heartbeat that renews them),
``_Outage`` (the judge down: the pause in claiming) and ``_SetAside`` (cases a spent budget set aside).

Threads: the worker's event loop (the caller's thread), where cases are scored; ``contextjudge-heartbeat``, which
renews the leases every third of the lease and cancels the cases whose lease was lost (another worker took them,
after this one stalled for longer than the lease); store writes run on the loop's default executor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .._aio import in_store_thread
from .._result import is_embedded_judge
from ..errors import ConfigurationError
from ..judges import JudgeOptions
from ..metrics import default_metric_keys
from ._run import Run, metric_specs
from ._score import BudgetSkip, score_within_budget

__all__ = ["DEFAULT_METRIC_KEYS", "Worker", "WorkerCounts", "limit_cpu", "metrics_for_run", "pin_threads", "usable_cores"]

logger = logging.getLogger("contextjudge")

# what a run with no metrics in its configuration is scored with (here and by `contextjudge score`)
DEFAULT_METRIC_KEYS = tuple(default_metric_keys(expected_output=True, conversations=True))

OnResults = Callable[[Any, list, str, str], Any]

_UNAVAILABLE = "JudgeUnavailableError"
# what the summaries of `contextjudge worker` and `score` say about cases a spent budget set aside
SKIPPED_ADVICE = ("budget-skipped cases stay in the store, unjudged: `contextjudge worker --requeue-skipped` queues "
                  "them again when the budget's next window opens (or `contextjudge score --run RUN` judges a run's "
                  "unscored cases now)")
# an unavailable-judge error that is this request's own (HTTP 400-class: too long, unsupported), not an outage
_REQUEST_REFUSED = ("rejected the request",)


def _judge_down(result: Any) -> bool:
    """Whether ``result`` failed because the judge could not be reached or kept failing (retries spent), rather
    than because of the case: such a case is given back, not completed with an error."""
    if not getattr(result, "error", None) or getattr(result, "score", None) is not None:
        return False
    if getattr(result, "error_type", None) == _UNAVAILABLE:
        return not any(s in result.error for s in _REQUEST_REFUSED)
    # a connection failure that reached the metric untranslated
    text = f"{getattr(result, 'error_type', '')} {result.error}".lower()
    return any(s in text for s in ("connecterror", "connectionerror", "connection refused", "apiconnectionerror"))

# the (run id, case key) of the case a task scores: judge-call events are filed under it, and written with the
# case's results in the same transaction
_CASE: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("contextjudge_worker_case",
                                                                              default=None)


@dataclass
class WorkerCounts:
    """What a worker did: cases claimed, judged (results written), skipped by a budget, lost (the lease passed to
    another worker before the results were written: nothing written), with an error result, given back at a
    stop, completed with no result (no metric applies to the case's kind), and given back because the judge was
    down (every result an unavailable-judge error: the case is queued again, not completed, and not counted as an
    attempt)."""

    claimed: int = 0
    judged: int = 0
    skipped_budget: int = 0
    lost_lease: int = 0
    errors: int = 0
    released: int = 0
    no_metric: int = 0
    judge_down: int = 0
    requeued: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)

    def line(self, owner: str) -> str:
        """One line: what worker ``owner`` did, and what to do about the cases a budget set aside."""
        c = self
        line = (f"worker {owner}: {c.judged} case(s) judged, {c.skipped_budget} skipped (budget), "
                f"{c.lost_lease} lost to an expired lease, {c.errors} with errors, {c.released} given back, "
                f"{c.no_metric} with no applicable metric, {c.judge_down} given back while the judge was down "
                f"({c.claimed} claimed)")
        if c.requeued:
            line += f"; {c.requeued} budget-skipped case(s) queued again when the budget's window opened"
        if c.skipped_budget:
            line += ("; " + SKIPPED_ADVICE)
        return line


def _budget_windows(store: Any, budget: Any) -> list[tuple[str, str, str, float, float | None]]:
    """(budget name, window kind, unit, spent in the current window, limit) of ``budget`` in ``store``."""
    if budget is None:
        return []
    from ..judges import window_start

    out: list[tuple[str, str, str, float, float | None]] = []
    now = time.time()
    for kind, length, max_tokens, max_dollars, max_calls in budget.windows():
        try:
            row = store.spend_get(f"budget:{budget.name}:{kind}", window_start(now, length)) or {}
        except Exception:  # noqa: BLE001 - a scrape must answer
            row = {}
        out.append((budget.name, kind, "tokens", float(row.get("tokens", 0)), max_tokens))
        out.append((budget.name, kind, "dollars", float(row.get("dollars", 0.0)), max_dollars))
        out.append((budget.name, kind, "calls", float(row.get("calls", 0)), max_calls))
    return out


def metrics_for_run(config: dict[str, Any], *, threshold: float | None = None,
                    thresholds: dict[str, float] | None = None, default: Sequence[str] = DEFAULT_METRIC_KEYS
                    ) -> list[Any]:
    """The metrics a stored run is scored with: those its configuration names (class, threshold, strict mode, as
    ``Run.begin`` wrote them), else ``default`` (metric keys). ``threshold`` (every metric) and ``thresholds`` (by
    metric key) override the recorded thresholds. Built without a judge: the worker's run gives them its own."""
    from ..metrics import from_keys

    specs = metric_specs(config) or [(k, {}) for k in default]
    recorded = {key: kw.pop("threshold", None) for key, kw in specs}
    given = {key: (thresholds or {}).get(key, threshold) for key, _ in specs}
    return from_keys([key for key, _ in specs], thresholds={k: given[k] if given[k] is not None else recorded[k]
                                                            for k in recorded}, options=dict(specs))


# ---------------------------------------------------------------------------------------------------- CPU
_APPLIED: dict[str, Any] = {}


def _tids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def usable_cores() -> list[int]:
    """The cores this process may run on, in order (its affinity where the platform has one, else every core)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def pin_threads(cores: list[int]) -> None:
    """Pin every thread of this process to ``cores`` (Linux keeps an affinity per thread; threads started later
    inherit it from the one that starts them)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    for tid in _tids():
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def limit_cpu(cpus: int | None = None, nice: int | None = 10) -> str:
    """Keep this process off part of the machine, for every thread it has and starts: affinity to ``cpus`` cores
    (None: all usable but one, at least one; the highest-numbered, so an app pinned to the first cores keeps them;
    0: unchanged), numpy's BLAS threads to as many (threadpoolctl, when installed), and its niceness raised by
    ``nice`` (None or 0: unchanged). Process-wide and meant for the worker's own process; applied once (a second
    call with the same values changes nothing). The embedded judge sizes its encoder's thread pool from the
    process's affinity when it loads: call this before building it. Returns a phrase for the startup line."""
    key = f"{cpus}:{nice}"
    if key in _APPLIED:
        return _APPLIED[key]
    said = []
    usable = usable_cores()
    if cpus != 0:
        n = max(1, len(usable) - 1) if cpus is None else max(1, min(int(cpus), len(usable)))
        chosen = usable[-n:]
        if chosen != usable:
            pin_threads(chosen)
        said.append(f"{n} of {len(usable)} CPUs" + (f" (cores {','.join(map(str, chosen))})"
                                                      if hasattr(os, "sched_setaffinity") else ""))
        try:
            from threadpoolctl import threadpool_limits

            _APPLIED["blas"] = threadpool_limits(limits=n)  # kept: the limit holds while the object lives
        except Exception:  # not installed, or no BLAS loaded yet
            logger.debug("contextjudge: BLAS threads left as they are", exc_info=True)
    else:
        said.append(f"all {len(usable)} CPUs")
    if nice:
        try:
            if hasattr(os, "setpriority"):  # Linux counts niceness per thread: set it on each
                for tid in _tids():
                    try:
                        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + int(nice)))
                    except OSError:
                        pass
            else:  # pragma: no cover
                os.nice(int(nice))
            said.append(f"nice +{int(nice)}")
        except (AttributeError, OSError) as exc:
            said.append(f"nice unchanged ({exc})")
    _APPLIED[key] = ", ".join(said)
    return _APPLIED[key]


# ---------------------------------------------------------------------------------------------------- the worker
class _Outage:
    """A worker's judge-down state: the pause in claiming while the judge is down (1 s, doubling up to
    ``backoff_max``; the cases in flight when it went down share one step), when the outage began, when a judge call
    was last answered, and the give-backs of a case the judge fails on while it answers others."""

    def __init__(self, backoff_max: float) -> None:
        self.backoff_max = backoff_max
        self.backoff = 0.0  # the current pause while the judge is down (0: it is up)
        self.pause_until = 0.0  # time.monotonic() before which nothing is claimed nor started
        self.last_ok = 0.0  # time.monotonic() of the last answered (not cached) judge call
        self.down_since: float | None = None
        self._returns: dict[tuple[str, str], int] = {}  # give-backs of a case while the judge answered others

    def paused(self) -> float:
        """Seconds left of the pause in claiming (<= 0: none)."""
        return self.pause_until - time.monotonic()

    def answered(self) -> tuple[bool, float | None]:
        """A judge call was answered: whether that ends an outage, and when the outage began (None: not known)."""
        self.last_ok = time.monotonic()
        if not self.backoff:
            return False, None
        since = self.down_since
        self.backoff, self.pause_until, self.down_since = 0.0, 0.0, None
        return True, since

    def fails_alone(self, ref: tuple[str, str]) -> bool:
        """Count a give-back of ``ref`` while other calls were answered; True from the third: the judge fails on this
        case alone, so its attempts count (it is set aside after ``max_attempts``, never written as errors)."""
        n = self._returns[ref] = self._returns.get(ref, 0) + 1
        return n >= 3

    def forget(self, ref: tuple[str, str]) -> None:
        """``ref`` was completed: its give-backs no longer count."""
        self._returns.pop(ref, None)

    def step(self) -> bool:
        """One step of the backoff; True when this begins an outage."""
        now = time.monotonic()
        if now >= self.pause_until:
            self.backoff = min(self.backoff_max, self.backoff * 2 if self.backoff else min(1.0, self.backoff_max))
            self.pause_until = now + self.backoff
        if self.down_since is None:
            self.down_since = time.time()
            return True
        return False


class _SetAside:
    """The cases a spent budget set aside: the warning (once per window), and when the window that set them aside
    ends, at which point ``requeue_skipped`` queues them again."""

    def __init__(self, requeue: bool) -> None:
        self.requeue = requeue
        self.until: float | None = None  # when the window that set cases aside ends
        self._warned: float | None = None

    def note(self, resumes_at: float | None, scope: str | None = None) -> str:
        """The queue row's note for a case set aside, warning once per window."""
        when = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(resumes_at)) if resumes_at else
                "the next window")
        if self._warned != resumes_at:
            self._warned = resumes_at
            logger.warning("contextjudge: the judge budget%s is spent; queued cases are set aside (skipped, note "
                           "'budget') until %s, when judging resumes.", f" {scope}" if scope else "", when)
        return f"budget{f' {scope}' if scope else ''} spent; resumes {when}"

    def mark(self, resumes: float | None) -> None:
        """A case was set aside; the budget's window ends at ``resumes`` (None: not known, so at once)."""
        if resumes is not None:
            self.until = max(self.until or 0.0, resumes)
        elif self.until is None:
            self.until = time.time()

    def due(self, first: bool = False) -> bool:
        """Whether to try queueing the set-aside cases again now (``first``: at start, whatever the window)."""
        return self.requeue and (first or (self.until is not None and time.time() >= self.until))


class _RetentionThread:
    """A worker's retention thread (``Worker(prune_every=...)``; what it removes counts in ``worker.pruned_cases``): apply the store's retention setting every ``worker.prune_every`` seconds
    (checked at start, then at most each minute), when no other process on the store has in that time; in short
    batches (``store.prune``), so claiming and writing go on."""

    @staticmethod
    def start(worker: Any, done: threading.Event) -> threading.Thread | None:
        if worker.prune_every is None or not hasattr(worker.store, "apply_retention"):
            return None
        thread = threading.Thread(target=_RetentionThread.loop, args=(worker, done), name="contextjudge-retention",
                                  daemon=True)
        thread.start()
        return thread

    @staticmethod
    def join(thread: threading.Thread | None) -> None:
        if thread is not None:
            thread.join(timeout=30)

    @staticmethod
    def loop(worker: Any, done: threading.Event) -> None:
        every = float(worker.prune_every or 3600.0)
        wait = 0.0
        while not done.wait(wait):
            wait = min(60.0, every)
            try:
                if worker.store.retention() is None or not worker.store.retention_due(every):
                    continue
                report = worker.store.apply_retention()
            except Exception:  # noqa: BLE001 - tried again at the next turn; scoring goes on
                logger.warning("contextjudge: applying the store's retention setting failed", exc_info=True)
                continue
            if report is not None:
                worker.pruned_cases += int(report.counts.get("cases", 0))
                worker._say(f"worker {worker.owner}: retention: {report.line()}")


class _Leases:
    """The cases a worker holds (claimed, and neither completed nor given back) and the heartbeat that renews their
    leases every third of the lease, handing the ones another worker took to ``on_lost`` (from its thread)."""

    def __init__(self, store: Any, owner: str, lease: float) -> None:
        self.store, self.owner, self.lease = store, owner, lease
        self._held: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def add(self, refs: Iterable[tuple[str, str]]) -> None:
        """Hold ``refs`` (just claimed)."""
        with self._lock:
            self._held.update(refs)

    def discard(self, ref: tuple[str, str]) -> None:
        """``ref`` is no longer held (completed, given back or set aside)."""
        with self._lock:
            self._held.discard(ref)

    def __contains__(self, ref: object) -> bool:
        with self._lock:
            return ref in self._held

    def held(self) -> list[tuple[str, str]]:
        """The refs held now."""
        with self._lock:
            return list(self._held)

    def beat(self, done: threading.Event, on_lost: Callable[[list[tuple[str, str]]], None]) -> None:
        """Renew the leases held every third of the lease until ``done`` is set."""
        every = max(0.1, self.lease / 3.0)
        while not done.wait(every):
            held = self.held()
            if not held:
                continue
            try:
                n = self.store.renew(self.owner, held, lease=self.lease)
                if n < len(held):
                    still = self.store.held(self.owner, held)
                    lost = [ref for ref in held if ref not in still]
                    if lost:
                        on_lost(lost)
            except Exception:
                logger.warning("contextjudge: could not renew the worker's leases; retrying", exc_info=True)


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
    (each claim is one atomic UPDATE ... RETURNING, and SQLite serialises the writers).
    """

    def __init__(self, store: Any, metrics: Sequence[Any] | Callable[[dict[str, Any]], Sequence[Any]] | None = None,
                 model: Any = None, *, owner: str | None = None, lease: float = 60.0, batch: int = 8,
                 concurrency: int = 4, run_id: str | None = None, judge_options: JudgeOptions | None = None,
                 on_results: Sequence[OnResults] = (), poll: float = 1.0, cpus: int | None = None,
                 nice: int | None = 10, grace: float = 10.0, max_attempts: int = 5,
                 log: Callable[[str], None] | None = None, report_every: int = 100,
                 backoff_max: float = 60.0, exclusive: bool = True, requeue_skipped: bool = False,
                 prune_every: float | None = 3600.0) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ..store import open_store

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
        self._set_aside_ = _SetAside(self.requeue_skipped)
        self.call_hooks: list[Callable[[dict[str, Any]], Any]] = []  # judge-call events, e.g. WorkerMetrics
        self._outage = _Outage(self.backoff_max)
        self._log = log
        self.counts = WorkerCounts()
        self._run: Run | None = None
        self._metrics_by_run: dict[str, list[Any]] = {}
        self._leases = _Leases(self.store, self.owner, self.lease)
        self._scoring = _CaseScoring(self, self._outage, self._leases, self._set_aside_, self._metrics_for, self._say)
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
        return _budget_windows(self.store, getattr(self.judge_options, "budget", None))

    def _maybe_requeue(self, first: bool = False) -> None:
        """With ``requeue_skipped``: queue again the cases a spent budget set aside, once the window that set them
        aside has ended (and at start, when the budget has room)."""
        if self._run is None or not self._set_aside_.due(first) or self._run.context.budget_blocked() is not None:
            return
        self._set_aside_.until = None
        try:
            n = self.store.requeue_skipped(self.run_id, reason="budget")
        except Exception:  # noqa: BLE001 - tried again when the next window opens
            logger.warning("contextjudge: could not queue the budget-skipped cases again", exc_info=True)
            return
        if n:
            self.counts.requeued += n
            self._say(f"worker {self.owner}: the budget has room again; {n} case(s) it had set aside are queued "
                      "again")

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
        run = self._run = Run(store=None, judge_options=self.judge_options, model=self.model)
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
            from ..judges import use_run_context

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
        await in_store_thread(self._maybe_requeue, True)
        while not self._stop.is_set():
            if self._set_aside_.due():
                await in_store_thread(self._maybe_requeue)
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

    # ------------------------------------------------------------------------------------------ one case
    def _metrics_for(self, run_id: str) -> list[Any]:
        got = self._metrics_by_run.get(run_id)
        if got is None:
            if self.metrics is not None and not callable(self.metrics):
                got = list(self.metrics)
            else:
                try:
                    config = self.store.run_info(run_id).config
                except Exception:  # noqa: BLE001 - a run deleted meanwhile: its defaults
                    config = {}
                got = list(self.metrics(config)) if callable(self.metrics) else metrics_for_run(config)
            self._metrics_by_run[run_id] = got
        return got

    # ------------------------------------------------------------------------------------------ heartbeat
    def _lost_elsewhere(self, lost: list[tuple[str, str]]) -> None:
        """From the heartbeat: cancel, on the worker's loop, the cases whose lease another worker took."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._scoring.cancel_lost, lost, self._tasks)


_GROUP_MAX = 64  # cases written in one group commit at most


class _CaseScoring:
    """Scores the cases a ``Worker`` claimed and settles each: completed (results and queue row in one transaction,
    while the lease holds), given back (the judge is down, a failure) or set aside (the budget is spent). It files
    each judge-call event under its case, to be written with the case's results, and knows which cases are being
    completed or were lost to another worker. ``run`` and ``once`` are those of the worker's current ``run()``."""

    def __init__(self, worker: Worker, outage: _Outage, leases: _Leases, budget: _SetAside,
                 metrics_for: Callable[[str], list[Any]], say: Callable[[str], None]) -> None:
        self.worker, self.outage, self.leases, self.budget = worker, outage, leases, budget
        self.metrics_for, self.say = metrics_for, say
        self.run: Run | None = None
        self.once = False
        self.calls: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.completing: set[tuple[str, str]] = set()
        self.lost: set[tuple[str, str]] = set()
        # group commit: the cases scored while a complete is being written wait here, and are written together in
        # the next transaction (``store.complete_many``), so a busy worker pays one commit for many cases
        self._pending: list[tuple[tuple[str, str, list[Any], list[dict[str, Any]]], asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def _write(self, run_id: str, key: str, results: list[Any], calls: list[dict[str, Any]]) -> bool:
        """Complete one case in the worker's next group commit; True when its results were written."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = ((run_id, key, results, calls), fut)
        self._pending.append(entry)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        try:
            return bool(await asyncio.shield(fut))
        except asyncio.CancelledError:
            if entry in self._pending:  # not handed to the store yet: nothing of it will be written
                self._pending.remove(entry)
            raise

    async def flushed(self) -> None:
        """Wait for the group commit being written, if any (a worker that stops lets it finish)."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def _flush(self) -> None:
        """Write what waits, a transaction at a time, until nothing waits."""
        while self._pending:
            batch, self._pending = self._pending[:_GROUP_MAX], self._pending[_GROUP_MAX:]
            try:
                oks = await in_store_thread(self.worker.store.complete_many, self.worker.owner,
                                            [item for item, _f in batch])
            except Exception as exc:  # noqa: BLE001 - each case's scoring sees it, as from its own complete
                for _item, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for (_item, fut), ok in zip(batch, oks, strict=True):
                    if not fut.done():
                        fut.set_result(ok)

    def cancel_lost(self, lost: list[tuple[str, str]], tasks: dict[tuple[str, str], asyncio.Task]) -> None:
        """Cancel the tasks of the cases another worker took (none being completed, nor already settled)."""
        for ref in lost:
            if ref not in self.leases:  # completed or given back meanwhile
                continue
            task = tasks.get(ref)
            if task is not None and ref not in self.completing and not task.done():
                self.lost.add(ref)
                task.cancel()

    async def give_back(self, run_id: str, key: str, *, count: bool = True, failed: str | None = None) -> None:
        """Give a case back to the queue (``failed``: the claim counts as a failed attempt, with this note)."""
        try:
            kw: dict[str, Any] = {"failed": True, "note": failed} if failed is not None else {}
            if await in_store_thread(self.worker.store.release, self.worker.owner, run_id, key, **kw) and count and not failed:
                self.worker.counts.released += 1
        except Exception:
            logger.exception("contextjudge: could not give back case %s of run %s; it returns to the queue when "
                             "its lease expires", key, run_id)
        self.leases.discard((run_id, key))

    def on_call(self, event: dict[str, Any]) -> None:
        """A judge-call event of the run: to the call hooks, to the outage state, and filed under its case."""
        for hook in self.worker.call_hooks:
            try:
                hook(event)
            except Exception:  # noqa: BLE001 - metrics never break judging
                logger.debug("contextjudge: a judge-call hook failed", exc_info=True)
        if not event.get("cached"):
            ended, since = self.outage.answered()
            if ended and since is not None:
                self.say(f"worker {self.worker.owner}: the judge answers again after {time.time() - since:.0f}s down; "
                          f"{self.worker.counts.judge_down} case(s) were given back meanwhile")
        ref = _CASE.get()
        if ref is not None:
            self.calls.setdefault(ref, []).append(event)

    async def score(self, sc: Any) -> None:
        """Score a claimed case and settle it: completed, given back or set aside."""
        run_id, key = sc.run_id, sc.case_key
        ref = (run_id, key)
        _CASE.set(ref)
        assert self.run is not None
        try:
            metrics = await in_store_thread(self.metrics_for, run_id)
            started = time.monotonic()
            results = await score_within_budget(self.run, key, sc.test_case, metrics)
            if isinstance(results, BudgetSkip):
                await self.put_aside(ref, self.budget.note(results.resumes_at, results.scope))
                return
            results = list(results or [])
            # a result says the judge could not be reached or kept failing past its retries (an outage, not this
            # case's fault: a refusal of the request itself is not counted as one): give the case back, its
            # attempt uncounted, instead of completing it with errors; its verdicts already answered are in the
            # store's cache, so scoring it again asks only what failed
            down = [r for r in results if _judge_down(r)]
            if down:
                await self._judge_unavailable(ref, down[0].error or "", answered=self.outage.last_ok >= started)
                return
            await self._complete(sc, ref, results)
        except asyncio.CancelledError:
            if ref in self.lost:  # another worker has it: nothing of this case is written here
                self.worker.counts.lost_lease += 1
                self.leases.discard(ref)
                return
            raise  # stopping: _wind_down gives it back
        except Exception as exc:
            self.worker.counts.errors += 1
            logger.exception("contextjudge: case %s of run %s could not be scored; given back to the queue (set aside "
                             "after %d failed claims)", key, run_id, self.worker.max_attempts)
            # the claim counts as an attempt: a case that fails every time is set aside, not claimed forever
            await self.give_back(run_id, key, failed=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self.completing.discard(ref)
            self.calls.pop(ref, None)
            self.lost.discard(ref)

    async def _judge_unavailable(self, ref: tuple[str, str], error: str, answered: bool = False) -> None:
        """Give a case back (queued, the attempt not counted) because the judge is down; pause claiming, doubling
        the pause from 1 s up to ``backoff_max`` while the outage lasts; warn once per outage. ``answered``: other
        calls were answered since the case started (an outage that began while it was in flight, or a judge that
        fails on this case alone: see below)."""
        self.worker.counts.judge_down += 1
        # other calls answered since this case started: an outage that began while it was in flight (its attempt is
        # not counted), or a judge that fails on this case alone; the latter, after three such give-backs here,
        # counts its attempts, so it is set aside after max_attempts, never written as errors
        if answered and self.outage.fails_alone(ref):
            await self.give_back(*ref, failed=f"the judge failed on this case while answering others: "
                                               f"{error}"[:500])
            return
        await self.give_back(*ref, count=False)
        if self.outage.step():  # an outage begins
            if self.once:
                what = ("this --once pass stops and leaves the queue as it is: run it again when the judge is back")
                self.worker.stop()
            else:
                what = (f"claiming pauses, {self.outage.backoff:g}s at first and up to {self.worker.backoff_max:g}s, and the "
                        "worker resumes by itself when the judge answers again")
            logger.warning("contextjudge: the judge is unavailable (%s). The case was given back to the queue, not "
                           "completed with an error; %s. Check the judge: its server or base_url, the API key, the "
                           "provider's status page.", (error or "")[:300], what)

    async def put_aside(self, ref: tuple[str, str], note: str) -> None:
        """Set a case aside (queue state ``skipped``) because the budget is spent."""
        self.budget.mark(self.run.context.budget_blocked() if self.run is not None else None)
        await in_store_thread(self.worker.store.release, self.worker.owner, ref[0], ref[1], state="skipped", note=note)
        self.leases.discard(ref)
        self.worker.counts.skipped_budget += 1

    async def _complete(self, sc: Any, ref: tuple[str, str], results: list[Any]) -> None:
        """Write the case's results and complete its queue row in one transaction, while the lease holds; count it
        and hand it to the ``on_results`` hooks."""
        run_id, key = ref
        self.completing.add(ref)
        ok = await self._write(run_id, key, results, self.calls.pop(ref, []))
        self.leases.discard(ref)
        self.outage.forget(ref)
        if not ok:
            self.worker.counts.lost_lease += 1
            logger.warning("contextjudge: case %s of run %s was taken by another worker (this one held it past "
                           "its %gs lease) or removed from the queue (its run deleted); its results were not "
                           "written", key, run_id, self.worker.lease)
            return
        if not results:
            self.worker.counts.no_metric += 1
        else:
            self.worker.counts.judged += 1
            if any(r.error for r in results):
                self.worker.counts.errors += 1
        for hook in self.worker.on_results:
            try:
                out = hook(sc.test_case, results, key, run_id)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                logger.exception("contextjudge: an on_results hook failed on case %s", key)

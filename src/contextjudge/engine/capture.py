"""Capture, the framework-agnostic half: a ``CaptureSession`` takes captured cases and scores, keeps or stores them.

The LangChain and LlamaIndex integrations turn their frameworks' events into ``CapturedCase`` objects and hand them
to a session (both integrations' ``instrument()`` return one). The session matches goldens, then, by mode:

- ``"background"``: scores on the shared event loop, off the request path; the app never waits for a judge.
- ``"deferred"``: keeps the cases (and writes them to the store) for a later ``contextjudge score`` or
  ``session.score_deferred()``.
- ``"off"``: keeps the cases only.
- ``"worker"``: only writes the cases, with a queue row each, to the store (``store.save_cases_queued``) from a
  ``contextjudge-writer`` thread, in batches; a ``contextjudge worker`` process scores them. The app's thread only
  appends the case to a bounded deque. While ``on_result`` callbacks listen, the same thread polls the store
  (``results_since``) and sends the worker's results back as events for the cases it still holds (bounded).

Before any of that, ``sample_rate`` / ``sampling`` (``engine.sampling.Sampling``) decide which cases are judged,
deterministically by conversation or input; the others are counted and forgotten. ``budget`` (a
``judges.spend.Budget``) caps the judge's spend: in background mode a case the budget refuses is skipped and
counted, with one warning per budget window. ``session.counters`` counts it all (seen, sampled, unsampled, filtered,
judged, skipped_budget, dropped, written, results_received).

Everything is scored inside one ``Run`` (``engine.run``) through ``score_case`` (``engine.score``), like
``evaluate``; the run begins with the first case and ends at ``close()``, when ``score_deferred`` finishes it, or at
interpreter exit (mode "worker": the run ends "captured", or "finished" when the store's queue for it is done;
workers score queued cases whatever the run's status). Memory is bounded by ``max_kept``: cases that are scored
or safely in the store are forgotten first, then the oldest unscored ones, which are counted (``dropped``) and
reported in one warning (mode "worker": ``max_queue`` bounds the cases waiting to be written). Cases may be
assembled lazily (``CapturedCase.assembled`` / ``assemble()``): the session assembles them off the request path,
matches their goldens then, and leaves out a case whose assembly failed. Integrations with work of their own in
flight (a thread assembling cases) register it with ``add_drain``, so ``flush``, ``close`` and exit wait for it.

Every failure inside the session is logged and contained: capture never breaks the user's app.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextvars
import dataclasses
import logging
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from .._aio import run_sync, submit
from .._result import EvaluationResult, MetricResult
from ..cases.goldens import Goldens, load_goldens
from ..cases.identity import new_case_id
from ..cases.testcase import ConversationalTestCase, LLMTestCase
from ..errors import BudgetExhaustedError, ConfigurationError
from ..judges.context import in_judge_call, use_run_context
from ..judges.options import JudgeOptions
from .run import Run
from .sampling import Sampling
from .score import score_case

__all__ = ["AppAdapter", "CaptureScorer", "CaptureSession", "CapturedCase", "GoldenFailure", "IdleConversations",
           "Mode", "Sampling", "default_metrics", "in_judge_call", "no_retrieval_message", "result_event"]

logger = logging.getLogger("contextjudge")

Mode = Literal["background", "deferred", "off", "worker"]
ResultCallback = Callable[["CapturedCase", MetricResult], None]
_UNSET: Any = object()
_MODES = ("background", "deferred", "off", "worker")
_DEFAULT_MAX_KEPT = 10_000
_WORKER_MAX_KEPT = 1_000  # mode "worker": written cases held for their results to come back (None are needed else)
_WORKER_HANDOFF_DELAY = 0.2
_CONVERSATION_IDLE = 300.0  # seconds without a turn after which an open conversation is submitted
_HOLD_FOR = 900.0  # mode "worker": seconds a written case waits for its results before it is forgotten
_POLL_OVERLAP = 5.0  # mode "worker": seconds of results read again at each poll (commits land out of order, and
# the workers' clocks differ): a case's results are sent once, when the case is first seen, and it is held no more

_live_workers: set[concurrent.futures.Future] = set()

# what a session keeps on each case it holds (on the case, never by id(), which Python reuses)
_POSITION = "_contextjudge_position"
_DONE = "_contextjudge_scored"
_STORED = "_contextjudge_stored"
_SAMPLED = "_contextjudge_sampled"  # the sampling's decision: True, False (left out), absent (not decided yet)


@dataclass
class CapturedCase:
    """A test case assembled from a framework run, with where it came from.

    ``root_run_id`` is the id of the framework's own record the case came from (a LangChain root run, a LlamaIndex
    query span); result events carry it as ``origin_id``.
    """

    test_case: LLMTestCase | ConversationalTestCase
    source: str = ""
    case_id: str = field(default_factory=new_case_id)
    root_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    results: list[MetricResult] = field(default_factory=list)
    golden_id: str | None = None
    captured_at: float = field(default_factory=time.time)

    # The lazy-assembly hook: a case whose test case is built later (off the request path) says so here.
    @property
    def assembled(self) -> bool:
        """Whether the test case exists yet (successfully or not); always True for a plain ``CapturedCase``."""
        return True

    def assemble(self) -> bool:
        """Build the test case now if it is built lazily; False when that failed (the session then drops it)."""
        return True

    def when_assembled(self, callback: Callable[["CapturedCase"], Any]) -> None:
        """Call ``callback(self)`` once the test case exists: now for a plain case, at assembly for a lazy one
        (a session matches goldens this way, before anyone reads the test case)."""
        callback(self)


def result_event(case: CapturedCase, result: MetricResult, *, run_id: str | None = None) -> dict[str, Any]:
    """The one payload a scored result is reported with, in every framework.

    ``origin_id`` is the framework record the case came from (LangChain's root run id, LlamaIndex's query span
    id). The older keys of each framework (``test_case_id`` / ``root_run_id`` for LangChain, ``query_span_id``
    for LlamaIndex) are sent beside these for one release; see the changelog.

    Two shapes of case are scored: one retrieval (an ``LLMTestCase``: ``input`` is its question) and a whole
    conversation (a ``ConversationalTestCase``: ``conversation`` is True, ``input`` is None and ``source`` names the
    conversation, ``thread:<id>`` in LangChain).
    """
    tc = case.test_case
    return {"metric": result.name, "score": result.score, "success": result.success, "threshold": result.threshold,
            "reason": result.reason, "error": result.error, "error_type": result.error_type,
            "evaluation_model": result.evaluation_model, "case_id": case.case_id, "origin_id": case.root_run_id,
            "source": case.source, "golden_id": case.golden_id, "run_id": run_id,
            "input": getattr(tc, "input", None), "conversation": isinstance(tc, ConversationalTestCase)}


def _describe_seen(seen: dict[str, dict[str, int]]) -> str:
    parts = []
    for kind, bucket in seen.items():
        if set(bucket) == {""}:
            parts.append(f"{kind}: {bucket['']}")
        elif bucket:
            parts.append(f"{kind}: " + ", ".join(f"{k} ({n})" if n > 1 else k for k, n in bucket.items()))
    return "; ".join(parts) or "nothing but the call itself"


def no_retrieval_message(seen: dict[str, Any] | None, shapes: str) -> str:
    """What a golden's error case says when the app's run on it retrieved nothing capture sees (``contextjudge
    eval``): what the run ran (``seen``, as ``CaptureSession.note_root`` takes it) and the shapes captured."""
    buckets: dict[str, dict[str, int]] = {}
    for kind, value in (seen or {}).items():
        if isinstance(value, int):
            buckets[kind] = {"": value}
        else:
            items = [value] if isinstance(value, str) else list(value or ())
            buckets[kind] = {str(v): 1 for v in items}
    return (f"the app's run on this golden retrieved nothing that capture sees (it ran {_describe_seen(buckets)}). "
            f"Captured: {shapes}. See 'What is captured' in the README (README.md#what-is-captured).")


def default_metrics(model: Any = None, *, expected_output: bool = True) -> list[Any]:
    """The metrics capture uses when none are given: the four single-turn metrics and turn relevancy.

    With ``expected_output=False`` (a capture given no goldens), only those that need no expected_output:
    relevancy, utilization and turn relevancy. Precision and recall would be an error on every case, since nothing
    fills the expected_output they judge against; ask for them (with goldens) to have them.
    """
    from ..metrics import (  # noqa: PLC0415
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
        TurnContextualRelevancyMetric,
    )

    with_reference = [ContextualPrecisionMetric(model=model), ContextualRecallMetric(model=model)]
    return [*(with_reference if expected_output else []), ContextualRelevancyMetric(model=model),
            ContextUtilizationMetric(model=model), TurnContextualRelevancyMetric(model=model)]


@dataclass
class GoldenFailure:
    """A golden whose app call raised in ``contextjudge eval``: it becomes an error case, counted and gated."""

    golden: Any
    index: int
    error: BaseException

    def test_case(self) -> LLMTestCase:
        """The error case: the golden's input and expected output, no retrieval, and the app's error under
        ``provenance.APP_ERROR_KEY`` (every metric of it is then an error result that says what happened)."""
        from ..cases.identity import GOLDEN_ID_KEY  # noqa: PLC0415
        from ..cases.provenance import APP_ERROR_KEY  # noqa: PLC0415

        g = self.golden
        meta: dict[str, Any] = {APP_ERROR_KEY: {"type": type(self.error).__name__,
                                                "message": str(self.error)[:2000]}, "golden_index": self.index}
        if getattr(g, "id", None):
            meta[GOLDEN_ID_KEY] = g.id
        return LLMTestCase(input=g.input, expected_output=g.expected_output, additional_metadata=meta,
                           id=f"golden-{g.id}" if getattr(g, "id", None) else None)


class AppAdapter:
    """What an integration offers ``contextjudge eval --app``: run goldens through an app with capture attached.

    Integrations register an instance under the entry-point group ``contextjudge.apps``.
    """

    name = "app"
    accepts = "apps"
    """What this adapter runs, in words, for the error shown when no adapter matches an object."""

    def matches(self, obj: Any) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def collect(self, obj: Any, goldens: Goldens, *, concurrency: int = 4,
                progress: Callable[[], Any] | None = None) -> list[CapturedCase | GoldenFailure]:
        """Run every golden's input through ``obj`` with capture in mode "off"; return the captured cases, in the
        goldens' order, and a ``GoldenFailure`` for each golden whose app call raised (never only a log line).
        ``progress()`` is called once as each golden's app call finishes (successfully or not)."""
        raise NotImplementedError  # pragma: no cover - interface


# ---------------------------------------------------------------------------------------------------- conversations
def _idle_seconds(idle: Any) -> float | None:
    """``conversation_idle`` checked: seconds (a number >= 0), or None for 0/None (at flush/close only)."""
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float)) or idle < 0):
        raise ConfigurationError(f"conversation_idle must be a number of seconds >= 0 (0 or None: submit "
                                 f"conversations only at flush/close), not {idle!r}.")
    return float(idle) if idle else None


class IdleConversations:
    """When each open conversation of an integration last had a turn, and a call when it has had none for ``idle``
    seconds.

    A long-running service never closes its conversations, so an integration cannot wait for ``close()`` to submit
    them: it calls ``touch(key)`` with each turn (a dict write under a lock), and a daemon thread
    (``contextjudge-conversations``, started with the first open conversation, gone when none is left) calls
    ``on_idle(key)`` for each conversation idle for ``idle`` seconds, off the request path. ``idle=None`` (or 0):
    never; the conversations are then submitted only at ``flush``/``close``. ``run_due(now)`` does the thread's
    work at once (tests drive it with a fake ``clock``). ``on_idle`` failures are logged, never raised.
    """

    def __init__(self, on_idle: Callable[[Any], Any], idle: float | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_idle = on_idle
        self.idle = _idle_seconds(idle)
        self.clock = clock
        self._last: dict[Any, float] = {}  # oldest activity first (a touch moves its key to the end)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._last)

    def touch(self, key: Any) -> None:
        """A turn of conversation ``key`` now."""
        if self.idle is None:
            return
        with self._cond:
            self._last.pop(key, None)
            self._last[key] = self.clock()
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="contextjudge-conversations", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # interpreter shutdown: exit's drain submits what is open
                    return
                self._thread = thread

    def discard(self, key: Any) -> None:
        with self._cond:
            self._last.pop(key, None)

    def due(self, now: float | None = None) -> list[Any]:
        """Take the conversations idle at ``now`` (default: the clock) off the watch; oldest first."""
        if self.idle is None:
            return []
        with self._cond:
            now = self.clock() if now is None else now
            out = []
            for key, last in self._last.items():
                if now - last < self.idle:
                    break  # ordered by activity: the rest are more recent
                out.append(key)
            for key in out:
                del self._last[key]
            return out

    def run_due(self, now: float | None = None) -> int:
        """Call ``on_idle`` for each conversation idle now; how many."""
        keys = self.due(now)
        for key in keys:
            try:
                self.on_idle(key)
            except Exception:  # noqa: BLE001 - capture never breaks the app
                logger.exception("contextjudge: could not submit an idle conversation")
        return len(keys)

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._last:
                        self._thread = None
                        return
                    wait = next(iter(self._last.values())) + (self.idle or 0.0) - self.clock()
                    if wait > 0:
                        self._cond.wait(min(wait, 60.0))
                        continue
                self.run_due()
        except Exception:  # noqa: BLE001 - never an unhandled exception in a thread of the user's app
            logger.exception("contextjudge: the idle-conversation watch failed; conversations are submitted at "
                             "flush or close only")
            with self._cond:
                self._thread = None


# ---------------------------------------------------------------------------------------------------- exit
_sessions: "weakref.WeakSet[CaptureSession]" = weakref.WeakSet()
_exit_lock = threading.Lock()
_exit_registered = False


def _register(session: "CaptureSession") -> None:
    global _exit_registered  # noqa: PLW0603 - one exit hook per process
    with _exit_lock:
        _sessions.add(session)
        if not _exit_registered:
            # registered before the shared loop's own exit hook can be (the loop starts with the first case), so
            # it runs after it at exit... unless the loop already exists: _aio runs its before-exit hooks first
            from .._aio import before_shutdown  # noqa: PLC0415

            before_shutdown(_close_all_at_exit)
            # threading's exit hooks run before concurrent.futures stops taking work (atexit's run after it): the
            # judge calls and store writes still pending at exit need thread pools. atexit is the fallback.
            register = getattr(threading, "_register_atexit", None)
            try:
                if register is None:
                    raise RuntimeError
                register(_close_all_at_exit)
            except RuntimeError:  # threading is already shutting down, or no such hook on this Python
                atexit.register(_close_all_at_exit)
            _exit_registered = True


def _close_all_at_exit() -> None:
    for session in list(_sessions):
        try:
            session._at_exit()  # noqa: SLF001
        except Exception:  # noqa: BLE001 - never fail the interpreter's exit
            logger.exception("contextjudge: could not close a capture session at exit")


# ---------------------------------------------------------------------------------------------------- session
class CaptureSession:
    """Receives captured cases and scores, keeps or stores them according to ``mode``.

    ``metrics`` default to the four single-turn metrics and turn relevancy, or, without ``goldens``, to those that
    need no expected_output (relevancy, utilization, turn relevancy); a metric that cannot run on a case (precision
    on a case no golden matched) gives an error result that says what to do. ``model`` is the judge of metrics built
    without one (the metric objects themselves are never changed); ``goldens`` fill expected outputs; ``store`` (a
    store or its path/URL) keeps cases, results and the run. ``max_kept`` bounds the cases held in memory
    (default 10,000; None: no bound). In "deferred" or "off" mode without a store the kept cases are the only copy
    of the work, so that combination needs ``max_kept`` given explicitly. ``max_queue`` bounds the cases waiting
    for a judge; ``concurrency`` the cases scored at once; ``on_result(case, result)`` is called for every result;
    ``exit_timeout`` is how long interpreter exit waits for pending scores (mode "worker": pending writes).

    ``sample_rate`` (0 to 1) is shorthand for ``sampling=Sampling(rate=...)``: the cases judged, decided by the
    conversation (``THREAD_KEY``), a user key function or the normalised input, so a conversation is judged whole or
    not at all and reruns pick the same cases; filters by retriever, chain, tags and metadata. ``budget`` (a
    ``judges.spend.Budget``) is shorthand for ``JudgeOptions(budget=...)``. Mode ``"worker"`` needs ``store``; it
    writes batches of up to ``batch`` cases at most every ``handoff_delay`` seconds (default 0.2), holds at most
    ``max_kept`` written cases (default 1,000) while their results may come back, and polls for those results every
    ``poll_interval`` seconds while ``on_result`` callbacks listen. ``counters`` says what became of every case.
    """

    def __init__(
        self,
        metrics: Sequence[Any] | None = None,
        *,
        model: Any = None,
        goldens: Any = None,
        mode: Mode = "background",
        store: Any = None,
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
        sampler = Sampling.of(sample_rate, sampling)
        idle_seconds = _idle_seconds(conversation_idle)
        if budget is not None:
            judge_options = dataclasses.replace(judge_options or JudgeOptions(), budget=budget)
        if max_kept is _UNSET:
            if mode == "worker":
                max_kept = _WORKER_MAX_KEPT
            elif mode != "background" and store is None:
                raise ConfigurationError(
                    f"capture in mode={mode!r} without a store keeps every captured case in memory, and they are "
                    "the only copy of that work. Pass store='captured.db' (then `contextjudge score` or "
                    "score_deferred() scores them), or max_kept=N to hold at most N cases (older ones are "
                    "dropped and counted), or max_kept=None to hold every case.")
            max_kept = _DEFAULT_MAX_KEPT
        if max_kept is not None and (not isinstance(max_kept, int) or max_kept < 1):
            raise ConfigurationError(f"max_kept must be a positive whole number or None, not {max_kept!r}.")
        self.goldens = load_goldens(goldens)
        self.metrics = (list(metrics) if metrics is not None
                        else default_metrics(expected_output=bool(len(self.goldens))))
        self.mode = mode
        self.run_name = run_name or f"capture-{time.strftime('%Y%m%d-%H%M%S')}"
        config: dict[str, Any] = {"mode": mode}
        if sampler is not None:
            config["sample_rate"] = sampler.rate
        self.run = Run(store=store, name=self.run_name, config=config, judge_options=judge_options,
                       model=model, contain_store_errors=True)
        self.judge_options = self.run.context.options
        self.max_queue = max(1, int(max_queue))
        self.max_kept = max_kept
        self.concurrency = max(1, concurrency)
        self.exit_timeout = exit_timeout
        self.on_result: list[ResultCallback] = [on_result] if on_result else []
        # background mode: > 0 hands cases to the worker in batches, at most this many seconds after the first one
        # (one wake-up of the worker per batch: the app's thread is interrupted less often); flush() does not wait.
        # Mode "worker": the writer thread writes a batch at most this often (default 0.2 s), sooner when it fills.
        if handoff_delay is None:
            handoff_delay = _WORKER_HANDOFF_DELAY if mode == "worker" else 0.0
        self.handoff_delay = max(0.0, handoff_delay)
        self.sampling = sampler
        # no decision to make when every case is judged: the app's thread does not even look at the case
        self._sampler = None if sampler is None or sampler.everything else sampler
        self._sampler_fallback: Sampling | None = None
        self.batch = max(1, int(batch))
        self.poll_interval = max(0.05, float(poll_interval))
        # the integrations submit an open conversation (a LangChain thread, a LlamaIndex agent's memory) once it has
        # had no turn for this many seconds (IdleConversations), and at flush/close; None or 0: at flush/close only
        self.conversation_idle = idle_seconds
        self._cases: list[CapturedCase] = []
        self.evicted = 0  # scored or stored cases forgotten from memory (nothing lost)
        self.dropped = 0  # unscored cases dropped from memory (lost without a store; unscored in it with one)
        self.seen = 0
        self.sampled = 0  # cases the sampling let through (every case, without sampling)
        self.unsampled = 0  # cases the draw left out: not kept, queued, stored or judged
        self.filtered = 0  # cases a sampling filter left out (retriever, chain, tags, metadata)
        self.judged = 0  # cases scored by this session (mode "worker": whose results came back to it)
        self.skipped_budget = 0  # cases not judged because the judge budget was spent
        self.written = 0  # mode "worker": cases written to the store with their queue rows
        self.results_received = 0  # mode "worker": results a worker wrote that came back to this session
        # "no silent nothing": the app's root calls (a chain, a graph, an engine call, an agent run) and those that
        # retrieved nothing; one warning when warn_after_roots of them have run and none retrieved (note_root)
        self.roots = 0
        self.roots_without_retrieval = 0
        self.warn_after_roots = warn_after_roots if warn_after_roots and warn_after_roots > 0 else None
        self._roots_seen: dict[str, dict[str, int]] = {}
        self._warned_roots = False
        self._warned_budget: Any = _UNSET
        # mode "worker": the cases waiting for the writer thread, those it is writing, and those awaiting results
        self._outbox: collections.deque[CapturedCase] = collections.deque()
        self._writing = 0
        self._held: dict[str, CapturedCase] = {}
        self._writer: threading.Thread | None = None
        self._writer_running = False
        self._writer_stop = False
        self._writer_hurry = False
        self._writer_wake = threading.Event()
        self._results_since = 0.0
        self._next_poll = 0.0
        self._warned_write = False
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._queue: collections.deque[CapturedCase] = collections.deque()
        # cases being scored now, by id(); the value holds the case, so its id cannot be reused meanwhile. Whether a
        # case is scored or stored is kept on the case itself (_DONE, _STORED), never by id(), which is reused.
        self._scoring: dict[int, CapturedCase] = {}
        self.evicted_unscored = 0  # stored cases forgotten from memory before they were scored
        self._backlog = 0  # this run's unscored cases only the store holds (dropped or evicted), with a store
        self._warned_drop = False
        self._wake_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop = False
        self._worker_future: concurrent.futures.Future | None = None
        self._drains: list[Callable[[float | None], Any]] = []
        self._syncs: list[Callable[[], Any]] = []
        self._close_hooks: list[Callable[[], Any]] = []
        self._closed = False
        _register(self)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counters.items() if v or k in ("seen", "dropped"))
        return f"{type(self).__name__}(mode={self.mode!r}, cases={len(self._cases)}, {counts}, run_id={self.run.id!r})"

    @property
    def counters(self) -> dict[str, int]:
        """What the session did with the cases it was given (a snapshot; also in the run's summary at its end).

        ``seen``: cases submitted. ``sampled`` / ``unsampled`` / ``filtered``: the sampling's decisions (a lazily
        assembled case is decided at its assembly). ``judged``: cases scored (mode "worker": whose results came back
        to this session). ``skipped_budget``: cases not judged because the judge budget was spent. ``dropped``:
        cases dropped to keep memory bounded (``max_queue`` / ``max_kept``) or that could not be written.
        ``written``, ``results_received``: mode "worker" (cases written for a worker; results it sent back).
        ``roots``: the app's top-level calls the integration saw end (a chain or graph run, a query/chat/retrieve
        call, an agent or workflow run); ``roots_without_retrieval``: those in which no retrieval was captured.
        """
        with self._lock:
            return {"seen": self.seen, "sampled": self.sampled, "unsampled": self.unsampled,
                    "filtered": self.filtered, "judged": self.judged, "skipped_budget": self.skipped_budget,
                    "dropped": self.dropped, "written": self.written, "results_received": self.results_received,
                    "roots": self.roots, "roots_without_retrieval": self.roots_without_retrieval}

    def note_root(self, retrievals: int, seen: dict[str, Any] | None = None, shapes: str = "") -> None:
        """An integration saw one of the app's top-level calls end, with ``retrievals`` retrievals captured in it.

        ``seen`` says what the call ran, by kind (``{"chains": ["LangGraph"], "graph nodes": [...], "tools": [...],
        "LLM calls": 3}``: names, or a count); ``shapes`` names what the integration captures. When
        ``warn_after_roots`` calls (20 by default; None turns it off) have run and not one retrieved anything, one
        warning names what was seen and the shapes that are captured: the app retrieves in a way capture does not
        see, and would otherwise get no test case and no word about it.
        """
        warn = None
        with self._lock:
            self.roots += 1
            if retrievals:
                return
            self.roots_without_retrieval += 1
            for kind, value in (seen or {}).items():
                bucket = self._roots_seen.setdefault(kind, {})
                items = [(value, 1)] if isinstance(value, str) else (
                    [("", int(value))] if isinstance(value, int) else [(str(v), 1) for v in value or ()])
                for name, n in items:
                    if name in bucket or len(bucket) < 12:
                        bucket[name] = bucket.get(name, 0) + n
            if (self.warn_after_roots is not None and not self._warned_roots
                    and self.roots_without_retrieval >= self.warn_after_roots
                    and self.roots == self.roots_without_retrieval):
                self._warned_roots = True
                warn = self._describe_roots_seen()
        if warn is not None:
            logger.warning(
                "contextjudge: %d calls of the app ran under capture and none retrieved anything that capture "
                "sees, so no test case was made. Seen: %s. Captured: %s. See 'What is captured' in the README "
                "(README.md#what-is-captured); session.counters['roots_without_retrieval'] counts these calls.",
                self.roots_without_retrieval, warn, shapes or "retrievers and vector store searches")

    def _describe_roots_seen(self) -> str:
        return _describe_seen(self._roots_seen)

    # ----------------------------------------------------------------------------------------------- access
    @property
    def store(self) -> Any:
        return self.run.store

    @property
    def run_id(self) -> str | None:
        return self.run.id if self.run.begun else None

    @property
    def test_cases(self) -> list[Any]:
        """The test cases kept in memory (lazily assembled ones are assembled now; failed ones are left out)."""
        return [c.test_case for c in self._ready_cases()]

    @property
    def results(self) -> list[tuple[CapturedCase, MetricResult]]:
        self._sync()
        with self._lock:
            return [(c, r) for c in self._cases for r in c.results]

    @property
    def cases(self) -> list[CapturedCase]:
        """The captured cases held in memory, oldest first (cases an integration is still assembling join first)."""
        self._sync()
        return self._cases

    @cases.setter
    def cases(self, value: list[CapturedCase]) -> None:
        with self._lock:
            self._cases = list(value)

    def add_sync(self, sync: Callable[[], Any]) -> None:
        """Register an integration's quick hand-over of cases it is assembling, run before the cases are read."""
        self._syncs.append(sync)

    def _sync(self) -> None:
        for sync in list(self._syncs):
            try:
                sync()
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: an integration could not hand over its captured cases")

    def kept(self) -> list[CapturedCase]:
        """A snapshot of the captured cases held in memory, oldest first."""
        self._sync()
        with self._lock:
            return list(self._cases)

    def __getattr__(self, name: str) -> Any:
        # 0.1's LangChain instrument() returned its callback handler; its own attributes stay reachable from the
        # session for one release, with a warning that names the new spelling.
        owner = self.__dict__.get("_legacy_owner")
        if owner is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = getattr(owner, name)
        warnings.warn(f"instrument() now returns the CaptureSession; reach the LangChain handler's {name!r} as "
                      f"session.handler.{name} (this fallback goes in the next release).", DeprecationWarning,
                      stacklevel=2)
        return value

    @property
    def handler(self) -> Any:
        """The framework object feeding this session (LangChain's callback handler), when there is one."""
        return self.__dict__.get("_legacy_owner")

    @property
    def pending(self) -> int:
        """Cases waiting for a judge or being scored."""
        with self._lock:
            return len(self._queue) + len(self._scoring)

    def _alive(self) -> bool:
        fut = self._worker_future
        return fut is not None and not fut.done()

    def add_close_hook(self, hook: Callable[[], Any]) -> None:
        """Call ``hook()`` when the session is closed (an integration takes off what it put on: a patch, a
        handler). A hook that raises is logged; the others still run."""
        self._close_hooks.append(hook)

    def add_drain(self, drain: Callable[[float | None], Any]) -> None:
        """Register an integration's own pending work: ``drain(timeout)`` hands over what it still holds, and returns
        False when it could not within ``timeout``."""
        self._drains.append(drain)

    def _drain(self, timeout: float | None) -> bool:
        """Run the integrations' drains; False when one of them could not hand everything over in time."""
        ok = True
        deadline = None if timeout is None else time.monotonic() + timeout
        for drain in list(self._drains):
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ok = drain(left) is not False and ok
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: an integration could not hand over its captured cases")
        return ok

    # ----------------------------------------------------------------------------------------------- intake
    def apply_golden(self, case: CapturedCase) -> None:
        """Fill the case's expected outputs from the goldens (see ``contextjudge.identity.match_golden``)."""
        if not len(self.goldens) or case.__dict__.get(_SAMPLED) is False:
            return
        from ..cases.identity import match_golden  # noqa: PLC0415

        gid = match_golden(self.goldens, case.test_case, golden_id=case.golden_id or _meta_golden(case),
                           fallback_input=case.metadata.get("chain_input"))
        if gid is not None and case.golden_id is None and isinstance(case.test_case, LLMTestCase):
            case.golden_id = gid

    def _prepare(self, case: CapturedCase) -> bool:
        """Assemble a lazily built case (its sampling is decided and its goldens matched then); False, and the case
        is forgotten, when its assembly failed or the sampling left it out."""
        if case.assemble() and case.__dict__.get(_SAMPLED) is not False:
            return True
        with self._lock:
            self._forget(case)
        return False

    def _decide(self, case: CapturedCase) -> bool:
        """The sampling's decision on ``case``, counted and kept on the case (it is made once)."""
        sampler = self._sampler
        known = case.__dict__.get(_SAMPLED)
        if sampler is None or known is not None:
            return known is not False
        try:
            verdict = sampler.decide(case)
        except Exception:  # noqa: BLE001 - a user's key function that fails: sample by the default key instead
            if self._sampler_fallback is None:
                logger.exception("contextjudge: the sampling key function failed; cases are sampled by their "
                                 "conversation or input instead (fix the key function)")
                self._sampler_fallback = dataclasses.replace(sampler, key=None)
            try:
                verdict = self._sampler_fallback.decide(case)
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: could not sample a captured case; it is judged")
                verdict = "sampled"
        with self._lock:
            if verdict == "sampled":
                self.sampled += 1
            elif verdict == "filtered":
                self.filtered += 1
            else:
                self.unsampled += 1
        case.__dict__[_SAMPLED] = verdict == "sampled"
        return verdict == "sampled"

    def ready_cases(self) -> list[CapturedCase]:
        """The kept cases, lazily built ones assembled now (and goldens matched); failed ones are left out."""
        return self._ready_cases()

    def _ready_cases(self) -> list[CapturedCase]:
        self._sync()
        with self._lock:
            cases = list(self._cases)
        return [c for c in cases if self._prepare(c)]

    def submit(self, case: CapturedCase) -> None:
        """Take a captured case. Never raises and never blocks on a judge (nor, in mode "worker", on the store).

        The sampling decides here when it can without assembling the case (a plain case; its filters and key are
        in its metadata), else at the case's assembly, off the request path; either way before any judging or
        store write. A case left out is counted and forgotten.
        """
        try:
            with self._lock:
                self.seen += 1
                position = self.seen - 1
                self._closed = False  # a case after close(): exit looks after this session again
                if self._sampler is None:
                    self.sampled += 1
            case.__dict__[_POSITION] = position
            if self._sampler is not None:
                if case.assembled:
                    if not self._decide(case):
                        return
                else:
                    case.when_assembled(self._decide)  # at its assembly, before its goldens are matched
            case.when_assembled(self.apply_golden)  # a lazy case: at its assembly, off the request path
            if self.mode == "worker":
                self._hand_to_writer(case)
                return
            if not self.run.begun or self.run.ended:
                self.run.begin(self.metrics)  # with a store, the run exists from the first case on
            if self.store is not None and self.mode != "background":
                self._store_case(case)
            victims: list[CapturedCase] = []
            with self._lock:
                self._cases.append(case)
                if self.mode == "background":
                    self._queue.append(case)
                    if len(self._queue) > self.max_queue:
                        victims.append(self._drop(self._queue[0], "the scoring queue is full"))
                victims += self._evict()
                # wake the worker once a batch; always when it is not running (it ended, or was stopped)
                wake = self.mode == "background" and (not self._wake_scheduled or not self._alive())
                if wake:
                    self._wake_scheduled = True
            if victims and self.store is not None:
                self._keep_in_store(victims)
            if wake:
                self._schedule_wake()
        except Exception:  # noqa: BLE001 - capture never breaks the app
            logger.exception("contextjudge: could not take a captured case")

    def _keep_in_store(self, cases: list[CapturedCase]) -> None:
        """Write dropped cases to the store off the app's thread (they are unscored: `contextjudge score` finishes
        them). They are held only until written."""
        todo = [c for c in cases if not c.__dict__.get(_STORED)]
        if not todo:
            return

        async def write() -> None:
            await asyncio.to_thread(lambda: [self._store_case(c) for c in todo])

        try:
            submit(write())
        except Exception:  # noqa: BLE001 - the loop is gone (interpreter exit): write them here
            for c in todo:
                self._store_case(c)

    def _schedule_wake(self) -> None:
        self._ensure_worker()
        loop, wake = self._loop, self._wake
        assert loop is not None and wake is not None
        if self.handoff_delay <= 0:
            loop.call_soon_threadsafe(wake.set)
        else:
            loop.call_soon_threadsafe(loop.call_later, self.handoff_delay, wake.set)

    # ----------------------------------------------------------------------------------------------- mode "worker"
    def _hand_to_writer(self, case: CapturedCase) -> None:
        """Mode "worker", on the app's thread: append the case for the writer thread; nothing else."""
        with self._lock:
            self._outbox.append(case)
            n = len(self._outbox)
            if n > self.max_queue:
                self._outbox.popleft()
                self.dropped += 1
                n -= 1
                if not self._warned_drop:
                    self._warned_drop = True
                    logger.warning(
                        "contextjudge: capture's writer is not keeping up with the store (more than max_queue=%d "
                        "cases wait to be written), so it drops the oldest unwritten ones: they are lost. Check "
                        "the store, or lower the traffic captured (sample_rate). session.counters['dropped'] "
                        "counts them; a summary is logged at close.", self.max_queue)
            start = not self._writer_running
            if start:
                self._writer_running = True
                self._writer_stop = False
            wake = n == 1 or n >= self.batch
        if start:
            self._start_writer()
        elif wake:
            self._writer_wake.set()

    def _start_writer(self) -> None:
        thread = threading.Thread(target=self._writer_main, name="contextjudge-writer", daemon=True)
        self._writer = thread
        try:
            thread.start()
        except RuntimeError:  # interpreter shutdown: no new threads; the exit hook writes what is queued
            with self._lock:
                self._writer_running = False

    def _writer_main(self) -> None:
        """The writer thread: writes the queued cases in batches (at most every ``handoff_delay``, sooner when a
        batch fills) and, while written cases await results and someone listens, polls the store for them."""
        wake = self._writer_wake
        try:
            while True:
                with self._lock:
                    waiting = len(self._outbox)
                    stop, hurry = self._writer_stop, self._writer_hurry
                    if not waiting and stop:  # decided under the lock: a case handed over now starts a writer
                        self._writer_running = False
                        break
                if not waiting:
                    wake.wait(self._poll_wait())
                    wake.clear()
                    self._poll_if_due()
                    continue
                if waiting < self.batch and not (stop or hurry) and self.handoff_delay > 0:
                    wake.clear()
                    wake.wait(self.handoff_delay)  # let the batch fill; set early when it is full, or to flush
                self._write_queued()
                self._poll_if_due()
        except Exception:  # noqa: BLE001 - never an unhandled exception in a thread of the user's app
            logger.exception("contextjudge: capture's writer thread failed; captured cases are no longer written")
        finally:
            with self._lock:
                self._writer_running = False
                self._idle.notify_all()

    def _write_queued(self) -> None:
        while True:
            with self._lock:
                take = [self._outbox.popleft() for _ in range(min(self.batch, len(self._outbox)))]
                self._writing += len(take)
            if not take:
                return
            try:
                self._write_batch(take)
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: could not write captured cases to the store")
            finally:
                with self._lock:
                    self._writing -= len(take)
                    self._idle.notify_all()

    def _write_batch(self, cases: list[CapturedCase]) -> None:
        """Write cases and their queue rows in one transaction (``store.save_cases_queued``); a batch that cannot be
        written is dropped and counted."""
        ready = [c for c in cases if self._prepare(c)]  # lazy ones are assembled (and sampled) here
        if not ready:
            return
        if not self.run.begun or self.run.ended:
            self.run.begin(self.metrics)  # the run's config names the metrics and judge the worker uses
        store = self.store
        error: BaseException | None = None
        if store is None:  # the run could not start in the store (logged)
            error = ConfigurationError("the store could not be used")
        else:
            items = [(c.case_id, c.__dict__.get(_POSITION, 0), c.test_case) for c in ready]
            try:
                store.save_cases_queued(self.run.id, items)
            except Exception as exc:  # noqa: BLE001 - capture never breaks the app over its store
                error = exc
        if error is not None:
            with self._lock:
                self.dropped += len(ready)
                first, self._warned_write = not self._warned_write, True
            if first:
                logger.error("contextjudge: could not write %d captured case(s) for the worker to %r (%s: %s); "
                             "they are dropped and counted (session.counters['dropped']). Check the store.",
                             len(ready), store, type(error).__name__, error, exc_info=error)
            return
        with self._lock:
            self.written += len(ready)
            listening = bool(self.on_result)
            for c in ready:
                c.__dict__[_STORED] = True
                if listening:  # held (bounded) only so that its results can come back as events
                    self._cases.append(c)
                    self._held[c.case_id] = c
            while self.max_kept is not None and len(self._held) > self.max_kept:
                self._held.pop(next(iter(self._held)))
            self._evict()  # every held case is in the store: only forgotten, never dropped
            if listening and not self._next_poll:
                # the first poll reads the run's results from its start (the run is this session's own, so that is
                # little): the workers stamp results with their own clocks, which may be behind this host's
                self._next_poll = time.monotonic() + self.poll_interval

    def _poll_wait(self) -> float | None:
        """How long the idle writer sleeps: until the next poll while cases await results, else until woken."""
        with self._lock:
            if not self._held or not self.on_result:
                return None
        return max(0.0, self._next_poll - time.monotonic())

    def _poll_if_due(self) -> None:
        if not self._held or not self.on_result or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + self.poll_interval
        try:
            self._poll_results()
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not read the worker's results from the store")

    def _poll_results(self) -> None:
        """Send the results a worker wrote for the cases this session still holds as ``on_result`` events."""
        store, run_id = self.store, self.run.id
        if store is None or run_id is None:
            return
        rows = store.results_since(run_id, self._results_since)
        newest = self._results_since
        got: dict[str, list[MetricResult]] = {}
        with self._lock:
            for key, result, created in rows:
                newest = max(newest, float(created))
                if key in self._held:
                    got.setdefault(key, []).append(result)
            # a case's results are written in one transaction, so a case seen here has all of them
            cases = [(self._held.pop(key), results) for key, results in got.items()]
            for case, results in cases:
                case.results.extend(results)
                case.__dict__[_DONE] = True
                self.judged += 1
                self.results_received += len(results)
            stale = time.time() - _HOLD_FOR  # skipped by a budget, or no worker: stop waiting for it
            while self._held and next(iter(self._held.values())).captured_at < stale:
                self._held.pop(next(iter(self._held)))
            self._idle.notify_all()
        self._results_since = max(self._results_since, newest - _POLL_OVERLAP)
        for case, results in cases:
            self._emit(case, results)

    def wait_results(self, timeout: float | None = None) -> bool:
        """Mode "worker": write what is queued, then wait until the results of every case this session holds came
        back from a worker (only held while ``on_result`` callbacks listen). False when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.flush(timeout):
            return False
        with self._lock:
            while self._held and self.on_result:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if not self._writer_running:  # the writer ended (closed): nothing polls any more
                    return False
                self._idle.wait(remaining if remaining is None else min(remaining, self.poll_interval))
        return True

    def _flush_writer(self, deadline: float | None) -> bool:
        """Mode "worker": wait until every queued case is written (or ``deadline``)."""
        if threading.current_thread() is self._writer:  # an on_result callback calling flush: do not wait on itself
            return not self._outbox
        with self._lock:
            if self._outbox and not self._writer_running:
                self._writer_running = True
                self._writer_stop = False
                start = True
            else:
                start = False
            self._writer_hurry = True
        if start:
            self._start_writer()
        self._writer_wake.set()
        try:
            with self._lock:
                while self._outbox or self._writing:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if (remaining is not None and remaining <= 0) or not self._writer_running:
                        return False
                    self._idle.wait(remaining)
            return True
        finally:
            with self._lock:
                self._writer_hurry = False

    def _stop_writer(self, timeout: float | None) -> None:
        """End the writer thread once it has written what is queued (it goes on, a daemon, after ``timeout``)."""
        with self._lock:
            self._writer_stop = True
            thread = self._writer
        self._writer_wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _forget(self, case: CapturedCase) -> None:
        """Take ``case`` out of memory (lock held)."""
        self._cases = [c for c in self._cases if c is not case]
        for i, queued in enumerate(self._queue):
            if queued is case:
                del self._queue[i]
                break
        self._idle.notify_all()

    def _drop(self, case: CapturedCase, why: str) -> CapturedCase:
        """Drop an unscored case from memory (lock held) and count it; returns it, for the caller to write to the
        store (after the lock is released) when there is one."""
        self._forget(case)
        self.dropped += 1
        if self.store is not None:
            self._backlog += 1
        if not self._warned_drop:
            self._warned_drop = True
            where = (f"they stay unscored in run {self.run.id} of the store (`contextjudge score` finishes them)"
                     if self.store is not None else "they are lost (pass store=... to keep them)")
            logger.warning("contextjudge: %s, so capture is dropping its oldest unscored cases (max_kept=%s, "
                           "max_queue=%d): %s. The judge is not keeping up: check it, or lower the traffic "
                           "captured. session.dropped counts them; a summary is logged at close.",
                           why, self.max_kept, self.max_queue, where)

    def _evict(self) -> list[CapturedCase]:
        """Hold at most ``max_kept`` cases (lock held): forget scored or stored ones first, then the oldest
        unscored ones (dropped and counted). Evicts a tenth of ``max_kept`` at a time, so a full session does not
        rebuild its list on every case."""
        if self.max_kept is None or len(self._cases) <= self.max_kept:
            return []
        target = len(self._cases) - self.max_kept + (self.max_kept // 10)
        keep: list[CapturedCase] = []
        removed = 0
        for c in self._cases:
            done, stored = c.__dict__.get(_DONE), c.__dict__.get(_STORED)
            if removed < target and (done or stored) and id(c) not in self._scoring:
                removed += 1
                self.evicted += 1
                if not done:
                    self.evicted_unscored += 1
                    self._backlog += 1
                continue
            keep.append(c)
        self._cases = keep
        over = len(self._cases) - self.max_kept
        if over > 0:
            victims = [c for c in self._cases if id(c) not in self._scoring][:over]
            return [self._drop(c, f"more than max_kept={self.max_kept} captured cases are unscored")
                    for c in victims]
        return []

    def _store_case(self, case: CapturedCase) -> None:
        if self.store is None or not self._prepare(case):
            return
        self.run.begin(self.metrics)
        self.run.save_case(case.case_id, case.__dict__.get(_POSITION, 0), case.test_case)
        case.__dict__[_STORED] = True

    # ----------------------------------------------------------------------------------------------- worker
    def _ensure_worker(self) -> None:
        """Start the scoring task on the process-wide loop (``_aio``), where provider clients stay valid."""
        fut = self._worker_future
        if fut is not None and not fut.done():
            return
        with self._lock:
            fut = self._worker_future
            if fut is not None and not fut.done():
                return
            ready = threading.Event()
            self._stop = False
            fut = self._worker_future = submit(self._worker(ready), context=contextvars.Context())
            # Held until the worker ends (close()): a session dropped without close() keeps scoring what it was
            # given instead of being collected with its cases mid-queue.
            _live_workers.add(fut)
            fut.add_done_callback(_live_workers.discard)
        ready.wait()

    async def _worker(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()
        ready.set()
        # This task runs in a context of its own (see _ensure_worker), so the run context is set and never reset.
        use_run_context(self.run.context).__enter__()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                await slots.acquire()
                with self._lock:
                    self._wake_scheduled = False
                    case = self._queue.popleft() if self._queue else None
                    if case is not None:
                        self._scoring[id(case)] = case
                if case is None:
                    slots.release()
                    break
                task = asyncio.create_task(self._score_guarded(case, slots))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if self._stop:
                break
        try:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            with self._lock:
                self._wake_scheduled = False  # the next case starts a worker again

    async def _score_guarded(self, case: CapturedCase, slots: asyncio.Semaphore) -> None:
        try:
            await self.score_case(case)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: scoring a captured case failed")
        finally:
            slots.release()
            with self._lock:
                self._scoring.pop(id(case), None)
                self._idle.notify_all()

    async def score_case(self, case: CapturedCase) -> list[MetricResult]:
        """Score one case with every applicable metric, in the session's run; a metric missing a field gives an
        error result that says what to do (never a silent skip)."""
        if not self._prepare(case):  # a lazily built case is assembled here, off the app's thread
            return []
        blocked = self.run.context.budget_blocked()
        if blocked is not None:  # the budget is spent: skip before any store write or judge call
            self._skip_budget(case, blocked)
            return []
        if self.store is not None and not case.__dict__.get(_STORED):
            await asyncio.to_thread(self._store_case, case)  # a store write never holds up the shared loop
        if not self.run.begun or self.run.ended:
            self.run.begin(self.metrics)
        try:
            with use_run_context(self.run.context):
                results = await score_case(self.run, case.case_id, case.test_case, self.metrics, budget="raise")
        except BudgetExhaustedError as exc:
            self._skip_budget(case, exc.resumes_at, exc)
            return []
        results = results or []
        with self._lock:
            case.results.extend(results)
            case.__dict__[_DONE] = True
            self.judged += 1
        self._emit(case, results)
        return results

    def _skip_budget(self, case: CapturedCase, resumes_at: float | None, why: Any = None) -> None:
        """Skip ``case`` because the judge budget is spent: forget it and count it. One warning per budget window:
        a refused call's (``why``) is the budget ledger's own, said once per window in the process; a window found
        spent before any call (another process spent it) is said here, once."""
        if resumes_at is None:
            resumes_at = getattr(why, "resumes_at", None)
        with self._lock:
            self.skipped_budget += 1
            self._forget(case)
            warn = why is None and resumes_at != self._warned_budget
            self._warned_budget = resumes_at
        if warn:
            until = (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(resumes_at)) if resumes_at
                     else "the budget's next window")
            logger.warning("contextjudge: the judge budget is spent for this window (by this or another process of "
                           "the app), so capture skips cases until %s; session.counters['skipped_budget'] counts "
                           "them. Raise the Budget's limits or lower sample_rate to judge more.", until)

    def _emit(self, case: CapturedCase, results: list[MetricResult]) -> None:
        for r in results:
            for cb in list(self.on_result):
                try:
                    cb(case, r)
                except Exception:  # noqa: BLE001
                    logger.exception("contextjudge: a result callback failed")

    # ----------------------------------------------------------------------------------------------- waiting
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted case is scored (mode "worker": written to the store for a worker; see
        ``wait_results``). Returns False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._drain(timeout):
            return False
        if self.mode == "worker":
            return self._flush_writer(deadline)
        if self.mode == "background":
            with self._lock:
                waiting = bool(self._queue)
            if waiting and self._loop is not None and self._wake is not None:
                try:
                    self._loop.call_soon_threadsafe(self._wake.set)  # a batch waiting for its delay: now
                except RuntimeError:  # pragma: no cover - the loop is closed
                    pass
        with self._lock:
            while self._queue or self._scoring:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async form of ``flush``: waits without blocking the caller's event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def score_deferred(self, **kwargs: Any) -> EvaluationResult:
        """Score what this session captured and has not scored yet, attach the results to the cases in memory, and
        end the session's run. With a store, that includes the unscored cases it holds for this run (cases dropped
        or forgotten from memory). Keyword arguments go to ``evaluate`` (``max_concurrency``, ``show_progress``...)."""
        from .evaluate import aevaluate  # noqa: PLC0415

        if self.mode == "worker":
            raise ConfigurationError("score_deferred() scores in this process, and this session (mode='worker') "
                                     "leaves scoring to `contextjudge worker`: run one on the session's store, or "
                                     "use mode='deferred' to score later in the app.")
        self._drain(None)
        todo = [c for c in self._ready_cases() if not c.__dict__.get(_DONE)]
        with self._lock:
            busy = set(self._scoring) | {id(c) for c in self._queue}
            todo = [c for c in todo if id(c) not in busy]
            in_memory = {c.case_id for c in self._cases}
        cases, keys = [c.test_case for c in todo], [c.case_id for c in todo]
        from_store = 0
        if self.store is not None and self.run.begun:
            try:
                stored = [sc for sc in self.store.unscored_cases(self.run.id) if sc.case_key not in in_memory]
            except Exception:  # noqa: BLE001 - the store is unreachable: score what is in memory
                logger.exception("contextjudge: could not read this run's unscored cases from the store")
                stored = []
            cases += [sc.test_case for sc in stored]
            keys += [sc.case_key for sc in stored]
            from_store = len(stored)
            with self._lock:
                self.judged += from_store
        result = run_sync(aevaluate(cases, self.metrics, run=self.run, case_keys=keys, **kwargs))
        by_index = {tr.index: tr for tr in result.test_results}
        for i, case in enumerate(todo):
            tr = by_index.get(i)
            if tr is None:
                continue
            with self._lock:
                case.results.extend(tr.metrics_data)
                case.__dict__[_DONE] = True
                self.judged += 1
            self._emit(case, tr.metrics_data)
        if from_store or self.store is not None:
            with self._lock:
                self._backlog = 0  # what the store held unscored is scored now
        self._end_run()
        return result

    def _end_run(self, status: str | None = None) -> None:
        if not self.run.begun or self.run.ended:
            return
        with self._lock:
            kept = list(self._cases)
            unscored = sum(1 for c in kept if not c.__dict__.get(_DONE))
            backlog = self._backlog
            results = [r for c in kept for r in c.results]
        if status is None and self.mode == "worker":
            status = self._worker_status()
        if status is None:
            # finished: nothing of this run is left unscored, in memory or in the store
            left = unscored + backlog
            status = "finished" if not left else "captured" if self.mode != "background" else "interrupted"
        summary: dict[str, Any] = {"captured": self.seen, "unscored_in_memory": unscored,
                                   "unscored_in_store_only": backlog, "dropped": self.dropped,
                                   "evicted": self.evicted, "usage": self.run.context.usage.to_dict(),
                                   "counters": self.counters}
        by_metric: dict[str, list[float]] = {}
        errors: dict[str, int] = {}
        for r in results:
            if r.score is not None:
                by_metric.setdefault(r.name, []).append(r.score)
            if r.error is not None:
                errors[r.name] = errors.get(r.name, 0) + 1
        summary["summary"] = {k: {"mean": sum(v) / len(v), "n": len(v)} for k, v in by_metric.items()}
        summary["errors"] = errors
        judges = sorted({r.evaluation_model for r in results if r.evaluation_model})
        if judges:
            summary["judges"] = judges
        self.run.end(summary, status=status)

    def _worker_status(self) -> str:
        """Mode "worker": "finished" when a worker has done every case of the run, else "captured" (the cases wait in
        the store's queue; workers go on with them whatever the run's status)."""
        try:
            counts = self.store.queue_counts(self.run.id) if self.store is not None else {}
        except Exception:  # noqa: BLE001
            return "captured"
        with self._lock:
            unwritten = len(self._outbox) + self._writing
        open_rows = sum(counts.get(k, 0) for k in ("queued", "claimed", "expired"))
        return "finished" if counts and not open_rows and not unwritten else "captured"

    def close(self, timeout: float | None = 30.0) -> bool:
        """Hand over, score what is pending, stop the scoring task and end the run; ``timeout`` bounds it all.

        Returns False when the timeout passed with cases still unscored (they stay in the store, when there is
        one, for ``contextjudge score``). A summary of dropped cases is logged, if any were dropped.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        done = self.flush(left())
        if self.mode == "worker":
            self._stop_writer(left())
        self._stop_worker(left())
        self._closed = True
        unscored = self._keep_unscored()
        self._end_run()
        self._report(unscored, at_exit=False)
        for hook in self._close_hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001 - closing never raises into the app
                logger.exception("contextjudge: a capture close hook failed")
        return done

    def _stop_worker(self, timeout: float | None) -> None:
        fut, loop, wake = self._worker_future, self._loop, self._wake
        if fut is None or loop is None or wake is None:
            return
        self._stop = True
        try:
            loop.call_soon_threadsafe(wake.set)
            fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
        except Exception:  # noqa: BLE001 - the loop is closed, or the worker ended with an error (logged)
            pass
        self._worker_future = None

    def _keep_unscored(self) -> int:
        """Write every kept, unscored case to the store (so ``contextjudge score`` can finish it); their count.
        Mode "worker": the cases not written yet (the writer goes on with them after a timeout, until exit)."""
        if self.mode == "worker":
            with self._lock:
                return len(self._outbox) + self._writing
        with self._lock:
            unscored = [c for c in self._cases if not c.__dict__.get(_DONE)]
        if self.store is not None:
            for c in unscored:
                if not c.__dict__.get(_STORED):
                    try:
                        self._store_case(c)
                    except Exception:  # noqa: BLE001
                        logger.exception("contextjudge: could not keep a captured case in the store")
        return len(unscored)

    def _report(self, unscored: int, *, at_exit: bool) -> None:
        if not unscored and not self.dropped:
            return
        when = "at exit" if at_exit else "at close"
        parts = []
        if unscored and self.mode == "worker":
            parts.append(f"{unscored} captured case(s) were not written to the store yet (the writer goes on with "
                         "them until the process exits)")
        elif unscored and self.mode == "background":
            parts.append(f"{unscored} captured case(s) were not scored yet")
        elif unscored and at_exit:
            parts.append(f"{unscored} captured case(s) are unscored (mode={self.mode!r})")
        if self.dropped and self.mode == "worker":
            parts.append(f"{self.dropped} case(s) were dropped (lost: not written for a worker; max_queue or a "
                         "store that failed)")
        elif self.dropped:
            parts.append(f"{self.dropped} unscored case(s) were dropped to stay within max_kept/max_queue")
        if not parts:
            return
        if self.mode == "worker":
            where = (f"{self.written} case(s) were written to run {self.run.id} of {self.store!r} for "
                     "`contextjudge worker`; session.counters has the counts")
        elif self.store is not None:
            where = (f"the cases are in run {self.run.id} of {self.store!r}: `contextjudge score --run "
                     f"{self.run.id}` scores them")
        else:
            where = "without a store they are lost: call flush() before exiting, or pass store=... to keep them"
        logger.warning("contextjudge: %s, %s; %s.", when, "; ".join(parts), where)

    def _at_exit(self) -> None:
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + max(0.0, self.exit_timeout)

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        self._drain(left())
        if self.mode == "background":
            self.flush(left())
            self._stop_worker(min(1.0, left()))
        elif self.mode == "worker":
            self.flush(left())
            self._stop_writer(left())
        unscored = self._keep_unscored()
        self._end_run()
        self._report(unscored, at_exit=True)


def _meta_golden(case: CapturedCase) -> str | None:
    from ..cases.identity import golden_id_of  # noqa: PLC0415

    try:
        return golden_id_of(case.metadata)
    except Exception:  # noqa: BLE001
        return None


CaptureScorer = CaptureSession  # the name before 0.2; kept for one release

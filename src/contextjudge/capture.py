"""The framework-agnostic half of capture: goldens, scoring modes and the background scoring worker.

The LangChain and LlamaIndex integrations assemble ``CapturedCase`` objects from their frameworks' events and hand
them to a ``CaptureScorer``. The scorer fills ``expected_output`` from goldens, then, by mode:

- ``"background"``: scores on a worker thread with its own event loop, off the request path. The queue is bounded:
  when it is full, new cases are kept but not scored, and a warning says so; the app never waits.
- ``"deferred"``: keeps the cases (and writes them to the store, when one is given) for a later
  ``contextjudge score`` or ``scorer.score_deferred()``.
- ``"off"``: keeps the cases only.

``flush()`` / ``await aflush()`` wait for pending scores. Every failure inside the scorer is logged and contained:
capture never breaks the user's app.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from ._aio import submit
from ._judge import RunContext, VerdictCache, in_judge_call, use_run_context
from ._result import EvaluationResult, MetricResult
from ._retry import JudgeOptions
from ._testcase import ConversationalTestCase, LLMTestCase
from .errors import InvalidTestCaseError, MissingTestCaseParamsError
from .goldens import Goldens, load_goldens

__all__ = ["AppAdapter", "CaptureScorer", "CapturedCase", "Mode", "default_metrics", "in_judge_call"]

logger = logging.getLogger("contextjudge")

_live_workers: set[concurrent.futures.Future] = set()

Mode = Literal["background", "deferred", "off"]
ResultCallback = Callable[["CapturedCase", MetricResult], None]


@dataclass
class CapturedCase:
    """A test case assembled from a framework run, with where it came from."""

    test_case: LLMTestCase | ConversationalTestCase
    source: str = ""
    case_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    root_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    results: list[MetricResult] = field(default_factory=list)
    golden_id: str | None = None
    captured_at: float = field(default_factory=time.time)


def default_metrics(model: Any = None) -> list[Any]:
    """The metrics capture uses when none are given: the four single-turn metrics and turn relevancy."""
    from .metrics import (  # noqa: PLC0415
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
        TurnContextualRelevancyMetric,
    )

    return [ContextualPrecisionMetric(model=model), ContextualRecallMetric(model=model),
            ContextualRelevancyMetric(model=model), ContextUtilizationMetric(model=model),
            TurnContextualRelevancyMetric(model=model)]


class AppAdapter:
    """What an integration offers ``contextjudge eval --app``: run goldens through an app with capture attached.

    Integrations register an instance under the entry-point group ``contextjudge.apps``.
    """

    name = "app"

    def matches(self, obj: Any) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def collect(self, obj: Any, goldens: Goldens, *, concurrency: int = 4) -> list[CapturedCase]:
        """Run every golden's input through ``obj`` with capture in mode "off"; return the captured cases."""
        raise NotImplementedError  # pragma: no cover - interface


class CaptureScorer:
    """Receives captured cases and scores, keeps or stores them according to ``mode``."""

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
        max_kept: int | None = 10_000,
        concurrency: int = 4,
        on_result: ResultCallback | None = None,
        run_name: str | None = None,
        handoff_delay: float = 0.0,
    ) -> None:
        if mode not in ("background", "deferred", "off"):
            raise ValueError(f"mode must be 'background', 'deferred' or 'off', not {mode!r}.")
        self.metrics = list(metrics) if metrics is not None else default_metrics(model)
        if model is not None:
            for m in self.metrics:  # the capture's model applies to metrics built without one
                if getattr(m, "_model_arg", "set") is None:
                    m._model_arg = model  # noqa: SLF001
        self.goldens = load_goldens(goldens)
        self.mode = mode
        if isinstance(store, str):
            from .store import open_store  # noqa: PLC0415

            store = open_store(store)
        self.store = store
        self.judge_options = judge_options or JudgeOptions()
        self.max_queue = max_queue
        self.concurrency = max(1, concurrency)
        self.on_result: list[ResultCallback] = [on_result] if on_result else []
        self.run_name = run_name or f"capture-{time.strftime('%Y%m%d-%H%M%S')}"
        self.cases: list[CapturedCase] = []
        self.max_kept = max_kept
        self.evicted = 0
        self._seen = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        # background mode: > 0 hands cases to the worker in batches, at most this many seconds after the first one
        # (one wake-up of the worker per batch: the app's thread is interrupted less often); flush() does not wait
        self.handoff_delay = max(0.0, handoff_delay)
        self._handoff: list[CapturedCase] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._worker_future: concurrent.futures.Future | None = None  # the worker task, on the shared loop
        self._run_id: str | None = None
        self._skip_noted: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------------------------------------- access
    @property
    def test_cases(self) -> list[Any]:
        with self._lock:
            return [c.test_case for c in self.cases]

    @property
    def results(self) -> list[tuple[CapturedCase, MetricResult]]:
        with self._lock:
            return [(c, r) for c in self.cases for r in c.results]

    @property
    def run_id(self) -> str | None:
        return self._run_id

    # ----------------------------------------------------------------------------------------------- intake
    def apply_golden(self, case: CapturedCase) -> None:
        tc = case.test_case
        if not len(self.goldens):
            return
        gid = case.golden_id or case.metadata.get("golden_id")
        if isinstance(tc, LLMTestCase):
            g = self.goldens.match(tc.input, gid)
            if g is None and case.metadata.get("chain_input"):
                g = self.goldens.match(str(case.metadata["chain_input"]), gid)
            if g is not None:
                case.golden_id = g.id
                if tc.expected_output is None and g.expected_output:
                    tc.expected_output = g.expected_output
        elif isinstance(tc, ConversationalTestCase):
            users = [t for t in tc.turns if t.role == "user"]
            for i, turn in enumerate(tc.turns):
                if turn.role != "assistant" or turn.expected_output is not None:
                    continue
                prev = next((t for t in reversed(tc.turns[:i]) if t.role == "user"), None)
                g = self.goldens.match(prev.content if prev else None)
                if g is not None and g.expected_output:
                    turn.expected_output = g.expected_output
            if tc.expected_outcome is None and users:
                g = self.goldens.match(None, gid)
                if g is not None and (g.expected_outcome or g.expected_output):
                    tc.expected_outcome = g.expected_outcome or g.expected_output

    def submit(self, case: CapturedCase) -> None:
        """Take a captured case. Never raises and never blocks on a judge."""
        try:
            self.apply_golden(case)
            with self._lock:
                self.cases.append(case)
                self._seen += 1
                self._evict()
            self._store_case(case)
            if self.mode != "background":
                return
            with self._lock:
                if self._pending >= self.max_queue:
                    self.dropped += 1
                    if self.dropped == 1 or self.dropped % 100 == 0:
                        logger.warning("contextjudge: scoring queue full (%d); %d captured case(s) kept but not "
                                       "scored. Raise max_queue or use mode='deferred'.", self.max_queue, self.dropped)
                    return
                self._pending += 1
            self._ensure_worker()
            assert self._loop is not None and self._queue is not None
            if self.handoff_delay <= 0:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, case)
                return
            with self._lock:
                self._handoff.append(case)
                first = len(self._handoff) == 1
            if first:
                self._loop.call_soon_threadsafe(self._loop.call_later, self.handoff_delay, self._hand_off)
        except Exception:  # noqa: BLE001 - capture never breaks the app
            logger.exception("contextjudge: could not take a captured case")
            with self._lock:
                self._handoff = [c for c in self._handoff if c is not case]  # not handed over: counted out below
                self._pending = max(0, self._pending - 1) if self.mode == "background" else self._pending
                self._idle.notify_all()

    def _evict(self) -> None:
        """Keep memory bounded in long-lived processes: forget the oldest cases that are safe to forget.

        A case is safe to forget once it is scored, or at once when a store keeps it. Unscored cases without a
        store are never dropped here (the scoring queue has its own bound). Called with the lock held.
        """
        if self.max_kept is None or len(self.cases) <= self.max_kept:
            return
        excess = len(self.cases) - self.max_kept
        keep: list[CapturedCase] = []
        for c in self.cases:
            if excess > 0 and (c.results or self.store is not None):
                excess -= 1
                self.evicted += 1
                continue
            keep.append(c)
        self.cases = keep

    def _store_case(self, case: CapturedCase) -> None:
        if self.store is None:
            return
        try:
            if self._run_id is None:
                with self._lock:
                    if self._run_id is None:
                        self._run_id = self.store.begin_run(None, {"name": self.run_name, "mode": self.mode,
                                                                    "metrics": [type(m).__name__ for m in self.metrics]})
            self.store.save_case(self._run_id, case.case_id, self._seen - 1, case.test_case)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not write a captured case to the store")

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
            fut = self._worker_future = submit(self._worker(ready), context=contextvars.Context())
            # Held until the worker ends (close()), as the worker thread of old was: a scorer dropped without
            # close() keeps scoring what it was given instead of being collected with its cases mid-queue.
            _live_workers.add(fut)
            fut.add_done_callback(_live_workers.discard)
        ready.wait()

    def _hand_off(self) -> None:
        """On the worker's loop: queue the cases batched by ``handoff_delay``."""
        with self._lock:
            cases, self._handoff = self._handoff, []
        for case in cases:
            self._queue.put_nowait(case)  # type: ignore[union-attr]

    async def _worker(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        ctx = RunContext(options=self.judge_options, cache=VerdictCache(backend=self.store))
        if self.store is not None:
            ctx.on_call.append(self._store_judge_call)
        sem = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()
        ready.set()
        # This task runs in a context of its own (see _ensure_worker), so the run context is set and never reset:
        # a scorer dropped without close() lets its waiting task be collected without a reset in a foreign context.
        use_run_context(ctx).__enter__()
        while True:
            case = await self._queue.get()
            if case is None:
                break
            await sem.acquire()
            task = asyncio.create_task(self._score_guarded(case, sem))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _store_judge_call(self, event: dict[str, Any]) -> None:
        """Keep each judge call's usage (tokens, seconds, cache hit) with the capture's run in the store."""
        if self.store is not None and self._run_id is not None:
            self.store.save_judge_call(self._run_id, event)

    async def _score_guarded(self, case: CapturedCase, sem: asyncio.Semaphore) -> None:
        try:
            await self.score_case(case)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: scoring a captured case failed")
        finally:
            sem.release()
            with self._lock:
                self._pending -= 1
                self._idle.notify_all()

    def _applicable(self, case: CapturedCase) -> list[Any]:
        conv = isinstance(case.test_case, ConversationalTestCase)
        return [m for m in self.metrics if bool(getattr(m, "conversational", False)) == conv]

    async def score_case(self, case: CapturedCase) -> list[MetricResult]:
        """Score one case with every applicable metric; metrics missing a field are skipped, noted once."""

        async def one(metric: Any) -> MetricResult | None:
            try:
                return await metric.a_score(case.test_case)
            except MissingTestCaseParamsError as exc:
                key = (metric.name, ",".join(exc.fields))
                if key not in self._skip_noted:
                    self._skip_noted.add(key)
                    logger.info("contextjudge: %s skipped on captured cases that lack %s (pass goldens to fill "
                                "expected_output).", metric.name, ", ".join(exc.fields))
                return None
            except InvalidTestCaseError as exc:
                return MetricResult(name=metric.name, score=None, threshold=metric.threshold, success=False,
                                    error=str(exc), error_type=type(exc).__name__)

        results = [r for r in await asyncio.gather(*(one(m) for m in self._applicable(case))) if r is not None]
        with self._lock:
            case.results.extend(results)
        for r in results:
            if self.store is not None and self._run_id is not None:
                try:
                    self.store.save_result(self._run_id, case.case_id, r)
                except Exception:  # noqa: BLE001
                    logger.exception("contextjudge: could not write a result to the store")
            for cb in list(self.on_result):
                try:
                    cb(case, r)
                except Exception:  # noqa: BLE001
                    logger.exception("contextjudge: a result callback failed")
        return results

    # ----------------------------------------------------------------------------------------------- waiting
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted case is scored. Returns False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._handoff and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._hand_off)  # a batch waiting for its delay: hand it over now
            except RuntimeError:  # pragma: no cover - the worker's loop is closed
                pass
        with self._lock:
            while self._pending > 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async form of ``flush``: waits without blocking the caller's event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def score_deferred(self, **kwargs: Any) -> EvaluationResult:
        """Score the cases kept so far (in "deferred" or "off" mode) now, and attach the results to them."""
        from ._runner import evaluate  # noqa: PLC0415

        with self._lock:
            todo = [c for c in self.cases if not c.results]
        result = evaluate([c.test_case for c in todo], self.metrics, skip_on_missing_params=True, **kwargs)
        for case, tr in zip(todo, result.test_results):
            case.results.extend(tr.metrics_data)
            for r in tr.metrics_data:
                for cb in list(self.on_result):
                    try:
                        cb(case, r)
                    except Exception:  # noqa: BLE001
                        logger.exception("contextjudge: a result callback failed")
        return result

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush, then stop the scoring task (``timeout`` bounds both together)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(timeout)
        fut = self._worker_future
        if fut is not None and self._loop is not None and self._queue is not None:
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
                fut.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - the loop is closed, or the worker did not stop in time
                pass
        self._worker_future = None

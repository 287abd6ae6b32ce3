"""Mode "background": a task on the shared event loop scores the cases off the request path.

The app's thread appends a case to a deque under the session's lock and, at most once per batch, wakes the task with
``call_soon_threadsafe`` (after ``handoff_delay`` when set); the task scores up to ``concurrency`` cases at once.
The deque is bounded by ``max_queue``: when full, the oldest unscored case is dropped (and written to the store when
there is one), which ``asyncio.Queue`` cannot do.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable

from .._aio import submit
from ..judges import use_run_context
from ._case import CapturedCase
from ._kept import KeptCases
from ._mode import dropped_words, kept_where
from ._scoring import CaseScoring

__all__ = ["BackgroundScoring"]

logger = logging.getLogger("contextjudge")

# Held until the task ends (close()): a session dropped without close() keeps scoring what it was given instead of
# being collected with its cases mid-queue.
_live_tasks: set[concurrent.futures.Future] = set()


class BackgroundScoring:
    """Scores each case on the shared loop as it comes; the app never waits for a judge."""

    name = "background"
    handoff_delay_default = 0.0
    needs_max_kept_without_store = False

    def __init__(self, kept: KeptCases, scoring: CaseScoring, *, concurrency: int, handoff_delay: float,
                 owner: object = None) -> None:
        self.kept = kept
        # the session: held while the task runs (the task holds this object), so a session the app dropped without
        # close() still scores what it was given and is closed at exit
        self.owner = owner
        self.scoring = scoring
        self.concurrency = concurrency
        self.handoff_delay = handoff_delay
        self._queue: collections.deque[CapturedCase] = collections.deque()
        # cases being scored now, by id(); the value holds the case, so its id cannot be reused meanwhile
        self._scoring: dict[int, CapturedCase] = {}
        self._wake_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop = False
        self._future: concurrent.futures.Future | None = None
        kept.on_forget.append(self._discard)
        kept.busy = self._being_scored  # a case being scored is never evicted or dropped

    # ------------------------------------------------------------------------------------------ the app's thread
    def submit(self, case: CapturedCase) -> None:
        """Keep and queue ``case``; wake the task once a batch (always when it is not running)."""
        kept = self.kept
        kept.begin_run()  # with a store, the run exists from the first case on
        victims: list[CapturedCase] = []
        with kept.lock:
            kept.cases.append(case)
            self._queue.append(case)
            if len(self._queue) > kept.max_queue:
                victims.append(kept.drop(self._queue[0], "the scoring queue is full"))
            victims += kept.evict()
            wake = not self._wake_scheduled or not self._alive()
            if wake:
                self._wake_scheduled = True
        if victims and kept.store is not None:
            kept.store_later(victims)
        if wake:
            self.schedule_wake()

    def schedule_wake(self) -> None:
        """Wake the scoring task (started if need be), now or after ``handoff_delay``."""
        self._ensure_task()
        loop, wake = self._loop, self._wake
        assert loop is not None and wake is not None
        if self.handoff_delay <= 0:
            loop.call_soon_threadsafe(wake.set)
        else:
            loop.call_soon_threadsafe(loop.call_later, self.handoff_delay, wake.set)

    def _discard(self, case: CapturedCase) -> None:
        for i, queued in enumerate(self._queue):
            if queued is case:
                del self._queue[i]
                break

    def _alive(self) -> bool:
        fut = self._future
        return fut is not None and not fut.done()

    # ------------------------------------------------------------------------------------------ the task
    def _ensure_task(self) -> None:
        """Start the scoring task on the process-wide loop (``_aio``), where provider clients stay valid."""
        if self._alive():
            return
        with self.kept.lock:
            if self._alive():
                return
            ready = threading.Event()
            self._stop = False
            fut = self._future = submit(self._run(ready), context=contextvars.Context())
            _live_tasks.add(fut)
            fut.add_done_callback(_live_tasks.discard)
        ready.wait()

    async def _run(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()
        ready.set()
        # This task runs in a context of its own (see _ensure_task), so the run context is set and never reset.
        use_run_context(self.kept.run.context).__enter__()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                await slots.acquire()
                with self.kept.lock:
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
            with self.kept.lock:
                self._wake_scheduled = False  # the next case starts a task again

    async def _score_guarded(self, case: CapturedCase, slots: asyncio.Semaphore) -> None:
        try:
            await self.scoring.score(case)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: scoring a captured case failed")
        finally:
            slots.release()
            with self.kept.lock:
                self._scoring.pop(id(case), None)
                self.kept.changed.notify_all()

    # ------------------------------------------------------------------------------------------ waiting, ending
    def flush(self, deadline: float | None) -> bool:
        """Wake a batch waiting for its delay, then wait until every queued case is scored."""
        kept = self.kept
        with kept.lock:
            waiting = bool(self._queue)
        if waiting and self._loop is not None and self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # pragma: no cover - the loop is closed
                pass
        with kept.lock:
            while self._queue or self._scoring:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                kept.changed.wait(remaining)
        return True

    def wait_results(self, deadline: float | None) -> bool:
        """Results come as cases are scored: nothing more to wait for after ``flush``."""
        return True

    def close(self, timeout: float | None) -> None:
        """Stop the scoring task once it has scored what it holds (cancelled after ``timeout``)."""
        fut, loop, wake = self._future, self._loop, self._wake
        if fut is None or loop is None or wake is None:
            return
        self._stop = True
        try:
            loop.call_soon_threadsafe(wake.set)
            fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
        except Exception:  # noqa: BLE001 - the loop is closed, or the task ended with an error (logged)
            pass
        self._future = None

    def at_exit(self, left: Callable[[], float]) -> None:
        """Score what is pending within ``left()`` seconds, then stop the task."""
        self.flush(time.monotonic() + left())
        self.close(min(1.0, left()))

    def pending(self) -> int:
        """Cases queued or being scored."""
        with self.kept.lock:
            return len(self._queue) + len(self._scoring)

    def in_flight(self) -> set[int]:
        """The ``id()``s of the cases queued or being scored (lock held; they are held, so the ids stay theirs)."""
        return set(self._scoring) | {id(c) for c in self._queue}

    def _being_scored(self, case: CapturedCase) -> bool:
        return id(case) in self._scoring

    def check_score_deferred(self) -> None:
        """Scoring in process: allowed."""

    def keep_unscored(self) -> int:
        """Write the kept, unscored cases to the store; their count."""
        return self.kept.keep_unscored()

    def end_status(self, left: int) -> str:
        """"finished" when nothing of the run is left unscored, else "interrupted"."""
        return "interrupted" if left else "finished"

    def report(self, unscored: int, dropped: int, at_exit: bool) -> tuple[list[str], str | None]:
        """The cases not scored yet and those dropped."""
        parts = [f"{unscored} captured case(s) were not scored yet"] if unscored else []
        return parts + dropped_words(dropped), kept_where(self.kept)

"""Mode "worker": the app's process only writes the cases, with a queue row each, for a ``contextjudge worker``.

The app's thread appends the case to a bounded deque (the oldest dropped and counted when full). The
``contextjudge-writer`` daemon thread writes batches of cases with their queue rows in one transaction each
(``store.save_cases_queued``), at most every ``handoff_delay`` seconds or when a batch fills, and, while ``on_result``
callbacks listen, polls the store (``results_since``) and sends the worker's results back as events for the cases it
still holds (``ResultPoller``: at most ``max_kept`` cases, each for at most ``_HOLD_FOR`` seconds).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from .._result import MetricResult
from ..errors import ConfigurationError
from ._case import POSITION, STORED, CapturedCase, mark, marked
from ._kept import KeptCases

__all__ = ["ResultPoller", "WorkerWriter"]

logger = logging.getLogger("contextjudge")

_HOLD_FOR = 900.0  # seconds a written case waits for its results before it is forgotten
_POLL_OVERLAP = 5.0  # seconds of results read again at each poll (commits land out of order, and the workers' clocks
# differ): a case's results are sent once, when the case is first seen, and it is held no more


class ResultPoller:
    """The written cases held while their results may come back, and the polls of the store that bring them
    (only while ``on_result`` callbacks listen). Called from the writer thread, under the session's lock where
    noted."""

    def __init__(self, kept: KeptCases, poll_interval: float) -> None:
        self.kept = kept
        self.poll_interval = poll_interval
        self._held: dict[str, CapturedCase] = {}  # written cases awaiting their results, oldest first
        self._results_since = 0.0
        self._next_poll = 0.0

    def __len__(self) -> int:
        """How many written cases are held."""
        return len(self._held)

    def hold(self, cases: list[CapturedCase]) -> None:
        """Hold written cases (lock held) while someone listens, at most ``max_kept``; also kept in memory."""
        kept = self.kept
        if not kept.on_result:
            return
        for c in cases:
            kept.cases.append(c)
            self._held[c.case_id] = c
        while kept.max_kept is not None and len(self._held) > kept.max_kept:
            self._held.pop(next(iter(self._held)))
        if not self._next_poll:
            # the first poll reads the run's results from its start (the run is this session's own, so that is
            # little): the workers stamp results with their own clocks, which may be behind this host's
            self._next_poll = time.monotonic() + self.poll_interval

    def wait(self) -> float | None:
        """How long the idle writer sleeps: until the next poll while cases await results, else until woken."""
        with self.kept.lock:
            if not self._held or not self.kept.on_result:
                return None
        return max(0.0, self._next_poll - time.monotonic())

    def poll_if_due(self) -> None:
        """Poll the store when a poll is due; a failed poll is logged."""
        if not self._held or not self.kept.on_result or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + self.poll_interval
        try:
            self._poll()
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not read the worker's results from the store")

    def _poll(self) -> None:
        """Send the results a worker wrote for the cases this session still holds as ``on_result`` events."""
        kept = self.kept
        store, run_id = kept.store, kept.run.id
        if store is None or run_id is None:
            return
        rows = store.results_since(run_id, self._results_since)
        newest = self._results_since
        got: dict[str, list[MetricResult]] = {}
        with kept.lock:
            for key, result, created in rows:
                newest = max(newest, float(created))
                if key in self._held:
                    got.setdefault(key, []).append(result)
            # a case's results are written in one transaction, so a case seen here has all of them
            cases = [(self._held.pop(key), results) for key, results in got.items()]
            for case, results in cases:
                kept.record(case, results, received=True)
            stale = time.time() - _HOLD_FOR  # skipped by a budget, or no worker: stop waiting for it
            while self._held and next(iter(self._held.values())).captured_at < stale:
                self._held.pop(next(iter(self._held)))
            kept.changed.notify_all()
        self._results_since = max(self._results_since, newest - _POLL_OVERLAP)
        for case, results in cases:
            kept.emit(case, results)

    def wait_results(self, deadline: float | None, running: Callable[[], bool]) -> bool:
        """Wait until the results of every case held came back; False at ``deadline`` or when the writer is no
        longer ``running()`` (nothing polls any more)."""
        kept = self.kept
        with kept.lock:
            while self._held and kept.on_result:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if not running():
                    return False
                kept.changed.wait(remaining if remaining is None else min(remaining, self.poll_interval))
        return True


class WorkerWriter:
    """Writes captured cases to the store's queue from its own thread, and brings the workers' results back."""

    name = "worker"
    handoff_delay_default = 0.2
    needs_max_kept_without_store = False

    def __init__(self, kept: KeptCases, *, batch: int, handoff_delay: float, poll_interval: float,
                 owner: object = None) -> None:
        self.kept = kept
        # the session: held while the writer thread runs (it holds this object), so a session the app dropped
        # without close() still writes what it was given and is closed at exit
        self.owner = owner
        self.batch = batch
        self.handoff_delay = handoff_delay
        self.poll_interval = poll_interval
        self._outbox: collections.deque[CapturedCase] = collections.deque()  # waiting for the writer thread
        self._writing = 0  # cases the thread is writing now
        self._results = ResultPoller(kept, poll_interval)
        self._thread: threading.Thread | None = None
        self._running = False
        self._stop = False
        self._hurry = False
        self._wake = threading.Event()
        self._warned_write = False
        self._warned_drop = False

    @property
    def unwritten(self) -> int:
        """Cases handed over and not written yet."""
        with self.kept.lock:
            return len(self._outbox) + self._writing

    @property
    def held(self) -> int:
        """Written cases held while their results may come back."""
        with self.kept.lock:
            return len(self._results)

    # ------------------------------------------------------------------------------------------ the app's thread
    def submit(self, case: CapturedCase) -> None:
        """Append the case for the writer thread; nothing else."""
        kept = self.kept
        with kept.lock:
            self._outbox.append(case)
            n = len(self._outbox)
            if n > kept.max_queue:
                self._outbox.popleft()
                kept.counts.dropped += 1
                n -= 1
                if not self._warned_drop:
                    self._warned_drop = True
                    logger.warning(
                        "contextjudge: capture's writer is not keeping up with the store (more than max_queue=%d "
                        "cases wait to be written), so it drops the oldest unwritten ones: they are lost. Check "
                        "the store, or lower the traffic captured (sample_rate). session.counters['dropped'] "
                        "counts them; a summary is logged at close.", kept.max_queue)
            start = not self._running
            if start:
                self._running = True
                self._stop = False
            wake = n == 1 or n >= self.batch
        if start:
            self._start()
        elif wake:
            self._wake.set()

    def _start(self) -> None:
        thread = threading.Thread(target=self._main, name="contextjudge-writer", daemon=True)
        self._thread = thread
        try:
            thread.start()
        except RuntimeError:  # interpreter shutdown: no new threads; the exit hook writes what is queued
            with self.kept.lock:
                self._running = False

    # ------------------------------------------------------------------------------------------ the writer thread
    def _main(self) -> None:
        """Write the queued cases in batches (at most every ``handoff_delay``, sooner when a batch fills) and, while
        written cases await results and someone listens, poll the store for them."""
        wake, lock = self._wake, self.kept.lock
        try:
            while True:
                with lock:
                    waiting = len(self._outbox)
                    stop, hurry = self._stop, self._hurry
                    if not waiting and stop:  # decided under the lock: a case handed over now starts a writer
                        self._running = False
                        break
                if not waiting:
                    wake.wait(self._results.wait())
                    wake.clear()
                    self._results.poll_if_due()
                    continue
                if waiting < self.batch and not (stop or hurry) and self.handoff_delay > 0:
                    wake.clear()
                    wake.wait(self.handoff_delay)  # let the batch fill; set early when it is full, or to flush
                self._write_queued()
                self._results.poll_if_due()
        except Exception:  # noqa: BLE001 - never an unhandled exception in a thread of the user's app
            logger.exception("contextjudge: capture's writer thread failed; captured cases are no longer written")
        finally:
            with lock:
                self._running = False
                self.kept.changed.notify_all()

    def _write_queued(self) -> None:
        lock = self.kept.lock
        while True:
            with lock:
                take = [self._outbox.popleft() for _ in range(min(self.batch, len(self._outbox)))]
                self._writing += len(take)
            if not take:
                return
            try:
                self._write_batch(take)
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: could not write captured cases to the store")
            finally:
                with lock:
                    self._writing -= len(take)
                    self.kept.changed.notify_all()

    def _write_batch(self, cases: list[CapturedCase]) -> None:
        """Write cases and their queue rows in one transaction (``store.save_cases_queued``). A case the database
        refuses costs only itself (``isolate``: the batch is written again case by case): it is dropped, counted
        and named in the log; a batch that cannot be written at all (the store is down) is dropped and counted."""
        kept = self.kept
        ready = [c for c in cases if kept.prepare(c)]  # lazy ones are assembled (and sampled) here
        if not ready:
            return
        kept.begin_run()  # the run's config names the metrics and judge the worker uses
        store = kept.store
        error: BaseException | None = None
        refused: list[tuple[str, BaseException]] = []
        if store is None:  # the run could not start in the store (logged)
            error = ConfigurationError("the store could not be used")
        else:
            items = [(c.case_id, marked(c, POSITION, 0), c.test_case) for c in ready]
            try:
                refused = store.save_cases_queued(kept.run.id, items, isolate=True) or []
            except Exception as exc:  # noqa: BLE001 - capture never breaks the app over its store
                error = exc
        if error is not None:
            with kept.lock:
                kept.counts.dropped += len(ready)
                first, self._warned_write = not self._warned_write, True
            if first:
                logger.error("contextjudge: could not write %d captured case(s) for the worker to %r (%s: %s); "
                             "they are dropped and counted (session.counters['dropped']). Check the store.",
                             len(ready), store, type(error).__name__, error, exc_info=error)
            return
        if refused:
            lost = {key for key, _e in refused}
            with kept.lock:
                kept.counts.dropped += len(lost)
            for key, why in refused:  # each named: a case the database refused is never silently lost
                logger.error("contextjudge: the store %r refused captured case %s (%s: %s); the other cases of its "
                             "batch were written. It is dropped and counted (session.counters['dropped']).",
                             store, key, type(why).__name__, why)
            ready = [c for c in ready if c.case_id not in lost]
        with kept.lock:
            kept.counts.written += len(ready)
            for c in ready:
                mark(c, STORED)
            self._results.hold(ready)  # held (bounded) only so that its results can come back as events
            kept.evict()  # every held case is in the store: only forgotten, never dropped

    # ------------------------------------------------------------------------------------------ waiting, ending
    def flush(self, deadline: float | None) -> bool:
        """Wait until every queued case is written (or ``deadline``)."""
        lock, changed = self.kept.lock, self.kept.changed
        if threading.current_thread() is self._thread:  # an on_result callback calling flush: do not wait on itself
            return not self._outbox
        with lock:
            start = bool(self._outbox) and not self._running
            if start:
                self._running = True
                self._stop = False
            self._hurry = True
        if start:
            self._start()
        self._wake.set()
        try:
            with lock:
                while self._outbox or self._writing:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if (remaining is not None and remaining <= 0) or not self._running:
                        return False
                    changed.wait(remaining)
            return True
        finally:
            with lock:
                self._hurry = False

    def wait_results(self, deadline: float | None) -> bool:
        """Wait until the results of every case held came back from a worker (held only while ``on_result``
        callbacks listen); False at ``deadline`` or when the writer ended (nothing polls any more)."""
        return self._results.wait_results(deadline, lambda: self._running)

    def close(self, timeout: float | None) -> None:
        """End the writer thread once it has written what is queued (it goes on, a daemon, after ``timeout``)."""
        with self.kept.lock:
            self._stop = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def at_exit(self, left: Callable[[], float]) -> None:
        """Write what is queued within ``left()`` seconds, then end the thread."""
        self.flush(time.monotonic() + left())
        self.close(left())

    def pending(self) -> int:
        """No case waits for a judge in this process."""
        return 0

    def in_flight(self) -> set[int]:
        """No case is scored in this process."""
        return set()

    def check_score_deferred(self) -> None:
        """Scoring belongs to ``contextjudge worker``: refuse, saying what to do."""
        raise ConfigurationError("score_deferred() scores in this process, and this session (mode='worker') "
                                 "leaves scoring to `contextjudge worker`: run one on the session's store, or "
                                 "use mode='deferred' to score later in the app.")

    def keep_unscored(self) -> int:
        """The cases not written yet (the writer goes on with them after a timeout, until exit)."""
        return self.unwritten

    def end_status(self, left: int) -> str:
        """"finished" when a worker has done every case of the run, else "captured" (the cases wait in the store's
        queue; workers go on with them whatever the run's status)."""
        store, run_id = self.kept.store, self.kept.run.id
        try:
            counts = store.queue_counts(run_id) if store is not None else {}
        except Exception:  # noqa: BLE001
            return "captured"
        open_rows = sum(counts.get(k, 0) for k in ("queued", "claimed", "expired"))
        return "finished" if counts and not open_rows and not self.unwritten else "captured"

    def report(self, unscored: int, dropped: int, at_exit: bool) -> tuple[list[str], str | None]:
        """The cases not written yet and those dropped (lost), and where the written ones are."""
        parts = []
        if unscored:
            parts.append(f"{unscored} captured case(s) were not written to the store yet (the writer goes on with "
                         "them until the process exits)")
        if dropped:
            parts.append(f"{dropped} case(s) were dropped (lost: not written for a worker; max_queue or a store that "
                         "failed)")
        kept = self.kept
        return parts, (f"{kept.counts.written} case(s) were written to run {kept.run.id} of {kept.store!r} for "
                       "`contextjudge worker`; session.counters has the counts")

"""The cases a session holds in memory, what became of every case (the counters), and the store writes they share.

One ``KeptCases`` per session, shared by the session and its mode object: one lock (``lock``) and one condition
(``changed``, notified whenever a case is forgotten, scored or written) guard the list, the counters and each mode's
own queue, so a case moves between them in one step. Memory is bounded by ``max_kept``: cases that are scored or
safely in the store are forgotten first, then the oldest unscored ones, which are dropped and counted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from .._aio import in_store_thread, submit
from .._result import MetricResult
from ..engine import Run
from ._case import DONE, POSITION, SAMPLED, STORED, CapturedCase, ResultCallback, mark, marked

__all__ = ["Counts", "KeptCases"]

logger = logging.getLogger("contextjudge")


@dataclasses.dataclass
class Counts:
    """What became of the cases a session was given (see ``CaptureSession.counters``)."""

    seen: int = 0
    sampled: int = 0  # cases the sampling let through (every case, without sampling)
    unsampled: int = 0  # cases the draw left out: not kept, queued, stored or judged
    filtered: int = 0  # cases a sampling filter left out (retriever, chain, tags, metadata)
    judged: int = 0  # cases scored by this session (mode "worker": whose results came back to it)
    skipped_budget: int = 0  # cases not judged because the judge budget was spent
    dropped: int = 0  # unscored cases dropped (lost without a store; unscored in it with one)
    written: int = 0  # mode "worker": cases written to the store with their queue rows
    results_received: int = 0  # results that reached this session (its own scoring's, or a worker's in mode "worker")
    roots: int = 0  # the app's top-level calls an integration saw end
    roots_without_retrieval: int = 0  # those in which no retrieval was captured
    escaped: int = 0  # cases whose text held characters no store takes (lone surrogates, NUL), kept escaped
    evicted: int = 0  # scored or stored cases forgotten from memory (nothing lost)
    evicted_unscored: int = 0  # stored cases forgotten from memory before they were scored
    backlog: int = 0  # this run's unscored cases only the store holds (dropped or evicted), with a store

    PUBLIC = ("seen", "sampled", "unsampled", "filtered", "judged", "skipped_budget", "dropped", "written",
              "results_received", "roots", "roots_without_retrieval", "escaped")

    def public(self) -> dict[str, int]:
        """The counters a session reports, by name."""
        return {k: getattr(self, k) for k in self.PUBLIC}


class KeptCases:
    """The captured cases held in memory, oldest first, with the session's run, counters and result callbacks.

    ``busy(case)`` (set by the mode) says whether a case is waiting for or being scored, so it is neither evicted
    nor scored twice; ``on_forget`` callbacks take a forgotten case out of a mode's own queue (lock held).
    """

    def __init__(self, run: Run, metrics: list[Any], *, max_kept: int | None, max_queue: int) -> None:
        self.run = run
        self.metrics = metrics
        self.max_kept = max_kept
        self.max_queue = max_queue
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.cases: list[CapturedCase] = []
        self.counts = Counts()
        self.on_result: list[ResultCallback] = []
        self.on_forget: list[Callable[[CapturedCase], Any]] = []
        self.busy: Callable[[CapturedCase], bool] = lambda case: False
        self.warned_drop = False

    @property
    def store(self) -> Any:
        """The session's store (None without one, or when the run could not start in it)."""
        return self.run.store

    def begin_run(self) -> None:
        """Begin the session's run when it has not begun (or was ended): with a store, the run exists from then."""
        if not self.run.begun or self.run.ended:
            self.run.begin(self.metrics)

    # ------------------------------------------------------------------------------------------ one case
    def prepare(self, case: CapturedCase) -> bool:
        """Assemble a lazily built case (its sampling is decided and its goldens matched then); False, and the case
        is forgotten, when its assembly failed or the sampling left it out."""
        if case.assemble() and marked(case, SAMPLED) is not False:
            return True
        with self.lock:
            self.forget(case)
        return False

    def store_case(self, case: CapturedCase) -> None:
        """Write ``case`` to the store (unscored), once it is assembled; nothing without a store."""
        if self.store is None or not self.prepare(case):
            return
        self.run.begin(self.metrics)
        self.run.save_case(case.case_id, marked(case, POSITION, 0), case.test_case)
        mark(case, STORED)

    def store_later(self, cases: list[CapturedCase]) -> None:
        """Write dropped cases to the store off the app's thread (they are unscored: `contextjudge score` finishes
        them). They are held only until written."""
        todo = [c for c in cases if not marked(c, STORED)]
        if not todo:
            return

        def write_all() -> None:
            for c in todo:
                self.store_case(c)

        async def write() -> None:
            await in_store_thread(write_all)

        try:
            submit(write())
        except Exception:  # noqa: BLE001 - the loop is gone (interpreter exit): write them here
            for c in todo:
                self.store_case(c)

    def record(self, case: CapturedCase, results: list[MetricResult], *, received: bool = False) -> None:
        """Record ``case``'s results on it and count it and them (lock held); mode "worker": ``received`` from a
        worker."""
        case.results.extend(results)
        mark(case, DONE)
        self.counts.judged += 1
        self.counts.results_received += len(results)
        self.changed.notify_all()

    def scored(self, case: CapturedCase, results: list[MetricResult]) -> None:
        """Record ``case``'s results and send them to ``on_result``."""
        with self.lock:
            self.record(case, results)
        self.emit(case, results)

    def emit(self, case: CapturedCase, results: list[MetricResult]) -> None:
        """Call every ``on_result`` callback with each result; a callback that raises is logged."""
        for r in results:
            for cb in list(self.on_result):
                try:
                    cb(case, r)
                except Exception:  # noqa: BLE001
                    logger.exception("contextjudge: a result callback failed")

    # ------------------------------------------------------------------------------------------ memory
    def keep(self, case: CapturedCase) -> list[CapturedCase]:
        """Hold ``case`` (lock held); returns the unscored cases dropped to make room, to write to the store."""
        self.cases.append(case)
        return self.evict()

    def forget(self, case: CapturedCase) -> None:
        """Take ``case`` out of memory and out of the mode's queue (lock held)."""
        self.cases = [c for c in self.cases if c is not case]
        for hook in self.on_forget:
            hook(case)
        self.changed.notify_all()

    def drop(self, case: CapturedCase, why: str) -> CapturedCase:
        """Drop an unscored case from memory (lock held) and count it; returns it, for the caller to write to the
        store (after the lock is released) when there is one."""
        self.forget(case)
        self.counts.dropped += 1
        if self.store is not None:
            self.counts.backlog += 1
        if not self.warned_drop:
            self.warned_drop = True
            where = (f"they stay unscored in run {self.run.id} of the store (`contextjudge score` finishes them)"
                     if self.store is not None else "they are lost (pass store=... to keep them)")
            logger.warning("contextjudge: %s, so capture is dropping its oldest unscored cases (max_kept=%s, "
                           "max_queue=%d): %s. The judge is not keeping up: check it, or lower the traffic "
                           "captured. session.dropped counts them; a summary is logged at close.",
                           why, self.max_kept, self.max_queue, where)
        return case

    def evict(self) -> list[CapturedCase]:
        """Hold at most ``max_kept`` cases (lock held): forget scored or stored ones first, then the oldest
        unscored ones (dropped and counted). Evicts a tenth of ``max_kept`` at a time, so a full session does not
        rebuild its list on every case."""
        if self.max_kept is None or len(self.cases) <= self.max_kept:
            return []
        target = len(self.cases) - self.max_kept + (self.max_kept // 10)
        keep: list[CapturedCase] = []
        removed = 0
        for c in self.cases:
            done, stored = marked(c, DONE), marked(c, STORED)
            if removed < target and (done or stored) and not self.busy(c):
                removed += 1
                self.counts.evicted += 1
                if not done:
                    self.counts.evicted_unscored += 1
                    self.counts.backlog += 1
                continue
            keep.append(c)
        self.cases = keep
        over = len(self.cases) - self.max_kept
        if over > 0:
            victims = [c for c in self.cases if not self.busy(c)][:over]
            return [self.drop(c, f"more than max_kept={self.max_kept} captured cases are unscored") for c in victims]
        return []

    def run_summary(self) -> tuple[dict[str, Any], int]:
        """The summary the run ends with (counts, usage, each metric's mean, errors, judges), and how many cases of
        the run are left unscored (in memory, or only in the store)."""
        with self.lock:
            cases = list(self.cases)
            unscored = sum(1 for c in cases if not marked(c, DONE))
            counts = self.counts
            summary: dict[str, Any] = {"captured": counts.seen, "unscored_in_memory": unscored,
                                       "unscored_in_store_only": counts.backlog, "dropped": counts.dropped,
                                       "evicted": counts.evicted, "usage": self.run.context.usage.to_dict(),
                                       "counters": counts.public()}
            left = unscored + counts.backlog
        results = [r for c in cases for r in c.results]
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
        return summary, left

    def unscored(self) -> list[CapturedCase]:
        """The kept cases not scored yet."""
        with self.lock:
            return [c for c in self.cases if not marked(c, DONE)]

    def keep_unscored(self) -> int:
        """Write every kept, unscored case to the store (so ``contextjudge score`` can finish it); their count."""
        unscored = self.unscored()
        if self.store is not None:
            for c in unscored:
                if not marked(c, STORED):
                    try:
                        self.store_case(c)
                    except Exception:  # noqa: BLE001
                        logger.exception("contextjudge: could not keep a captured case in the store")
        return len(unscored)

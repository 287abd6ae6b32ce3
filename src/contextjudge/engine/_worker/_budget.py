"""The cases a spent budget set aside (``_SetAside``): the warning once per window, and, with
``Worker(requeue_skipped=True)``, queueing them again once the window that set them aside has ended."""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger("contextjudge")


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

    def queue_again(self, worker: Any, first: bool = False) -> None:
        """With ``requeue_skipped``: queue ``worker``'s set-aside cases again, once the window that set them aside
        has ended (and at start, when the budget has room)."""
        run = worker._run
        if run is None or not self.due(first) or run.context.budget_blocked() is not None:
            return
        self.until = None
        try:
            n = worker.store.requeue_skipped(worker.run_id, reason="budget")
        except Exception:  # noqa: BLE001 - tried again when the next window opens
            logger.warning("contextjudge: could not queue the budget-skipped cases again", exc_info=True)
            return
        if n:
            worker.counts.requeued += n
            worker._say(f"worker {worker.owner}: the budget has room again; {n} case(s) it had set aside are queued "
                        "again")

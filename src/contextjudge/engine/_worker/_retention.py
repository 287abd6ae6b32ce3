"""A worker's retention thread (``contextjudge-retention``): the store's retention setting applied while it works."""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger("contextjudge")


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

"""The cases a worker holds, and the heartbeat thread (``contextjudge-heartbeat``) that renews their leases."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...store import ResultsStore

logger = logging.getLogger("contextjudge")


class _Leases:
    """The cases a worker holds (claimed, and neither completed nor given back) and the heartbeat that renews their
    leases every third of the lease, handing the ones another worker took to ``on_lost`` (from its thread)."""

    def __init__(self, store: ResultsStore, owner: str, lease: float) -> None:
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

"""The verdict cache: verdicts by (judge identity, rendered prompt, request content), a bounded LRU in memory,
optionally backed by the results store.

The judge client reads and writes it with ``aget`` / ``aput``: a memory hit is answered at once, and the backing
store is read and written in the store's threads (``_aio.in_store_thread``), so the event loop never waits on it.
``get`` / ``put`` are the same for code that is not on a loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from collections import OrderedDict
from typing import Any, Protocol

from .._aio import in_store_thread

__all__ = ['CacheBackend', 'VerdictCache']

logger = logging.getLogger("contextjudge")


class CacheBackend(Protocol):
    """Where verdicts persist across runs (the results store implements it)."""

    def get_verdict(self, key: str) -> dict[str, Any] | None:
        """The verdicts stored under ``key``, or None."""

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` under ``key``."""


class VerdictCache:
    """Verdicts by (judge identity, rendered prompt, request content); in memory, optionally backed by a store.

    The memory part is a bounded LRU (``max_entries``, default 4096) so a long run or a long-lived capture process
    does not grow with every judge call: reuse happens between the metrics of one case and between cases in flight
    together, well inside the bound, and a backing store keeps everything for later runs. Entries are held pickled,
    which keeps their many small dicts away from the garbage collector; ``get`` returns a fresh copy.
    """

    def __init__(self, backend: CacheBackend | None = None, max_entries: int = 4096) -> None:
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self.backend = backend
        self.max_entries = max(1, int(max_entries))

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached verdicts of ``key`` (a fresh copy), from memory or the backing store; None on a miss."""
        hit = self._hit(key)
        if hit is not None:
            return hit
        if self.backend is not None:
            hit = self.backend.get_verdict(key)
            if hit is not None:
                return pickle.loads(self._remember(key, hit))  # noqa: S301 - a copy, whatever the backend keeps
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Remember ``value`` for ``key``, and write it to the backing store."""
        self._remember(key, value)
        if self.backend is not None:
            self.backend.put_verdict(key, value)

    def _hit(self, key: str) -> dict[str, Any] | None:
        packed = self._mem.get(key)
        if packed is None:
            return None
        self._mem.move_to_end(key)
        return pickle.loads(packed)  # noqa: S301 - our own bytes

    async def aget(self, key: str) -> dict[str, Any] | None:
        """``get`` for a coroutine: the backing store is read in the store's threads, never on the loop."""
        hit = self._hit(key)
        if hit is not None or self.backend is None:
            return hit
        stored = await in_store_thread(self.backend.get_verdict, key)
        if stored is not None:
            return pickle.loads(self._remember(key, stored))  # noqa: S301 - a copy, whatever the backend keeps
        # a call for the same key may have finished and been remembered while the store was read
        return self._hit(key)

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        """``put`` for a coroutine: remembered at once, written to the backing store in the store's threads."""
        self._remember(key, value)
        backend = self.backend
        if backend is not None:
            await in_store_thread(backend.put_verdict, key, value)

    def _remember(self, key: str, value: dict[str, Any]) -> bytes:
        packed = self._mem[key] = pickle.dumps(value, 5)
        self._mem.move_to_end(key)
        while len(self._mem) > self.max_entries:
            self._mem.popitem(last=False)
        return packed

    def __len__(self) -> int:
        return len(self._mem)


def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        # surrogatepass: a lone surrogate in an end user's text hashes (as itself) instead of failing the case; every
        # other text hashes exactly as plain UTF-8, so the keys of existing caches are unchanged
        h.update(p.encode("utf-8", "surrogatepass") if isinstance(p, str) else
                 json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()

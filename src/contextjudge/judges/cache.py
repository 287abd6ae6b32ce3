"""The verdict cache: verdicts by (judge identity, rendered prompt, request content), a bounded LRU in memory,
optionally backed by the results store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from collections import OrderedDict
from typing import Any, Protocol

__all__ = ['CacheBackend', 'VerdictCache']

logger = logging.getLogger("contextjudge")


class CacheBackend(Protocol):
    """Where verdicts persist across runs (the results store implements it)."""

    def get_verdict(self, key: str) -> dict[str, Any] | None: ...

    def put_verdict(self, key: str, value: dict[str, Any]) -> None: ...


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
        packed = self._mem.get(key)
        if packed is not None:
            self._mem.move_to_end(key)
            return pickle.loads(packed)  # noqa: S301 - our own bytes
        if self.backend is not None:
            hit = self.backend.get_verdict(key)
            if hit is not None:
                return pickle.loads(self._remember(key, hit))  # noqa: S301 - a copy, whatever the backend keeps
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._remember(key, value)
        if self.backend is not None:
            self.backend.put_verdict(key, value)

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
        h.update(p.encode() if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()

"""A bounded, thread-safe LRU in front of the model, whose misses are computed in few large batches.

Concurrent callers' misses are computed together: callers queue what they miss, and whoever gets the model next
computes everything queued (a group commit), so the model sees larger batches and no pair is read twice. The metrics
of one case ask about the same (question, node) pairs, and a node shared by turns or runs is read once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

__all__ = ["BatchCache"]


class BatchCache:
    def __init__(self, compute: Callable[[list[Any]], Sequence[Any]], maxsize: int = 100_000) -> None:
        self._compute_fn = compute
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._pending: dict[Hashable, None] = {}  # misses waiting for the model, in arrival order
        self._lock = threading.Lock()
        self._compute = threading.Lock()  # one caller runs the model at a time
        self.computed = 0  # keys actually sent to the model
        self.calls = 0

    def _get(self, key: Hashable) -> Any:
        with self._lock:
            v = self._data.get(key)
            if v is not None:
                self._data.move_to_end(key)
            return v

    def _put(self, key: Hashable, v: Any) -> None:
        with self._lock:
            self._data[key] = v
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def get_many(self, keys: Sequence[Hashable]) -> dict[Hashable, Any]:
        """The values of ``keys``, computing what is missing."""
        found: dict[Hashable, Any] = {}
        missing = []
        for k in dict.fromkeys(keys):
            v = self._get(k)
            if v is None:
                missing.append(k)
            else:
                found[k] = v
        if not missing:
            return found
        with self._lock:
            for k in missing:
                self._pending[k] = None
        with self._compute:
            with self._lock:
                take = [k for k in self._pending if k not in self._data]
                self._pending.clear()
            mine = self._run(take) if take else {}
        for k in missing:
            v = mine.get(k)
            if v is None:
                v = self._get(k)  # computed by the caller that took our queue
            if v is not None:
                found[k] = v
        rest = [k for k in missing if k not in found]
        if rest:  # the caller that took them failed, or they were evicted already: compute them ourselves
            with self._compute:
                found.update(self._run(rest))
        return found

    def _run(self, keys: list[Hashable]) -> dict[Hashable, Any]:
        values = self._compute_fn(keys)
        self.computed += len(keys)
        self.calls += 1
        out = {}
        for k, v in zip(keys, values):
            self._put(k, v)
            out[k] = v
        return out

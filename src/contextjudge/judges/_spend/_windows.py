"""Spend windows: calendar windows in UTC, this process's windows when no store keeps them (``MemorySpend``), the
tokens this process's calls in flight hold per window, and reads and writes of a store's windows off the event loop."""

from __future__ import annotations

import datetime as _dt
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._limits import DAY

if TYPE_CHECKING:
    from ...store import SpendWindows

__all__ = ["IN_FLIGHT", "MemorySpend", "PROCESS_SPEND", "off_loop", "utc_time", "warn_once", "window_start"]

logger = logging.getLogger("contextjudge")


def window_start(now: float, length: float) -> float:
    """The start of the calendar window (UTC) of ``length`` seconds that holds ``now``."""
    return float(int(now // length) * int(length))


def utc_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


class MemorySpend:
    """The spend windows of one process (``spend_reserve``/``spend_adjust``/``spend_get`` as the store has them),
    for ledgers without a store. Old windows are forgotten after two days."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, float], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _row(self, scope: str, window: float) -> dict[str, Any]:
        row = self._rows.get((scope, window))
        if row is None:
            if len(self._rows) > 256:
                newest = max(w for _, w in self._rows)
                for k in [k for k in self._rows if k[1] < newest - 2 * DAY]:
                    del self._rows[k]
            row = self._rows[(scope, window)] = {"tokens": 0, "dollars": 0.0, "calls": 0, "refused": 0}
        return row

    def spend_reserve(self, scope: str, window: float, *, tokens: int, dollars: float = 0.0,
                      max_tokens: int | None = None, max_dollars: float | None = None, calls: int = 0,
                      max_calls: int | None = None, count_refusal: bool = True) -> bool:
        """Add to the window's row unless a limit would be passed (then count a refusal, unless ``count_refusal``
        is False); whether it was added."""
        with self._lock:
            row = self._row(scope, window)
            if ((max_tokens is not None and row["tokens"] + tokens > max_tokens)
                    or (max_dollars is not None and row["dollars"] + dollars > max_dollars + 1e-12)
                    or (max_calls is not None and row["calls"] + calls > max_calls)):
                if count_refusal:
                    row["refused"] += 1
                return False
            row["tokens"] += tokens
            row["dollars"] += dollars
            row["calls"] += calls
            return True

    def spend_adjust(self, scope: str, window: float, *, tokens: int = 0, dollars: float = 0.0,
                     calls: int = 0) -> None:
        """Add (or, negative, take back) tokens, dollars and calls in the window's row, with no limit."""
        with self._lock:
            row = self._row(scope, window)
            row["tokens"] += tokens
            row["dollars"] += dollars
            row["calls"] += calls

    def spend_get(self, scope: str, window: float) -> dict[str, Any] | None:
        """A copy of the window's row (tokens, dollars, calls, refused), or None when nothing was spent in it."""
        with self._lock:
            row = self._rows.get((scope, window))
            return None if row is None else dict(row)


PROCESS_SPEND = MemorySpend()
# (scope, window) pairs already warned about, so a spent window is said once per process
_WARNED: set[tuple[str, float]] = set()
_WARNED_LOCK = threading.Lock()


def warn_once(scope: str, window: float, message: str) -> None:
    with _WARNED_LOCK:
        if (scope, window) in _WARNED:
            return
        _WARNED.add((scope, window))
    logger.warning("contextjudge: %s", message)


class _InFlight:
    """The reservations of this process not settled yet, per (store, window row), and a count of settlements: a
    reservation that finds no room waits while any are in flight (they give back what they did not use) and tries
    again each time one settles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, str, float], int] = {}
        self.settled = 0

    def add(self, store: SpendWindows, windows: list[tuple[str, float]], n: int) -> None:
        with self._lock:
            for scope, start in windows:
                key = (id(store), scope, start)
                left = self._held.get(key, 0) + n
                if left > 0:
                    self._held[key] = left
                else:
                    self._held.pop(key, None)
            if n < 0:
                self.settled += 1

    def held(self, store: SpendWindows, scope: str, start: float) -> int:
        with self._lock:
            return self._held.get((id(store), scope, start), 0)


IN_FLIGHT = _InFlight()


async def off_loop(store: SpendWindows, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a read or write of ``store``'s spend windows: in the store's threads when the store is a
    database (``_aio.in_store_thread``: the event loop never waits on it), at once when it is this process's memory
    (``MemorySpend``)."""
    if isinstance(store, MemorySpend):
        return fn(*args)
    from ..._aio import in_store_thread  # noqa: PLC0415

    return await in_store_thread(fn, *args)


if TYPE_CHECKING:  # mypy checks here that MemorySpend satisfies the store's SpendWindows Protocol
    def _satisfied(memory: MemorySpend) -> SpendWindows:
        return memory

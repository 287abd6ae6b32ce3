"""Adaptive concurrency: the judge calls in flight per judge model, an AIMD limit that halves when the provider
says "too many requests" (HTTP 429) and grows back by one after enough successes.

One limiter per judge model and event loop (``RunContext.limiter``). A call holds a slot only while an attempt is
on the wire: a rate-limited attempt gives its slot back for its backoff, so the calls the provider sees in flight
really do drop to the new limit. A limit is halved once per congestion event (the 429s of calls that started before
the last decrease do not halve it again), and after a decrease it grows back to one below the limit that was
throttled quickly, but past that only after ``probe_after`` seconds without a 429: a provider's limits are per
minute, so probing past the last known ceiling right away would only earn the next 429.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AdaptiveLimiter", "is_rate_limited"]


def is_rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is the provider saying "too many requests" (HTTP 429, or an SDK's rate-limit error)."""
    from ._retry import status_of  # noqa: PLC0415

    if status_of(exc) == 429:
        return True
    names = " ".join(c.__name__ for c in type(exc).__mro__).lower()
    return "ratelimit" in names


class AdaptiveLimiter:
    """An asyncio limit on calls in flight that adapts to a provider's rate limit (AIMD). Not thread-safe: one per
    event loop."""

    def __init__(self, limit: int, *, name: str = "", min_limit: int = 1, grow_after: int | None = None,
                 probe_after: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.max_limit = max(1, int(limit))
        self.min_limit = max(1, min(int(min_limit), self.max_limit))
        self.limit = self.max_limit
        self.grow_after = grow_after
        self.probe_after = float(probe_after)
        self.clock = clock
        self.inflight = 0
        self.peak_inflight = 0
        self.throttled = 0         # 429s seen
        self.decreases = 0
        self.increases = 0
        self.lowest = self.max_limit
        self._generation = 0
        self._successes = 0
        self._ceiling = self.max_limit   # grow past this only after probe_after seconds without a 429
        self._last_throttle: float | None = None
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    def __repr__(self) -> str:
        return f"AdaptiveLimiter({self.name!r}, limit={self.limit}/{self.max_limit}, inflight={self.inflight})"

    # ------------------------------------------------------------------------------------------ slots
    async def acquire(self) -> int:
        """Wait for a slot; returns the generation it was taken in (for ``throttle``)."""
        if not self._waiters and self.inflight < self.limit:
            self._take()
            return self._generation
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the slot was handed over as we were cancelled: pass it on
                self.release()
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return self._generation

    def _take(self) -> None:
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)

    def release(self) -> None:
        """Give a slot back and hand it to the longest waiter."""
        self.inflight -= 1
        self._wake()

    def _wake(self) -> None:
        # slots are handed to waiters in order, so a new caller never overtakes one that waits
        while self._waiters and self.inflight < self.limit:
            fut = self._waiters.popleft()
            if not fut.done():
                self._take()
                fut.set_result(None)

    def slot(self) -> _Slot:
        """``async with limiter.slot() as s:`` holds a slot; ``s.throttle()`` after a 429, ``s.ok()`` after a
        success."""
        return _Slot(self)

    # ------------------------------------------------------------------------------------------ AIMD
    def success(self) -> None:
        """A call succeeded: after enough in a row, raise the limit by one (past the last throttle only later)."""
        self._successes += 1
        if self.limit >= self.max_limit:
            return
        need = self.grow_after or max(4, self.limit)
        if self._successes < need:
            return
        if self.limit + 1 > self._ceiling:
            if self._last_throttle is not None and self.clock() - self._last_throttle < self.probe_after:
                return
            self._ceiling = self.max_limit
        self._successes = 0
        self.limit += 1
        self.increases += 1
        self._wake()

    def throttle(self, generation: int | None = None) -> None:
        """A 429: halve the limit, unless a decrease already followed the call's start (same congestion)."""
        self.throttled += 1
        self._successes = 0
        self._last_throttle = self.clock()
        if generation is not None and generation != self._generation:
            return
        was = self.limit
        self.limit = max(self.min_limit, was // 2)
        self._ceiling = max(self.limit, was - 1)
        self.lowest = min(self.lowest, self.limit)
        self._generation += 1
        if self.limit < was:
            self.decreases += 1

    def stats(self) -> dict[str, Any]:
        """The limiter's counters as a dict (limit, lowest, peak in flight, throttles, decreases, increases)."""
        return {"limit": self.limit, "max": self.max_limit, "lowest": self.lowest, "inflight": self.inflight,
                "peak_inflight": self.peak_inflight, "throttled": self.throttled, "decreases": self.decreases,
                "increases": self.increases}


class _Slot:
    def __init__(self, limiter: AdaptiveLimiter) -> None:
        self.limiter = limiter
        self.generation = 0
        self._done = False

    async def __aenter__(self) -> _Slot:
        self.generation = await self.limiter.acquire()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.limiter.release()

    def ok(self) -> None:
        if not self._done:
            self._done = True
            self.limiter.success()

    def throttle(self) -> None:
        if not self._done:
            self._done = True
            self.limiter.throttle(self.generation)

"""``RateGate``: waits until a ``RateLimit``'s current minute has room for one more call, then takes it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._limits import MINUTE, RateLimit
from ._windows import PROCESS_SPEND, off_loop, window_start

if TYPE_CHECKING:
    from ...store import SpendWindows

__all__ = ["RateGate"]


class RateGate:
    """Waits until a ``RateLimit``'s current minute has room for one more call, then takes it."""

    def __init__(self, limit: RateLimit, *, store: SpendWindows | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[Any]] | None = None) -> None:
        self.limit = limit
        self.store: SpendWindows = store if store is not None else PROCESS_SPEND
        self.clock = clock
        self._sleep = sleep
        self.waits = 0
        self.waited = 0.0
        self.scope = f"rate:{limit.name}"

    def try_take(self, tokens: int) -> tuple[bool, float, float]:
        """Take room for one call of ``tokens`` in this minute: (taken, window start, when the next one starts)."""
        now = self.clock()
        start = window_start(now, MINUTE)
        tpm = self.limit.tokens_per_minute
        # a call larger than the whole minute's allowance counts as the allowance, else it would wait forever
        held = min(int(tokens), tpm) if tpm is not None else int(tokens)
        ok = self.store.spend_reserve(self.scope, start, tokens=held, max_tokens=tpm, calls=1,
                                      max_calls=self.limit.requests_per_minute)
        return ok, start, start + MINUTE

    async def acquire(self, tokens: int) -> tuple[float, int]:
        """Wait for room and take it; returns the (window, tokens) held, for ``adjust``."""
        import asyncio  # noqa: PLC0415
        import random  # noqa: PLC0415

        sleep = self._sleep or asyncio.sleep
        while True:
            ok, start, nxt = await off_loop(self.store, self.try_take, tokens)
            if ok:
                tpm = self.limit.tokens_per_minute
                return start, (min(int(tokens), tpm) if tpm is not None else int(tokens))
            delay = max(0.0, nxt - self.clock()) + random.uniform(0.0, 0.05)  # noqa: S311 - spreads the wake-ups
            self.waits += 1
            self.waited += delay
            await sleep(delay)

    def adjust(self, start: float, held: int, used: int) -> None:
        """Count a call's real tokens instead of its estimate in the minute it was taken in."""
        if used > 0 and used != held:
            self.store.spend_adjust(self.scope, start, tokens=used - held)

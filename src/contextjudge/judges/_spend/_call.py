"""``CallSpend``: one judge's ledger and rate gate as the judge client uses them around each call (estimate, take
before it is sent, settle after), and the ``Hold`` one call keeps meanwhile."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._ledger import BudgetLedger, Refusal, Reservation, tokens_of
from ._rate import RateGate
from ._sizes import ANSWER_SIZES
from ._tokens import output_estimate, prompt_tokens
from ._windows import IN_FLIGHT, off_loop, window_start

__all__ = ["CallSpend", "Hold", "MAX_BUDGET_WAIT"]


# a reservation with no room waits for the calls in flight to settle; this long with none settling, it is refused
MAX_BUDGET_WAIT = 600.0


@dataclass
class Hold:
    """What one judge call holds: its budget reservation and its rate-limit room; ``cap``: the answer cap the request
    must be sent with (the answer tokens reserved, when less than the judge's own cap), else None."""

    reservation: Reservation | None = None
    rate: tuple[float, int] | None = None
    estimate: int = 0
    done: bool = False
    cap: int | None = None


class CallSpend:
    """One judge's budget ledger and rate gate as the judge client uses them around each call: estimate, take
    (before the call is sent), settle (after it). A ledger or gate on a store is read and written off the event
    loop."""

    def __init__(self, ledger: BudgetLedger | None, gate: RateGate | None, *, model_name: str | None,
                 max_output_tokens: int | None = None) -> None:
        self.ledger = ledger
        self.gate = gate
        self.model_name = model_name
        self.max_output_tokens = max_output_tokens

    def estimate(self, messages: str | Sequence[Any], task: str | None, items: int, schema_tokens: int = 0
                 ) -> tuple[int, int]:
        """The (input, output) tokens a call of these messages is expected to take, reserved before it is sent: the
        input is the messages as the provider bills them (``prompt_tokens``: their text and the chat format's tokens)
        and ``schema_tokens``, the structured-output answer schema the request carries (``response_format`` or
        tools; ``judges._structured.sent_schema_tokens``), which providers bill as input too."""
        return (prompt_tokens(messages, self.model_name) + int(schema_tokens),
                output_estimate(task, items, self.max_output_tokens))

    def sized(self, judge: str, task: str | None, items: int, input_tokens: int, output_tokens: int,
              at_least: int | None = None) -> tuple[int, int] | None:
        """The smaller call (prompt tokens, answer cap) a call may reserve, and be sent with that cap, when its
        whole answer cap has no room: what this judge's calls to the task really take (``ANSWER_SIZES``), the answer
        at least ``at_least``; None when not known yet, not smaller, or no token or dollar budget is kept for this
        judge (nothing to size)."""
        led = self.ledger
        if (led is None or not led.billable or not self.max_output_tokens
                or not (led.budget.has_token_limit or led.budget.has_dollar_limit)):
            return None
        size = ANSWER_SIZES.size(judge, task, items, input_tokens)
        if size is None:
            return None
        prompt, answer = size[0], max(size[1], at_least or 0)
        return (prompt, answer) if answer < output_tokens else None

    async def take(self, input_tokens: int, output_tokens: int, sized: tuple[int, int] | None = None) -> Hold:
        """Reserve the call in the budget and take room in the rate limit (waiting for it); the hold to settle.
        ``sized``: the (prompt, answer) to reserve instead when the whole answer cap has no room; the request is
        then sent with that answer as its cap (``hold.cap``)."""
        hold = Hold(estimate=input_tokens + output_tokens)
        if self.ledger is not None:
            tries = [(input_tokens, output_tokens)] + ([sized] if sized is not None else [])
            hold.reservation = await self._reserve(self.ledger, tries)
            if hold.reservation.output_tokens < output_tokens:
                hold.cap = hold.reservation.output_tokens
                hold.estimate = hold.reservation.input_tokens + hold.cap
        if self.gate is not None:
            try:
                hold.rate = await self.gate.acquire(hold.estimate)
            except BaseException:
                if hold.reservation is not None:
                    await off_loop(self.ledger.store, self.ledger.release,  # type: ignore[union-attr]
                                    hold.reservation)
                raise
        return hold

    @staticmethod
    async def _reserve(ledger: BudgetLedger, tries: list[tuple[int, int]]) -> Reservation:
        """Reserve the call with the first of ``tries`` (prompt and answer tokens: with the whole answer cap, then
        the size this judge's calls take) that has room; with no room for any, wait while calls of this process hold reservations in
        that window (each answer gives back the part of its reservation it did not use) and try again as each
        settles, or in the next window. Refused (``BudgetExhaustedError``) only when the last of ``tries`` cannot
        fit with nothing in flight: a call never spends more answer than it reserved, so the budget is never passed,
        and waiting keeps the caps of the calls in flight from refusing what the budget still holds."""
        import asyncio  # noqa: PLC0415

        quiet_since = time.monotonic()
        while True:
            seen = IN_FLIGHT.settled
            for input_tokens, out in tries:
                got = await off_loop(ledger.store, ledger.try_reserve, input_tokens, out, False)
                if isinstance(got, Reservation):
                    return got
            assert isinstance(got, Refusal)
            # a reservation never settled (a call cut off between its reservation and its request) must not hold
            # the others for the rest of the window: after MAX_BUDGET_WAIT with no settlement, it is refused
            if not ledger.in_flight(got) or time.monotonic() - quiet_since > MAX_BUDGET_WAIT:
                got = await off_loop(ledger.store, ledger.try_reserve, *tries[-1])
                if isinstance(got, Reservation):
                    return got
                raise ledger.refuse(got)
            window = window_start(ledger.clock(), got.length)
            while (IN_FLIGHT.settled == seen and ledger.in_flight(got)
                   and window_start(ledger.clock(), got.length) == window
                   and time.monotonic() - quiet_since <= MAX_BUDGET_WAIT):
                await asyncio.sleep(0.005)
            if IN_FLIGHT.settled != seen:
                quiet_since = time.monotonic()

    async def settle(self, hold: Hold, usage: Any) -> None:
        """Settle a sent call with its real usage (once; later calls do nothing)."""
        if hold.done:
            return
        hold.done = True
        if hold.reservation is not None and self.ledger is not None:
            await off_loop(self.ledger.store, self.ledger.settle, hold.reservation, usage)
        if hold.rate is not None and self.gate is not None:
            inp, out = tokens_of(usage)
            await off_loop(self.gate.store, self.gate.adjust, hold.rate[0], hold.rate[1], inp + out)

    async def release(self, hold: Hold) -> None:
        """Give back a call's reservation: it was refused before it could be billed (once)."""
        if hold.done:
            return
        hold.done = True
        if hold.reservation is not None and self.ledger is not None:
            await off_loop(self.ledger.store, self.ledger.release, hold.reservation)

"""``BudgetLedger``: reserves and settles one judge's calls against a ``Budget``'s windows (in a store, or this
process's), and says how long a refused budget stays exhausted."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import BudgetExhaustedError, ConfigurationError
from ._limits import Budget
from ._prices import Price
from ._windows import IN_FLIGHT, PROCESS_SPEND, utc_time, warn_once, window_start

if TYPE_CHECKING:
    from ...store import SpendWindows

__all__ = ["BudgetLedger", "Refusal", "Reservation", "tokens_of"]


@dataclass
class Refusal:
    """A window with no room for a reservation: which, and what its message needs."""

    kind: str
    scope: str
    start: float
    length: float
    max_tokens: int | None
    max_dollars: float | None
    max_calls: int | None


@dataclass
class Reservation:
    """What one call holds in each window until it settles."""

    tokens: int
    dollars: float
    input_tokens: int
    output_tokens: int
    windows: list[tuple[str, float]] = field(default_factory=list)
    settled: bool = False


class BudgetLedger:
    """Reserves and settles one judge's calls against a ``Budget``'s windows, in ``store`` (a ``ResultsStore`` or
    anything with its ``spend_*`` methods) or, without one, in this process's windows."""

    def __init__(self, budget: Budget, *, judge: str | None = None, price: Price | None = None,
                 store: SpendWindows | None = None,
                 clock: Callable[[], float] = time.time, billable: bool = True) -> None:
        self.budget = budget
        self.judge = judge
        # False for the embedded judge: no provider bills it, so it spends no token or dollar budget (its work is
        # bounded by the CPUs it may use); a budget in judge calls still applies to it
        self.billable = bool(billable)
        self.price = price if self.billable else None
        self.store: SpendWindows = store if store is not None else PROCESS_SPEND
        self.clock = clock
        self._blocked_until: float | None = None

    def check(self) -> None:
        """Refuse (``ConfigurationError``) a dollar limit on a judge with no known price and no token limit."""
        if self.judge is not None and self.price is None and self.budget.has_dollar_limit \
                and not self.budget.has_token_limit and self.billable:
            raise ConfigurationError(
                f"The budget ({self.budget.describe()}) limits dollars, but the judge {self.judge!r} has no known "
                "price, so its spend could not be limited at all. Give a token limit too (Budget(tokens_per_day=..., "
                f"dollars_per_day=...)), or its price: contextjudge.judges._spend.register_prices({{{self.judge!r}: "
                "{'input': <$ per 1M input tokens>, 'output': <$ per 1M output tokens>}})."
            )

    def scope(self, kind: str) -> str:
        """The spend-row scope of this budget's ``kind`` window (``hour`` or ``day``)."""
        return f"budget:{self.budget.name}:{kind}"

    def reserve(self, input_tokens: int, output_tokens: int) -> Reservation:
        """Hold ``input_tokens + output_tokens`` (and their price) in every window, or raise
        ``BudgetExhaustedError`` (holding nothing) when one of them has no room."""
        got = self.try_reserve(input_tokens, output_tokens)
        if isinstance(got, Refusal):
            raise self.refuse(got)
        return got

    def try_reserve(self, input_tokens: int, output_tokens: int, count_refusal: bool = True
                    ) -> Reservation | Refusal:
        """``reserve`` without raising: the reservation, or the window that had no room (``count_refusal=False``: a
        call about to wait for the calls in flight, whose try is not a refusal yet)."""
        now = self.clock()
        if not self.billable:
            input_tokens = output_tokens = 0
        tokens = int(input_tokens) + int(output_tokens)
        dollars = self.price.cost(input_tokens, output_tokens) if self.price is not None else 0.0
        res = Reservation(tokens=tokens, dollars=dollars, input_tokens=int(input_tokens),
                          output_tokens=int(output_tokens))
        for kind, length, max_tokens, max_dollars, max_calls in self.budget.windows(self.billable):
            start = window_start(now, length)
            scope = self.scope(kind)
            limits: dict[str, Any] = {"max_tokens": max_tokens, "calls": 1, "max_calls": max_calls,
                                      "max_dollars": max_dollars if self.price is not None else None}
            if count_refusal:
                ok = self.store.spend_reserve(scope, start, tokens=tokens, dollars=dollars, **limits)
            else:
                try:
                    ok = self.store.spend_reserve(scope, start, tokens=tokens, dollars=dollars, count_refusal=False,
                                                  **limits)
                except TypeError:  # a store of another make, without count_refusal
                    ok = self.store.spend_reserve(scope, start, tokens=tokens, dollars=dollars, **limits)
            if not ok:
                for held_scope, held_start in res.windows:  # give back what the wider windows already hold
                    self.store.spend_adjust(held_scope, held_start, tokens=-tokens, dollars=-dollars, calls=-1)
                return Refusal(kind, scope, start, length, max_tokens, max_dollars, max_calls)
            res.windows.append((scope, start))
        IN_FLIGHT.add(self.store, res.windows, 1)
        return res

    def in_flight(self, refusal: Refusal) -> int:
        """The calls of this process holding a reservation in the window that refused (they may give room back)."""
        return IN_FLIGHT.held(self.store, refusal.scope, refusal.start)

    def refuse(self, refusal: Refusal) -> BudgetExhaustedError:
        """The error of a window that is spent: remembered (``exhausted_until``) and warned about once."""
        resumes = refusal.start + refusal.length
        self._blocked_until = resumes
        msg = self._exhausted_message(refusal.kind, refusal.scope, refusal.start, resumes, refusal.max_tokens,
                                      refusal.max_dollars, refusal.max_calls)
        warn_once(refusal.scope, refusal.start, msg + " Cases are skipped and counted until then.")
        return BudgetExhaustedError(msg, scope=refusal.scope, resumes_at=resumes)

    def _exhausted_message(self, kind: str, scope: str, start: float, resumes: float, max_tokens: int | None,
                           max_dollars: float | None, max_calls: int | None = None) -> str:
        row = self.store.spend_get(scope, start) or {}
        spent = []
        if max_calls is not None:
            spent.append(f"{int(row.get('calls', 0)):,} of {max_calls:,} judge calls")
        if max_tokens is not None:
            spent.append(f"{int(row.get('tokens', 0)):,} of {max_tokens:,} tokens")
        if max_dollars is not None and self.price is not None:
            spent.append(f"${float(row.get('dollars', 0.0)):.4f} of ${max_dollars:g}")
        wait = max(0.0, resumes - self.clock())
        return (f"the judge budget {self.budget.name!r} is spent for this {kind} ({'; '.join(spent) or 'no room'}); "
                f"judging resumes at {utc_time(resumes)} (in {int(wait // 3600)}h{int(wait % 3600 // 60):02d}m). "
                "Raise the Budget's limits to judge more now.")

    def settle(self, res: Reservation, usage: Any = None) -> None:
        """Replace the estimate with the call's real usage (``Usage`` or a dict of input/output tokens); a call
        whose provider reported none keeps its estimate."""
        if res.settled:
            return
        res.settled = True
        try:
            self._settle(res, usage)
        finally:  # only once the window holds the real usage: a call waiting for room tries again then
            IN_FLIGHT.add(self.store, res.windows, -1)

    def _settle(self, res: Reservation, usage: Any) -> None:
        if not self.billable:
            return  # nothing billable was reserved; the call itself was counted at reserve
        inp, out = tokens_of(usage)
        if inp + out <= 0:
            return
        d_tokens = inp + out - res.tokens
        d_dollars = (self.price.cost(inp, out) - res.dollars) if self.price is not None else 0.0
        if d_tokens == 0 and abs(d_dollars) < 1e-15:
            return
        for scope, start in res.windows:
            self.store.spend_adjust(scope, start, tokens=d_tokens, dollars=d_dollars)

    def release(self, res: Reservation) -> None:
        """Give a reservation back whole (a call the provider refused, which it does not bill)."""
        if res.settled:
            return
        res.settled = True
        try:
            for scope, start in res.windows:
                self.store.spend_adjust(scope, start, tokens=-res.tokens, dollars=-res.dollars, calls=-1)
        finally:
            IN_FLIGHT.add(self.store, res.windows, -1)

    def exhausted_until(self) -> float | None:
        """When judging resumes, if a window of this budget is spent now (a call was refused in it, or it is full);
        else None. Cheap: it remembers a spent window until it ends."""
        now = self.clock()
        if self._blocked_until is not None:
            if now < self._blocked_until:
                return self._blocked_until
            self._blocked_until = None
        until = None
        for kind, length, max_tokens, max_dollars, max_calls in self.budget.windows(self.billable):
            start = window_start(now, length)
            row = self.store.spend_get(self.scope(kind), start)
            if not row:
                continue
            full = (row.get("refused", 0) > 0
                    or (max_tokens is not None and row.get("tokens", 0) >= max_tokens)
                    or (max_dollars is not None and row.get("dollars", 0.0) >= max_dollars - 1e-12)
                    or (max_calls is not None and row.get("calls", 0) >= max_calls))
            if full:
                until = max(until or 0.0, start + length)
        self._blocked_until = until
        return until


def tokens_of(usage: Any) -> tuple[int, int]:
    if isinstance(usage, Mapping):
        return int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)
    return int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)

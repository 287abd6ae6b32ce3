"""What a judge may spend: ``Budget`` (tokens, dollars and calls per calendar hour and day) and ``RateLimit``
(requests and tokens per minute), checked when built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError

__all__ = ["Budget", "DAY", "HOUR", "MINUTE", "RateLimit"]


HOUR = 3600.0
DAY = 86400.0
MINUTE = 60.0


def _check_limit(name: str, value: Any, *, whole: bool) -> None:
    if value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if ok and whole:
        ok = float(value).is_integer()
    if not ok:
        kind = "a whole number > 0" if whole else "a number > 0"
        raise ConfigurationError(f"{name} must be {kind} or None (no limit), got {value!r}.")


@dataclass(frozen=True)
class Budget:
    """Hard limits on judge spend per calendar hour and day (UTC): tokens, and dollars where the judge's price is
    known (``price_of``). A call that would pass a limit is refused before it is sent (``BudgetExhaustedError``);
    its case is skipped and counted, and judging resumes when the window turns over.

    ``name``: budgets with the same name share their windows: in one process, and across the processes of an app
    that share a store."""

    tokens_per_hour: int | None = None
    tokens_per_day: int | None = None
    dollars_per_hour: float | None = None
    dollars_per_day: float | None = None
    name: str = "default"
    calls_per_hour: int | None = None
    calls_per_day: int | None = None

    def __post_init__(self) -> None:
        for attr in ("tokens_per_hour", "tokens_per_day", "calls_per_hour", "calls_per_day"):
            _check_limit(f"Budget.{attr}", getattr(self, attr), whole=True)
        for attr in ("dollars_per_hour", "dollars_per_day"):
            _check_limit(f"Budget.{attr}", getattr(self, attr), whole=False)
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"Budget.name must be a non-empty string, got {self.name!r}.")
        if not self.has_limits:
            raise ConfigurationError("Budget() has no limit: give at least one of tokens_per_hour, tokens_per_day, "
                                     "dollars_per_hour, dollars_per_day, calls_per_hour, calls_per_day (or pass "
                                     "budget=None for no budget).")

    @property
    def has_limits(self) -> bool:
        """Whether any window of this budget has a limit."""
        return any(v is not None for v in (self.tokens_per_hour, self.tokens_per_day, self.dollars_per_hour,
                                           self.dollars_per_day, self.calls_per_hour, self.calls_per_day))

    @property
    def has_call_limit(self) -> bool:
        """Whether the budget limits calls (per hour or per day)."""
        return self.calls_per_hour is not None or self.calls_per_day is not None

    @property
    def has_token_limit(self) -> bool:
        """Whether the budget limits tokens (per hour or per day)."""
        return self.tokens_per_hour is not None or self.tokens_per_day is not None

    @property
    def has_dollar_limit(self) -> bool:
        """Whether the budget limits dollars (per hour or per day)."""
        return self.dollars_per_hour is not None or self.dollars_per_day is not None

    def windows(self, billable: bool = True) -> list[tuple[str, float, int | None, float | None, int | None]]:
        """(kind, length in seconds, token limit, dollar limit, call limit) of each window this budget limits.
        ``billable=False`` (the embedded judge, which no provider bills): only the call limits."""
        out: list[tuple[str, float, int | None, float | None, int | None]] = []
        for kind, length, tok, dol, calls in (("day", DAY, self.tokens_per_day, self.dollars_per_day,
                                               self.calls_per_day),
                                              ("hour", HOUR, self.tokens_per_hour, self.dollars_per_hour,
                                               self.calls_per_hour)):
            if not billable:
                tok = dol = None
            if tok is not None or dol is not None or calls is not None:
                out.append((kind, length, _int(tok), dol, _int(calls)))
        return out

    def describe(self) -> str:
        """The budget's limits in words, for messages."""
        bits = []
        if self.tokens_per_hour is not None:
            bits.append(f"{self.tokens_per_hour:,} tokens/hour")
        if self.tokens_per_day is not None:
            bits.append(f"{self.tokens_per_day:,} tokens/day")
        if self.dollars_per_hour is not None:
            bits.append(f"${self.dollars_per_hour:g}/hour")
        if self.dollars_per_day is not None:
            bits.append(f"${self.dollars_per_day:g}/day")
        if self.calls_per_hour is not None:
            bits.append(f"{self.calls_per_hour:,} judge calls/hour")
        if self.calls_per_day is not None:
            bits.append(f"{self.calls_per_day:,} judge calls/day")
        return ", ".join(bits)


@dataclass(frozen=True)
class RateLimit:
    """A cluster-wide judge rate limit: requests and (estimated) tokens per minute, shared like a ``Budget`` (by
    ``name``, in one process or through a shared store). Unlike a budget it never refuses: a call with no room waits
    for the next minute."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    name: str = "default"

    def __post_init__(self) -> None:
        _check_limit("RateLimit.requests_per_minute", self.requests_per_minute, whole=True)
        _check_limit("RateLimit.tokens_per_minute", self.tokens_per_minute, whole=True)
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ConfigurationError("RateLimit() has no limit: give requests_per_minute and/or tokens_per_minute.")


def _int(v: Any) -> int | None:
    return None if v is None else int(v)

"""The judge down: which results say so (``judge_down``: an outage, not the case's fault, so the case is given back
uncounted), and the worker's pause in claiming while it lasts (``_Outage``)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["judge_down"]

_UNAVAILABLE = "JudgeUnavailableError"
# an unavailable-judge error that is this request's own (HTTP 400-class: too long, unsupported), not an outage
_REQUEST_REFUSED = ("rejected the request",)


def judge_down(result: Any) -> bool:
    """Whether ``result`` failed because the judge could not be reached or kept failing (retries spent), rather
    than because of the case: such a case is given back, not completed with an error."""
    if not getattr(result, "error", None) or getattr(result, "score", None) is not None:
        return False
    if getattr(result, "error_type", None) == _UNAVAILABLE:
        return not any(s in result.error for s in _REQUEST_REFUSED)
    # a connection failure that reached the metric untranslated
    text = f"{getattr(result, 'error_type', '')} {result.error}".lower()
    return any(s in text for s in ("connecterror", "connectionerror", "connection refused", "apiconnectionerror"))


class _Outage:
    """A worker's judge-down state: the pause in claiming while the judge is down (1 s, doubling up to
    ``backoff_max``; the cases in flight when it went down share one step), when the outage began, when a judge call
    was last answered, and the give-backs of a case the judge fails on while it answers others."""

    def __init__(self, backoff_max: float) -> None:
        self.backoff_max = backoff_max
        self.backoff = 0.0  # the current pause while the judge is down (0: it is up)
        self.pause_until = 0.0  # time.monotonic() before which nothing is claimed nor started
        self.last_ok = 0.0  # time.monotonic() of the last answered (not cached) judge call
        self.down_since: float | None = None
        self._returns: dict[tuple[str, str], int] = {}  # give-backs of a case while the judge answered others

    def paused(self) -> float:
        """Seconds left of the pause in claiming (<= 0: none)."""
        return self.pause_until - time.monotonic()

    def answered(self) -> tuple[bool, float | None]:
        """A judge call was answered: whether that ends an outage, and when the outage began (None: not known)."""
        self.last_ok = time.monotonic()
        if not self.backoff:
            return False, None
        since = self.down_since
        self.backoff, self.pause_until, self.down_since = 0.0, 0.0, None
        return True, since

    def fails_alone(self, ref: tuple[str, str]) -> bool:
        """Count a give-back of ``ref`` while other calls were answered; True from the third: the judge fails on this
        case alone, so its attempts count (it is set aside after ``max_attempts``, never written as errors)."""
        n = self._returns[ref] = self._returns.get(ref, 0) + 1
        return n >= 3

    def forget(self, ref: tuple[str, str]) -> None:
        """``ref`` was completed: its give-backs no longer count."""
        self._returns.pop(ref, None)

    def step(self) -> bool:
        """One step of the backoff; True when this begins an outage."""
        now = time.monotonic()
        if now >= self.pause_until:
            self.backoff = min(self.backoff_max, self.backoff * 2 if self.backoff else min(1.0, self.backoff_max))
            self.pause_until = now + self.backoff
        if self.down_since is None:
            self.down_since = time.time()
            return True
        return False

"""The one retry policy for judge calls: classify errors, back off with jitter, honour Retry-After.

Providers only raise; this module decides what is transient (rate limits, 5xx, timeouts, connection errors) and
what fails at once (authentication, bad requests). Every provider's errors are read by duck typing
(``status_code``, ``response.status_code``, ``response.headers``) so no provider SDK is imported here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
)

from ._options import JudgeOptions

__all__ = ["JudgeOptions", "backoff_seconds", "classify", "policy", "retry_after_seconds", "status_kind", "status_of"]


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception (or its ``response``) carries, or None."""
    for obj in (exc, getattr(exc, "response", None)):
        if obj is None:
            continue
        for attr in ("status_code", "status", "http_status"):
            val = getattr(obj, attr, None)
            if isinstance(val, int) and 100 <= val < 600:
                return val
    return None


def retry_after_seconds(exc: BaseException) -> float | None:
    """The seconds a Retry-After header (or a ``retry_after`` attribute) asks to wait, or None."""
    val: Any = getattr(exc, "retry_after", None)
    if val is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        if headers is not None:
            try:
                val = headers.get("retry-after-ms")
                if val is not None:
                    return max(0.0, float(val) / 1000.0)
                val = headers.get("retry-after")
            except Exception:  # noqa: BLE001 - headers of unknown shape
                val = None
    if val is None:
        return None
    try:
        return max(0.0, float(val))
    except (TypeError, ValueError):
        return None  # an HTTP date; fall back to our own backoff


def _names(exc: BaseException) -> str:
    return " ".join(c.__name__ for c in type(exc).__mro__).lower()


def status_kind(status: int | None) -> str | None:
    """The one reading of an HTTP status: "transient", "auth", "bad_request", or None (not an error we sort)."""
    if status is None:
        return None
    if status in (408, 409, 425, 429) or status >= 500:
        return "transient"
    if status in (401, 403):
        return "auth"
    if status in (400, 404, 405, 413, 415, 422):
        return "bad_request"
    return None


def classify(exc: BaseException) -> str:
    """One of "transient", "auth", "bad_request", "other"."""
    names = _names(exc)
    if "judgeresponseerror" in names:  # an answer that is not a completion: a proxy's page, a hiccup upstream
        return "transient"
    kind = status_kind(status_of(exc))
    if kind is not None:
        return kind
    if "ratelimit" in names:
        return "transient"
    if "authentication" in names or "permissiondenied" in names:
        return "auth"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return "transient"
    if "timeout" in names or "connection" in names or "remoteprotocol" in names or "readerror" in names:
        return "transient"
    if "badrequest" in names:
        return "bad_request"
    return "other"


def backoff_seconds(attempt: int, exc: BaseException, opts: JudgeOptions) -> float:
    """Seconds to wait before attempt ``attempt + 1``: Retry-After when the server says, else jittered backoff."""
    ra = retry_after_seconds(exc)
    if ra is not None:
        return min(ra, opts.backoff_max)
    cap = min(opts.backoff_max, opts.backoff_initial * (2 ** (attempt - 1)))
    return random.uniform(cap / 2, cap)


def policy(opts: JudgeOptions, retryable: Callable[[BaseException], bool],
           on_retry: Callable[[int, BaseException, float], None] | None = None) -> AsyncRetrying:
    """The one tenacity policy of judge calls: retry what ``retryable`` accepts, wait ``backoff_seconds``, stop
    after ``max_attempts`` or ``deadline``; ``on_retry(attempt, exc, delay)`` is told of each wait."""

    def _wait(state: Any) -> float:
        exc = state.outcome.exception() if state.outcome else None
        delay = backoff_seconds(state.attempt_number, exc, opts) if exc else 0.0
        if exc is not None and on_retry is not None:
            on_retry(state.attempt_number, exc, delay)
        return delay

    return AsyncRetrying(retry=retry_if_exception(retryable), wait=_wait,
                         stop=stop_after_attempt(opts.max_attempts) | stop_after_delay(opts.deadline), reraise=False)

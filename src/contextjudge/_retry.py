"""The one retry policy for judge calls: classify errors, back off with jitter, honour Retry-After.

Providers only raise; this module decides what is transient (rate limits, 5xx, timeouts, connection errors) and
what fails at once (authentication, bad requests). Every provider's errors are read by duck typing
(``status_code``, ``response.status_code``, ``response.headers``) so no provider SDK is imported here.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["JudgeOptions", "classify", "retry_after_seconds", "status_of"]


@dataclass(frozen=True)
class JudgeOptions:
    """Knobs of judge calls. None of them can change a verdict, so none is part of the cache key."""

    max_attempts: int = 6             # attempts per request, the first included
    attempt_timeout: float = 120.0    # seconds for one attempt
    deadline: float = 600.0           # seconds for all attempts of one request, backoff included
    backoff_initial: float = 1.0      # first backoff, doubled each retry, with full jitter
    backoff_max: float = 30.0         # cap of one backoff (and of an honoured Retry-After)
    max_concurrency: int = 8          # judge calls in flight per judge model
    token_budget: int = 6000          # approximate prompt tokens of items per request; larger inputs are split
    max_output_tokens: int | None = None
    """Cap on the tokens of one judge answer. None leaves the model's own setting alone. When set, it is applied
    to chat models that have a ``max_tokens`` field and none set (ChatOpenAI, ChatAnthropic, ...); for ChatOpenAI
    pointed at a server other than api.openai.com it is also sent as ``max_tokens`` in ``extra_body``, because
    OpenAI-compatible servers such as llama.cpp's ignore ``max_completion_tokens``. A truncated answer keeps its
    complete verdicts and the rest are re-asked."""


def status_of(exc: BaseException) -> int | None:
    for obj in (exc, getattr(exc, "response", None)):
        if obj is None:
            continue
        for attr in ("status_code", "status", "http_status"):
            val = getattr(obj, attr, None)
            if isinstance(val, int) and 100 <= val < 600:
                return val
    return None


def retry_after_seconds(exc: BaseException) -> float | None:
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


def classify(exc: BaseException) -> str:
    """One of "transient", "auth", "bad_request", "other"."""
    names = _names(exc)
    if "judgeresponseerror" in names:  # an answer that is not a completion: a proxy's page, a hiccup upstream
        return "transient"
    status = status_of(exc)
    if status is not None:
        if status in (408, 409, 425, 429) or status >= 500:
            return "transient"
        if status in (401, 403):
            return "auth"
        if status in (400, 404, 405, 413, 415, 422):
            return "bad_request"
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

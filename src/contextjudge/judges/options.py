"""``JudgeOptions``: the knobs of judge calls (retries, timeouts, concurrency, request size, answer cap)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JudgeOptions"]


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

"""``JudgeOptions``: the knobs of judge calls (retries, timeouts, concurrency, request size, answer cap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["JudgeOptions"]


@dataclass(frozen=True)
class JudgeOptions:
    """Knobs of judge calls. None of them can change a verdict, so none is part of the cache key (``repeats`` is
    not either: repeated requests neither read nor write the cache)."""

    def __post_init__(self) -> None:
        if not isinstance(self.repeats, int) or isinstance(self.repeats, bool) or self.repeats < 1:
            from ..errors import ConfigurationError  # noqa: PLC0415

            raise ConfigurationError(f"JudgeOptions.repeats must be a whole number >= 1, got {self.repeats!r}; "
                                     "pass e.g. repeats=3 to ask a sampling judge three times.")

    max_attempts: int = 6             # attempts per request, the first included
    attempt_timeout: float = 120.0    # seconds for one attempt
    deadline: float = 600.0           # seconds for all attempts of one request, backoff included
    backoff_initial: float = 1.0      # first backoff, doubled each retry, with full jitter
    backoff_max: float = 30.0         # cap of one backoff (and of an honoured Retry-After)
    max_concurrency: int = 8          # judge calls in flight per judge model (at most: halved on HTTP 429s, AIMD)
    token_budget: int = 6000          # approximate prompt tokens of items per request; larger inputs are split
    repeats: int = 1
    """How many times each judge request is asked, for a judge that samples (temperature above zero): the verdict
    is the majority of the k answers (a tie keeps the first), each verdict carries ``votes`` and ``agreement``, and
    a metric's ``score_spread`` is the variance of its score across the repeats. Repeats bypass the verdict cache.
    A deterministic judge (temperature 0, or the embedded judge) is asked once, and the log says so."""
    budget: Any = None
    """A ``judges._spend.Budget``: hard limits on judge spend per hour/day (tokens; dollars where the judge's price
    is known). Each call reserves its estimated tokens before it is sent; a call with no room left raises
    ``BudgetExhaustedError`` and its case is skipped and counted. None: no limit."""
    rate_limit: Any = None
    """A ``judges._spend.RateLimit``: judge requests and tokens per minute, shared by every process of the app that
    uses the same store (else by this process). A call with no room in the current minute waits for the next one;
    it is never refused. None: no limit (the provider's 429s still slow the calls down: see max_concurrency)."""
    max_output_tokens: int | None = None
    """Cap on the tokens of one judge answer. None leaves the model's own setting alone. When set, it is applied
    to chat models that have a ``max_tokens`` field and none set (ChatOpenAI, ChatAnthropic, ...); for ChatOpenAI
    pointed at a server other than api.openai.com it is also sent as ``max_tokens`` in ``extra_body``, because
    OpenAI-compatible servers such as llama.cpp's ignore ``max_completion_tokens``. A truncated answer keeps its
    complete verdicts and the rest are re-asked."""

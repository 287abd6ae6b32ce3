"""Hard judge budgets: spend limits per time window, the price table, and the reservation of a call's estimated
tokens before it is sent.

    from contextjudge.judges._spend import Budget
    Budget(tokens_per_day=2_000_000, dollars_per_day=5.0)

- ``Budget`` (frozen dataclass): ``tokens_per_hour``, ``tokens_per_day``, ``dollars_per_hour``, ``dollars_per_day``
  (None: no limit of that kind); windows are calendar hours/days in UTC. A dollar limit on a judge with no known
  price and no token limit is refused (``ConfigurationError``) before anything is judged. Budgets with the same
  ``name`` share their windows (in one process, and across processes through a shared store).
- the price table ships in ``contextjudge/data/prices.json`` (dollars per million input/output tokens, by model
  name); ``register_prices({...})`` extends it; ``price_of(name)`` looks a judge up (None when unknown).
- ``BudgetLedger(budget, judge=..., price=..., store=None, clock=time.time)``: ``reserve(input_tokens,
  output_tokens)`` before a call (raises ``errors.BudgetExhaustedError`` when a limit has no room), ``settle(res,
  usage)`` after it, ``exhausted_until()`` for a cheap check before a case starts. With a store (``store/_spend.py``)
  the windows are shared by every process that uses it; without one, by every ledger of this process.
- ``RateLimit(requests_per_minute=, tokens_per_minute=)``: a cluster-wide rate limit on the same windows (of one
  minute) that waits for the next window instead of refusing (``RateGate``).
- ``JudgeOptions.budget`` carries a ``Budget`` into every run and ``JudgeOptions.rate_limit`` a ``RateLimit``; the
  judge client reserves and settles per call.

A reservation holds the call's estimated tokens (prompt tokens counted with tiktoken when it is installed and its
encoding is on disk, else four characters a token; plus the answer: ``max_output_tokens`` when set, else a figure per
judged item) until the call returns, when the real usage replaces it (the estimate is kept when the provider reports
none). Under a token or dollar budget a billable judge's answer is capped (``max_output_tokens``, else the model's own
``max_tokens``, else ``BUDGET_OUTPUT_CAP``) and the request reserves that cap, so no request spends more answer
tokens than it reserved; a window is overshot at most by the error of the prompt-token count of the calls in flight
(none with tiktoken's count). A reservation that finds no room while calls of this process hold reservations in
that window waits for them to settle (each gives back the answer tokens it did not use) and tries again; it is
refused only when it cannot fit with none in flight, so the caps held by concurrent calls never refuse what the
budget still has (``CallSpend._reserve``). When even the cap cannot fit, the call reserves what this judge's answers
to this task really use (``AnswerSizes``: the largest of its last answers, per judged item, with a margin; only once
``SIZED_AFTER`` answers were seen) and is sent with that as its own answer cap (``max_tokens`` of the request, not
of the judge: its identity and cached verdicts do not change), so it still cannot spend more than it reserved; an
answer cut by that cap is asked again with the whole cap (``_sending.Sender.send``). So a budget is refused only
when a call of this judge's usual size cannot fit. The embedded judge is billed by no provider: it spends no token or dollar budget (its
work is bounded by its CPUs, ``--cpus``); ``Budget(calls_per_hour=, calls_per_day=)`` limits judge calls of any
judge, the embedded one included.

The package, one concept a module: ``_limits`` (``Budget``, ``RateLimit``), ``_prices`` (the price table),
``_tokens`` (token estimates, answer sizes reserved per item, ``BUDGET_OUTPUT_CAP``), ``_windows`` (calendar windows,
this process's ``MemorySpend``, the tokens held in flight), ``_ledger`` (``BudgetLedger``), ``_rate`` (``RateGate``),
``_sizes`` (``AnswerSizes``) and ``_call`` (``CallSpend``, what the judge client uses around each call).
"""

from __future__ import annotations

from ._call import CallSpend, Hold
from ._ledger import BudgetLedger, Refusal, Reservation
from ._limits import DAY, HOUR, MINUTE, Budget, RateLimit
from ._prices import Price, price_of, register_prices
from ._rate import RateGate
from ._sizes import AnswerSizes
from ._tokens import (
    BUDGET_OUTPUT_CAP,
    OUTPUT_TOKENS_BASE,
    OUTPUT_TOKENS_PER_ITEM,
    OUTPUT_TOKENS_RUBRIC,
    OUTPUT_TOKENS_TEXT,
    count_tokens,
    output_estimate,
    prompt_tokens,
)
from ._windows import MemorySpend, window_start

__all__ = ["BUDGET_OUTPUT_CAP", "DAY", "AnswerSizes", "HOUR", "MINUTE", "OUTPUT_TOKENS_BASE",
           "OUTPUT_TOKENS_PER_ITEM", "OUTPUT_TOKENS_RUBRIC", "OUTPUT_TOKENS_TEXT", "Budget", "BudgetLedger",
           "CallSpend", "Hold", "MemorySpend", "Price", "RateGate", "RateLimit", "Refusal", "Reservation",
           "count_tokens", "output_estimate", "price_of", "prompt_tokens", "register_prices", "window_start"]

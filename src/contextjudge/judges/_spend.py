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
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BudgetExhaustedError, ConfigurationError

__all__ = ["BUDGET_OUTPUT_CAP", "DAY", "AnswerSizes", "HOUR", "MINUTE", "OUTPUT_TOKENS_BASE", "OUTPUT_TOKENS_PER_ITEM", "OUTPUT_TOKENS_RUBRIC",
           "OUTPUT_TOKENS_TEXT", "Budget", "BudgetLedger", "CallSpend", "Hold", "MemorySpend", "Price", "RateGate",
           "RateLimit", "Refusal", "Reservation", "count_tokens", "output_estimate", "price_of", "register_prices",
           "window_start"]

logger = logging.getLogger("contextjudge")

HOUR = 3600.0
DAY = 86400.0
MINUTE = 60.0
# answer tokens reserved per judged item (a verdict with its id and a one-sentence reason) and per answer
OUTPUT_TOKENS_PER_ITEM = 60
OUTPUT_TOKENS_BASE = 20
# a rubric score with its reason, and a free-text reason
OUTPUT_TOKENS_RUBRIC = 120
OUTPUT_TOKENS_TEXT = 250
# the answer cap of a billable judge under a token or dollar budget when neither JudgeOptions.max_output_tokens nor the
# model's own max_tokens sets one: each request reserves this much answer (given back when it settles), so a
# request never spends more than it reserved
BUDGET_OUTPUT_CAP = 2048
# a reservation with no room waits for the calls in flight to settle; this long with none settling, it is refused
MAX_BUDGET_WAIT = 600.0
# a call that cannot reserve its whole answer cap may reserve the size this judge's answers really take, once this
# many answers of the judge to the task were seen: the largest of the last SIZED_WINDOW (per judged item), times
# SIZED_MARGIN, plus SIZED_SLACK tokens
SIZED_AFTER = 8
SIZED_WINDOW = 64
SIZED_MARGIN = 1.25
SIZED_SLACK = 16


# ---------------------------------------------------------------------------------------------- limits
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


# ---------------------------------------------------------------------------------------------- prices
@dataclass(frozen=True)
class Price:
    """Dollars per million input and output tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollars for these tokens at this price (prices are per million tokens)."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


_TABLE: dict[str, Price] | None = None
_REGISTERED: dict[str, Price] = {}
_TABLE_LOCK = threading.Lock()
# a dated or aliased release of a listed model costs what the model does: gpt-4o-mini-2024-07-18,
# claude-3-5-haiku-20241022, claude-3-5-haiku-latest, gemini-2.0-flash-001
_SUFFIX = re.compile(r"^-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest|\d{3})$")


def _price(value: Any, name: str) -> Price:
    if isinstance(value, Price):
        return value
    if isinstance(value, Mapping):
        inp, out = value.get("input"), value.get("output")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        inp, out = value
    else:
        inp = out = None
    for v in (inp, out):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ConfigurationError(f"price of {name!r} must be {{'input': dollars, 'output': dollars}} per million "
                                     f"tokens (numbers >= 0), or (input, output); got {value!r}.")
    return Price(float(inp), float(out))  # type: ignore[arg-type]


def _table() -> dict[str, Price]:
    global _TABLE
    if _TABLE is None:
        with _TABLE_LOCK:
            if _TABLE is None:
                from importlib import resources  # noqa: PLC0415 - read once, on first use

                raw = json.loads(resources.files("contextjudge").joinpath("data/prices.json").read_text("utf-8"))
                _TABLE = {k.lower(): _price(v, k) for k, v in (raw.get("models") or {}).items()}
    return _TABLE


def register_prices(prices: Mapping[str, Any]) -> None:
    """Add or correct judge prices: ``{"model-name": {"input": 0.4, "output": 1.6}}`` in dollars per million tokens
    (or ``(input, output)``). Names match the judge's model name, case-insensitively, and its dated releases."""
    if not isinstance(prices, Mapping):
        raise ConfigurationError("register_prices takes a mapping {'model-name': {'input': ..., 'output': ...}}.")
    parsed = {str(k).strip().lower(): _price(v, str(k)) for k, v in prices.items()}
    with _TABLE_LOCK:
        _REGISTERED.update(parsed)


def _model_name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    from ._naming import judge_name  # noqa: PLC0415

    try:
        return judge_name(model)
    except Exception:  # noqa: BLE001
        return None


def price_of(model: Any) -> Price | None:
    """The price of a judge (a model name or a chat model), or None when it is not known. A provider prefix
    (``openai:``, ``models/``) is ignored, and a dated release (``gpt-4o-mini-2024-07-18``) costs what its model does."""
    name = _model_name(model)
    if not name:
        return None
    key = name.strip().lower()
    for prefix in ("models/", "openai:", "anthropic:", "google_genai:", "google_vertexai:", "google:"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    table = _table()
    for source in (_REGISTERED, table):
        hit = source.get(key)
        if hit is not None:
            return hit
    best: tuple[int, Price] | None = None
    for source in (_REGISTERED, table):
        for base, price in source.items():
            if key.startswith(base) and _SUFFIX.match(key[len(base):]) and (best is None or len(base) > best[0]):
                best = (len(base), price)
        if best is not None:
            return best[1]
    return None


# ---------------------------------------------------------------------------------------------- token estimates
_ENCODERS: dict[str, Any] = {}
_NO_TIKTOKEN = object()


def _encoder(model_name: str | None) -> Any:
    """A tiktoken encoding for ``model_name`` when tiktoken is installed and the encoding is already on disk (this
    never downloads: offline it would hang), else None."""
    enc_name = "o200k_base" if model_name and re.match(r"(gpt-4o|gpt-4\.1|gpt-5|o\d)", model_name.lower()) \
        else "cl100k_base"
    hit = _ENCODERS.get(enc_name)
    if hit is not None:
        return None if hit is _NO_TIKTOKEN else hit
    enc: Any = _NO_TIKTOKEN
    try:
        import hashlib  # noqa: PLC0415

        cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
        if not cache:
            try:
                from importlib.util import find_spec  # noqa: PLC0415

                spec = find_spec("llama_index.core")
                if spec is not None and spec.submodule_search_locations:
                    found = os.path.join(list(spec.submodule_search_locations)[0], "_static", "tiktoken_cache")
                    if os.path.isdir(found):
                        cache = os.environ["TIKTOKEN_CACHE_DIR"] = found
            except (ImportError, ValueError):
                cache = None
        url = f"https://openaipublic.blob.core.windows.net/encodings/{enc_name}.tiktoken"
        if cache and os.path.exists(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())):  # noqa: S324
            import tiktoken  # noqa: PLC0415 - optional, loaded on first use

            enc = tiktoken.get_encoding(enc_name)
    except Exception:  # noqa: BLE001 - no tiktoken, or an unreadable cache: four characters a token
        enc = _NO_TIKTOKEN
    _ENCODERS[enc_name] = enc
    return None if enc is _NO_TIKTOKEN else enc


def count_tokens(text: str, model_name: str | None = None) -> int:
    """Tokens of ``text`` for ``model_name``: tiktoken's count when available, else about four characters a token."""
    if not text:
        return 0
    enc = _encoder(model_name)
    if enc is not None:
        try:
            return len(enc.encode(text, disallowed_special=()))
        except Exception:  # noqa: BLE001
            pass
    return max(1, (len(text) + 3) // 4)


def output_estimate(task: str | None, items: int, max_output_tokens: int | None = None) -> int:
    """The answer tokens a call reserves: ``max_output_tokens`` when set, else a figure per judged item."""
    if max_output_tokens:
        return int(max_output_tokens)
    if task == "rubric_recall":
        return OUTPUT_TOKENS_RUBRIC
    if task is None or items <= 0:
        return OUTPUT_TOKENS_TEXT
    return OUTPUT_TOKENS_BASE + OUTPUT_TOKENS_PER_ITEM * items


# ---------------------------------------------------------------------------------------------- windows
def window_start(now: float, length: float) -> float:
    """The start of the calendar window (UTC) of ``length`` seconds that holds ``now``."""
    return float(int(now // length) * int(length))


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


class MemorySpend:
    """The spend windows of one process (``spend_reserve``/``spend_adjust``/``spend_get`` as the store has them),
    for ledgers without a store. Old windows are forgotten after two days."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, float], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _row(self, scope: str, window: float) -> dict[str, Any]:
        row = self._rows.get((scope, window))
        if row is None:
            if len(self._rows) > 256:
                newest = max(w for _, w in self._rows)
                for k in [k for k in self._rows if k[1] < newest - 2 * DAY]:
                    del self._rows[k]
            row = self._rows[(scope, window)] = {"tokens": 0, "dollars": 0.0, "calls": 0, "refused": 0}
        return row

    def spend_reserve(self, scope: str, window: float, *, tokens: int, dollars: float = 0.0,
                      max_tokens: int | None = None, max_dollars: float | None = None, calls: int = 0,
                      max_calls: int | None = None, count_refusal: bool = True) -> bool:
        """Add to the window's row unless a limit would be passed (then count a refusal, unless ``count_refusal``
        is False); whether it was added."""
        with self._lock:
            row = self._row(scope, window)
            if ((max_tokens is not None and row["tokens"] + tokens > max_tokens)
                    or (max_dollars is not None and row["dollars"] + dollars > max_dollars + 1e-12)
                    or (max_calls is not None and row["calls"] + calls > max_calls)):
                if count_refusal:
                    row["refused"] += 1
                return False
            row["tokens"] += tokens
            row["dollars"] += dollars
            row["calls"] += calls
            return True

    def spend_adjust(self, scope: str, window: float, *, tokens: int = 0, dollars: float = 0.0,
                     calls: int = 0) -> None:
        """Add (or, negative, take back) tokens, dollars and calls in the window's row, with no limit."""
        with self._lock:
            row = self._row(scope, window)
            row["tokens"] += tokens
            row["dollars"] += dollars
            row["calls"] += calls

    def spend_get(self, scope: str, window: float) -> dict[str, Any] | None:
        """A copy of the window's row (tokens, dollars, calls, refused), or None when nothing was spent in it."""
        with self._lock:
            row = self._rows.get((scope, window))
            return None if row is None else dict(row)


_PROCESS_SPEND = MemorySpend()
# (scope, window) pairs already warned about, so a spent window is said once per process
_WARNED: set[tuple[str, float]] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(scope: str, window: float, message: str) -> None:
    with _WARNED_LOCK:
        if (scope, window) in _WARNED:
            return
        _WARNED.add((scope, window))
    logger.warning("contextjudge: %s", message)


class _InFlight:
    """The reservations of this process not settled yet, per (store, window row), and a count of settlements: a
    reservation that finds no room waits while any are in flight (they give back what they did not use) and tries
    again each time one settles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, str, float], int] = {}
        self.settled = 0

    def add(self, store: Any, windows: list[tuple[str, float]], n: int) -> None:
        with self._lock:
            for scope, start in windows:
                key = (id(store), scope, start)
                left = self._held.get(key, 0) + n
                if left > 0:
                    self._held[key] = left
                else:
                    self._held.pop(key, None)
            if n < 0:
                self.settled += 1

    def held(self, store: Any, scope: str, start: float) -> int:
        with self._lock:
            return self._held.get((id(store), scope, start), 0)


_IN_FLIGHT = _InFlight()


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

    def __init__(self, budget: Budget, *, judge: str | None = None, price: Price | None = None, store: Any = None,
                 clock: Callable[[], float] = time.time, billable: bool = True) -> None:
        self.budget = budget
        self.judge = judge
        # False for the embedded judge: no provider bills it, so it spends no token or dollar budget (its work is
        # bounded by the CPUs it may use); a budget in judge calls still applies to it
        self.billable = bool(billable)
        self.price = price if self.billable else None
        self.store = store if store is not None else _PROCESS_SPEND
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
        _IN_FLIGHT.add(self.store, res.windows, 1)
        return res

    def in_flight(self, refusal: Refusal) -> int:
        """The calls of this process holding a reservation in the window that refused (they may give room back)."""
        return _IN_FLIGHT.held(self.store, refusal.scope, refusal.start)

    def refuse(self, refusal: Refusal) -> BudgetExhaustedError:
        """The error of a window that is spent: remembered (``exhausted_until``) and warned about once."""
        resumes = refusal.start + refusal.length
        self._blocked_until = resumes
        msg = self._exhausted_message(refusal.kind, refusal.scope, refusal.start, resumes, refusal.max_tokens,
                                      refusal.max_dollars, refusal.max_calls)
        _warn_once(refusal.scope, refusal.start, msg + " Cases are skipped and counted until then.")
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
                f"judging resumes at {_when(resumes)} (in {int(wait // 3600)}h{int(wait % 3600 // 60):02d}m). "
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
            _IN_FLIGHT.add(self.store, res.windows, -1)

    def _settle(self, res: Reservation, usage: Any) -> None:
        if not self.billable:
            return  # nothing billable was reserved; the call itself was counted at reserve
        inp, out = _tokens_of(usage)
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
            _IN_FLIGHT.add(self.store, res.windows, -1)

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


def _tokens_of(usage: Any) -> tuple[int, int]:
    if isinstance(usage, Mapping):
        return int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)
    return int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)


async def _off_loop(store: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a read or write of ``store``'s spend windows: in the store's threads when the store is a
    database (``_aio.in_store_thread``: the event loop never waits on it), at once when it is this process's memory
    (``MemorySpend``)."""
    if isinstance(store, MemorySpend):
        return fn(*args)
    from .._aio import in_store_thread  # noqa: PLC0415

    return await in_store_thread(fn, *args)


class RateGate:
    """Waits until a ``RateLimit``'s current minute has room for one more call, then takes it."""

    def __init__(self, limit: RateLimit, *, store: Any = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[Any]] | None = None) -> None:
        self.limit = limit
        self.store = store if store is not None else _PROCESS_SPEND
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
            ok, start, nxt = await _off_loop(self.store, self.try_take, tokens)
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


class AnswerSizes:
    """What each judge's calls to each task really take, per (judge identity, task), over the last ``SIZED_WINDOW``
    calls: the answer as a multiple of ``output_estimate`` (the figure per judged item, so a request of any size is
    sized from answers to requests of other sizes), and how far the billed prompt passed its estimate (the answer
    schema a provider bills as prompt, a tokenizer not at hand), both as a ratio and in tokens. Process-wide
    (``ANSWER_SIZES``), bounded."""

    def __init__(self, keys: int = 256) -> None:
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[tuple[str, str], collections.deque[tuple[float, float, int]]] = (
            collections.OrderedDict())
        self._keys = keys

    def observe(self, judge: str, task: str | None, items: int, output_tokens: int, input_estimate: int = 0,
                input_tokens: int = 0) -> None:
        """Count one complete answer (not one cut by its cap) of ``output_tokens`` to a request of ``items``, whose
        prompt was estimated at ``input_estimate`` tokens and billed as ``input_tokens``."""
        if output_tokens <= 0:
            return
        ratio = output_tokens / output_estimate(task, items)
        over = max(0, int(input_tokens) - int(input_estimate)) if input_tokens > 0 else 0
        in_ratio = (input_tokens / input_estimate) if input_tokens > 0 and input_estimate > 0 else 1.0
        key = (judge, str(task))
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = collections.deque(maxlen=SIZED_WINDOW)
                while len(self._seen) > self._keys:
                    self._seen.popitem(last=False)
            seen.append((ratio, in_ratio, over))

    def size(self, judge: str, task: str | None, items: int, input_estimate: int) -> tuple[int, int] | None:
        """(prompt tokens, answer tokens) to reserve for such a request whose prompt is estimated at
        ``input_estimate`` (None until ``SIZED_AFTER`` calls were seen): the largest answer seen, the prompt's
        estimate raised by the most it was passed (as a ratio or in tokens, whichever is more), each with a margin."""
        with self._lock:
            seen = self._seen.get((judge, str(task)))
            if seen is None or len(seen) < SIZED_AFTER:
                return None
            top = max(r for r, _, _ in seen)
            in_ratio = max(r for _, r, _ in seen)
            over = max(o for _, _, o in seen)
        prompt = max(input_estimate * in_ratio, input_estimate + over)
        prompt = int(input_estimate + (prompt - input_estimate) * SIZED_MARGIN + 0.999)
        return prompt, int(top * output_estimate(task, items) * SIZED_MARGIN + 0.999) + SIZED_SLACK


ANSWER_SIZES = AnswerSizes()


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

    def estimate(self, prompt: str, task: str | None, items: int) -> tuple[int, int]:
        """The (input, output) tokens a call with this prompt is expected to take, reserved before it is sent."""
        return count_tokens(prompt, self.model_name), output_estimate(task, items, self.max_output_tokens)

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
                    await _off_loop(self.ledger.store, self.ledger.release,  # type: ignore[union-attr]
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
            seen = _IN_FLIGHT.settled
            for input_tokens, out in tries:
                got = await _off_loop(ledger.store, ledger.try_reserve, input_tokens, out, False)
                if isinstance(got, Reservation):
                    return got
            assert isinstance(got, Refusal)
            # a reservation never settled (a call cut off between its reservation and its request) must not hold
            # the others for the rest of the window: after MAX_BUDGET_WAIT with no settlement, it is refused
            if not ledger.in_flight(got) or time.monotonic() - quiet_since > MAX_BUDGET_WAIT:
                got = await _off_loop(ledger.store, ledger.try_reserve, *tries[-1])
                if isinstance(got, Reservation):
                    return got
                raise ledger.refuse(got)
            window = window_start(ledger.clock(), got.length)
            while (_IN_FLIGHT.settled == seen and ledger.in_flight(got)
                   and window_start(ledger.clock(), got.length) == window
                   and time.monotonic() - quiet_since <= MAX_BUDGET_WAIT):
                await asyncio.sleep(0.005)
            if _IN_FLIGHT.settled != seen:
                quiet_since = time.monotonic()

    async def settle(self, hold: Hold, usage: Any) -> None:
        """Settle a sent call with its real usage (once; later calls do nothing)."""
        if hold.done:
            return
        hold.done = True
        if hold.reservation is not None and self.ledger is not None:
            await _off_loop(self.ledger.store, self.ledger.settle, hold.reservation, usage)
        if hold.rate is not None and self.gate is not None:
            inp, out = _tokens_of(usage)
            await _off_loop(self.gate.store, self.gate.adjust, hold.rate[0], hold.rate[1], inp + out)

    async def release(self, hold: Hold) -> None:
        """Give back a call's reservation: it was refused before it could be billed (once)."""
        if hold.done:
            return
        hold.done = True
        if hold.reservation is not None and self.ledger is not None:
            await _off_loop(self.ledger.store, self.ledger.release, hold.reservation)

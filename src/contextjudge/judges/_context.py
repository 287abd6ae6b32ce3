"""Judge-call context: the ``RunContext`` judge calls of one run share (options, verdict cache, concurrency limiters,
budget ledgers, usage, the run's default judge), held in a ContextVar, and the marker that code runs inside a judge
call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._result import Usage
from ._cache import VerdictCache
from ._options import JudgeOptions

__all__ = ['CallHook', 'JUDGE_TAG', 'RunContext', 'current_run_context', 'in_judge_call', 'tally_since', 'use_run_context']

logger = logging.getLogger("contextjudge")


JUDGE_TAG = "contextjudge:judge"


CallHook = Callable[[dict[str, Any]], None]


@dataclass
class RunContext:
    """Everything judge calls share within one run: cache, limits, working methods, usage, progress hooks."""

    options: JudgeOptions = field(default_factory=JudgeOptions)
    cache: VerdictCache = field(default_factory=VerdictCache)
    usage: Usage = field(default_factory=Usage)
    on_call: list[CallHook] = field(default_factory=list)
    # The run's judge for metrics built without a model (``model=`` of evaluate, capture or the pytest plugin):
    # held here, so the user's metric objects are never changed. Resolved once, on first use.
    default_model: Any = None
    _default_resolved: Any = None
    # judges replaced for this run (id of a judge -> (that judge, its replacement)): evaluate(store=...) puts the
    # embedded judge calibrated on the store's labels in place of the bare one (engine.store_calibrated)
    judge_swap: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    _methods: dict[str, str] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Future] = field(default_factory=dict)
    _probes: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)
    # Built once per run and judge, not per call: LangChain's with_structured_output converts the schema and builds
    # a parser chain each time, and the answer-length cap copies the model. Keyed by id(model) with the model kept
    # alive in the value, so an id is never reused while its entry exists.
    _runnables: dict[tuple[Any, ...], tuple[Any, Any]] = field(default_factory=dict)
    # Tiered judging (judges/_tiered.py, a wrapper judge): per tier, the items it judged, those whose final verdict it gave, its
    # errors and its cost. Judge repeats (JudgeOptions.repeats): items asked k times and how many were not unanimous.
    tiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    repeats: dict[str, Any] = field(default_factory=dict)
    # The clock of budget and rate-limit windows (seconds since the epoch) and the sleep of rate-limit waits: tests
    # pass fake ones, so windows turn over without waiting.
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[Any]] | None = None
    _limiters: dict[tuple[str, int], Any] = field(default_factory=dict)
    _spend: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def add_tier(self, tier: str, *, items: int = 0, final: int = 0, errors: int = 0, usage: Usage | None = None
                 ) -> None:
        """Count ``items`` judged by ``tier`` (``final``: whose verdict stands), and what that cost."""
        row = self.tiers.setdefault(tier, {"items": 0, "final": 0, "errors": 0, "calls": 0, "cache_hits": 0,
                                           "input_tokens": 0, "output_tokens": 0, "seconds": 0.0})
        row["items"] += items
        row["final"] += final
        row["errors"] += errors
        if usage is not None:
            row["calls"] += usage.calls
            row["cache_hits"] += usage.cache_hits
            row["input_tokens"] += usage.input_tokens
            row["output_tokens"] += usage.output_tokens
            row["seconds"] += usage.seconds

    def add_repeats(self, judge: str, k: int, *, items: int = 0, split: int = 0, deterministic: bool = False
                    ) -> None:
        """Count items asked ``k`` times of ``judge`` and how many of them the repeats did not agree on (``split``);
        a ``deterministic`` judge is recorded as asked once."""
        self.repeats["k"] = max(int(self.repeats.get("k", 1)), int(k))
        if deterministic:
            names = self.repeats.setdefault("deterministic", [])
            if judge not in names:
                names.append(judge)
            return
        row = self.repeats.setdefault("judges", {}).setdefault(judge, {"items": 0, "not_unanimous": 0})
        row["items"] += items
        row["not_unanimous"] += split

    def limiter(self, identity: str, model: Any = None, name: str | None = None) -> Any:
        """The adaptive limit on judge calls in flight per model on this loop (``judges._limiter``): at most
        ``JudgeOptions.max_concurrency``, or more when the model asks for it (``contextjudge_min_concurrency``: the
        embedded judge has no rate limit, and the calls it has waiting are embedded together); halved on the
        provider's 429s and grown back after successes."""
        key = (identity, id(asyncio.get_running_loop()))
        lim = self._limiters.get(key)
        if lim is None:
            from ._limiter import AdaptiveLimiter  # noqa: PLC0415

            n = max(self.options.max_concurrency, int(getattr(model, "contextjudge_min_concurrency", 0) or 0))
            lim = self._limiters[key] = AdaptiveLimiter(n, name=name or identity)
        return lim

    @property
    def throttle(self) -> dict[str, dict[str, Any]]:
        """Per judge: its in-flight limit now and at most, the lowest it fell to, the 429s seen, the decreases and
        increases of the limit, and the peak of calls in flight (summed over event loops)."""
        out: dict[str, dict[str, Any]] = {}
        for lim in list(self._limiters.values()):
            st = lim.stats()
            row = out.get(lim.name)
            if row is None:
                out[lim.name] = st
                continue
            for k in ("throttled", "decreases", "increases", "inflight"):
                row[k] += st[k]
            for k in ("limit", "max", "peak_inflight"):
                row[k] = max(row[k], st[k])
            row["lowest"] = min(row["lowest"], st["lowest"])
        return out

    def spend_store(self) -> Any:
        """Where budget and rate-limit windows are kept: the run's store (the verdict cache's backend) when it has
        them, so every process of the app that shares it shares the windows; else None (this process's)."""
        backend = getattr(self.cache, "backend", None)
        return backend if hasattr(backend, "spend_reserve") else None

    def ledger(self, budget: Any, judge: str | None = None, price: Any = None, billable: bool = True) -> Any:
        """The ``BudgetLedger`` of ``budget`` for ``judge`` in this run (one per budget and judge). ``billable=False``
        for the embedded judge: only the budget's call limits apply to it."""
        key = ("ledger", budget, judge, bool(billable))
        led = self._spend.get(key)
        if led is None:
            from ._spend import BudgetLedger  # noqa: PLC0415

            led = self._spend[key] = BudgetLedger(budget, judge=judge, price=price, store=self.spend_store(),
                                                  clock=self.clock, billable=billable)
        return led

    def rate_gate(self, limit: Any) -> Any:
        """The ``RateGate`` of ``limit`` in this run."""
        key = ("rate", limit)
        gate = self._spend.get(key)
        if gate is None:
            from ._spend import RateGate  # noqa: PLC0415

            gate = self._spend[key] = RateGate(limit, store=self.spend_store(), clock=self.clock, sleep=self.sleep)
        return gate

    def check_budget(self, judges: Any) -> None:
        """Refuse, before anything is judged, a dollar budget on a judge with no known price and no token limit
        (``ConfigurationError``). ``judges``: the chat models that will judge."""
        budget = self.options.budget
        if budget is None:
            return
        from ._naming import judge_name  # noqa: PLC0415
        from ._protocol import wrapper_of  # noqa: PLC0415
        from ._spend import price_of  # noqa: PLC0415

        for model in judges:
            name = judge_name(model)
            key = ("checked", budget, name)
            if key in self._spend:
                continue
            wrapper = wrapper_of(model)
            billed = wrapper.contextjudge_billed() if wrapper is not None else ()
            if billed:  # a wrapper judge whose judges are billed under their own names (tiers): each on its own
                self.check_budget(billed)
            else:
                self.ledger(budget, name, price_of(model),
                            billable=not getattr(model, "contextjudge_native", False)).check()
            self._spend[key] = True

    def budget_blocked(self) -> float | None:
        """When judging resumes if the run's budget (``JudgeOptions.budget``) is spent now, else None: a cheap check
        that lets a case be skipped before any judge call."""
        budget = self.options.budget
        if budget is None:
            return None
        try:
            return self.ledger(budget).exhausted_until()
        except Exception:  # noqa: BLE001 - a store that cannot be read: the calls themselves will say
            logger.debug("contextjudge: the budget check could not read the spend", exc_info=True)
            return None

    def judge_for(self, metric: Any) -> Any:
        """The judge model ``metric`` uses in this run: its own, else the run's default, else the global default;
        None for a metric that needs no judge (the ranking metrics)."""
        if getattr(metric, "needs_judge", True) is False:
            return None
        if getattr(metric, "_model_arg", "own") is None and self.default_model is not None:
            resolved = self._default_resolved
            if resolved is None or resolved[0] is not self.default_model:
                from ._models import resolve_model  # noqa: PLC0415

                resolved = self._default_resolved = (self.default_model, resolve_model(self.default_model))
            return self._swapped(resolved[1])
        return self._swapped(metric.model)

    def _swapped(self, judge: Any) -> Any:
        got = self.judge_swap.get(id(judge)) if self.judge_swap else None
        return got[1] if got is not None and got[0] is judge else judge

    def probe(self, identity: str) -> tuple[asyncio.Future, bool]:
        """The probe of a judge's structured-output method on this loop, and whether the caller runs it (the first
        caller does; it sets the future's result when done, found or not)."""
        key = (identity, id(asyncio.get_running_loop()))
        fut = self._probes.get(key)
        if fut is not None:
            return fut, False
        fut = self._probes[key] = asyncio.get_running_loop().create_future()
        return fut, True

    def record(self, event: dict[str, Any]) -> None:
        """Hand ``event`` (one judge call or cache hit) to the run's hooks; a failing hook is logged."""
        for hook in self.on_call:
            try:
                hook(event)
            except Exception:  # noqa: BLE001 - a progress or store hook never breaks judging
                logger.exception("contextjudge: a judge-call hook failed")


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("contextjudge_run", default=None)


def current_run_context() -> RunContext | None:
    """The run context of the running code, or None outside a run."""
    return _current.get()


def tally_since(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The counts of ``now`` minus those of ``before`` (nested dicts of numbers, as ``RunContext.tiers``), for a run
    context shared by several ``evaluate`` calls; lists are taken from ``now`` as they are."""
    out: dict[str, Any] = {}
    for key, value in now.items():
        old = before.get(key)
        if isinstance(value, dict):
            sub = tally_since(value, old if isinstance(old, dict) else {})
            if sub:
                out[key] = sub
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "k":
            out[key] = value - (old or 0)
        else:
            out[key] = value
    return out


class use_run_context:  # noqa: N801 - used as a context manager, named like one
    """Make ``ctx`` the run context of the code inside ``with``."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._token: contextvars.Token | None = None

    def __enter__(self) -> RunContext:
        self._token = _current.set(self.ctx)
        return self.ctx

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _current.reset(self._token)


_IN_JUDGE: contextvars.ContextVar[bool] = contextvars.ContextVar("contextjudge_in_judge", default=False)


def in_judge_call() -> bool:
    """True in code a judge call runs (and the threads and tasks it starts with its context): capture integrations
    use it to never record a judge's own framework traffic as a test case."""
    return _IN_JUDGE.get()


def _judge_context() -> contextvars.Context:
    ctx = contextvars.Context()
    ctx.run(_IN_JUDGE.set, True)
    return ctx

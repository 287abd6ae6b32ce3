"""Judge-call context: the ``RunContext`` judge calls of one run share (options, verdict cache, semaphores, usage, the
run's default judge), held in a ContextVar, and the marker that code runs inside a judge call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from .._result import Usage
from .cache import VerdictCache
from .options import JudgeOptions

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
    _semaphores: dict[tuple[str, int], asyncio.Semaphore] = field(default_factory=dict)
    _methods: dict[str, str] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Future] = field(default_factory=dict)
    _probes: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)
    # Built once per run and judge, not per call: LangChain's with_structured_output converts the schema and builds
    # a parser chain each time, and the answer-length cap copies the model. Keyed by id(model) with the model kept
    # alive in the value, so an id is never reused while its entry exists.
    _runnables: dict[tuple[Any, ...], tuple[Any, Any]] = field(default_factory=dict)
    # Tiered judging (judges/tiered.py): per tier, the items it judged, those whose final verdict it gave, its
    # errors and its cost. Judge repeats (JudgeOptions.repeats): items asked k times and how many were not unanimous.
    tiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    repeats: dict[str, Any] = field(default_factory=dict)

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

    def semaphore(self, identity: str, model: Any = None) -> asyncio.Semaphore:
        """Judge calls in flight per model: ``JudgeOptions.max_concurrency``, or more when the model asks for it
        (``contextjudge_min_concurrency``: the embedded judge has no rate limit, and the calls it has waiting are
        embedded together)."""
        key = (identity, id(asyncio.get_running_loop()))
        sem = self._semaphores.get(key)
        if sem is None:
            n = max(self.options.max_concurrency, int(getattr(model, "contextjudge_min_concurrency", 0) or 0))
            sem = self._semaphores[key] = asyncio.Semaphore(n)
        return sem

    def judge_for(self, metric: Any) -> Any:
        """The judge model ``metric`` uses in this run: its own, else the run's default, else the global default."""
        if getattr(metric, "_model_arg", "own") is None and self.default_model is not None:
            resolved = self._default_resolved
            if resolved is None or resolved[0] is not self.default_model:
                from .models import resolve_model  # noqa: PLC0415

                resolved = self._default_resolved = (self.default_model, resolve_model(self.default_model))
            return resolved[1]
        return metric.model

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
        for hook in self.on_call:
            try:
                hook(event)
            except Exception:  # noqa: BLE001 - a progress or store hook never breaks judging
                logger.exception("contextjudge: a judge-call hook failed")


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("contextjudge_run", default=None)


def current_run_context() -> RunContext | None:
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

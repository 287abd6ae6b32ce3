"""What a worker did (``WorkerCounts``) and what its budget has spent (``budget_windows``): the figures of its summary
line, ``contextjudge worker``'s last line, and its metrics (``engine/_worker_metrics.py``, the OTel exporter)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...store import ResultsStore

__all__ = ["SKIPPED_ADVICE", "WorkerCounts", "budget_windows"]

# what the summaries of `contextjudge worker` and `score` say about cases a spent budget set aside
SKIPPED_ADVICE = ("budget-skipped cases stay in the store, unjudged: `contextjudge worker --requeue-skipped` queues "
                  "them again when the budget's next window opens (or `contextjudge score --run RUN` judges a run's "
                  "unscored cases now)")


@dataclass
class WorkerCounts:
    """What a worker did: cases claimed, judged (results written), skipped by a budget, lost (the lease passed to
    another worker before the results were written: nothing written), with an error result, given back at a
    stop, completed with no result (no metric applies to the case's kind), and given back because the judge was
    down (every result an unavailable-judge error: the case is queued again, not completed, and not counted as an
    attempt)."""

    claimed: int = 0
    judged: int = 0
    skipped_budget: int = 0
    lost_lease: int = 0
    errors: int = 0
    released: int = 0
    no_metric: int = 0
    judge_down: int = 0
    requeued: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)

    def line(self, owner: str) -> str:
        """One line: what worker ``owner`` did, and what to do about the cases a budget set aside."""
        c = self
        line = (f"worker {owner}: {c.judged} case(s) judged, {c.skipped_budget} skipped (budget), "
                f"{c.lost_lease} lost to an expired lease, {c.errors} with errors, {c.released} given back, "
                f"{c.no_metric} with no applicable metric, {c.judge_down} given back while the judge was down "
                f"({c.claimed} claimed)")
        if c.requeued:
            line += f"; {c.requeued} budget-skipped case(s) queued again when the budget's window opened"
        if c.skipped_budget:
            line += ("; " + SKIPPED_ADVICE)
        return line


def budget_windows(store: ResultsStore, budget: Any) -> list[tuple[str, str, str, float, float | None]]:
    """(budget name, window kind, unit, spent in the current window, limit) of ``budget`` in ``store``."""
    if budget is None:
        return []
    from ...judges import window_start

    out: list[tuple[str, str, str, float, float | None]] = []
    now = time.time()
    for kind, length, max_tokens, max_dollars, max_calls in budget.windows():
        try:
            row = store.spend_get(f"budget:{budget.name}:{kind}", window_start(now, length)) or {}
        except Exception:  # noqa: BLE001 - a scrape must answer
            row = {}
        out.append((budget.name, kind, "tokens", float(row.get("tokens", 0)), max_tokens))
        out.append((budget.name, kind, "dollars", float(row.get("dollars", 0.0)), max_dollars))
        out.append((budget.name, kind, "calls", float(row.get("calls", 0)), max_calls))
    return out

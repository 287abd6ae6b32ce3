"""Scoring one captured case in the session's run, and skipping it when the judge budget is spent."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .._aio import in_store_thread, run_sync
from .._result import EvaluationResult, MetricResult
from ..engine import BudgetSkip, score_within_budget
from ..judges import use_run_context
from ._case import DONE, STORED, CapturedCase, marked
from ._kept import KeptCases

__all__ = ["CaseScoring", "score_unscored"]

logger = logging.getLogger("contextjudge")
_UNSET: Any = object()


class CaseScoring:
    """Scores a case with every applicable metric in the session's run (``engine._score.score_case``, as
    ``evaluate`` does); a metric missing a field gives an error result that says what to do (never a silent skip).
    A case the budget refuses is forgotten and counted, with one warning per budget window."""

    def __init__(self, kept: KeptCases) -> None:
        self.kept = kept
        self._warned_budget: Any = _UNSET

    async def score(self, case: CapturedCase) -> list[MetricResult]:
        """Score ``case`` (assembled here first, off the app's thread); its results, or [] when it was left out."""
        kept, run = self.kept, self.kept.run
        if not kept.prepare(case):
            return []

        async def store_and_begin() -> None:  # only once the budget lets the case be judged
            if kept.store is not None and not marked(case, STORED):
                await in_store_thread(kept.store_case, case)  # a store write never holds up the shared loop
            await run.abegin(kept.metrics)  # with a store, the run exists from the first case on

        with use_run_context(run.context):
            results = await score_within_budget(run, case.case_id, case.test_case, kept.metrics,
                                                before=store_and_begin)
        if isinstance(results, BudgetSkip):
            self.skip_budget(case, results.resumes_at, results if results.refused else None)
            return []
        results = results or []
        kept.scored(case, results)
        return results

    def skip_budget(self, case: CapturedCase, resumes_at: float | None, why: Any = None) -> None:
        """Skip ``case`` because the judge budget is spent: forget it and count it. One warning per budget window:
        a refused call's (``why``) is the budget ledger's own, said once per window in the process; a window found
        spent before any call (another process spent it) is said here, once."""
        if resumes_at is None:
            resumes_at = getattr(why, "resumes_at", None)
        with self.kept.lock:
            self.kept.counts.skipped_budget += 1
            self.kept.forget(case)
            warn = why is None and resumes_at != self._warned_budget
            self._warned_budget = resumes_at
        if warn:
            until = (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(resumes_at)) if resumes_at
                     else "the budget's next window")
            logger.warning("contextjudge: the judge budget is spent for this window (by this or another process of "
                           "the app), so capture skips cases until %s; session.counters['skipped_budget'] counts "
                           "them. Raise the Budget's limits or lower sample_rate to judge more.", until)


def score_unscored(kept: KeptCases, ready: list[CapturedCase], in_flight: Callable[[], set[int]],
                   **kwargs: Any) -> EvaluationResult:
    """Score the ``ready`` cases not scored yet (leaving those ``in_flight`` to the mode) and, with a store, the
    run's unscored cases only the store holds, through ``evaluate`` in the session's run; the results are attached
    to the cases in memory and sent to ``on_result``. Keyword arguments go to ``evaluate``."""
    from ..engine import aevaluate  # noqa: PLC0415

    todo = [c for c in ready if not marked(c, DONE)]
    with kept.lock:
        busy = in_flight()
        todo = [c for c in todo if id(c) not in busy]
        in_memory = {c.case_id for c in kept.cases}
    cases, keys = [c.test_case for c in todo], [c.case_id for c in todo]
    store, run = kept.store, kept.run
    if store is not None and run.begun:
        try:
            stored = [sc for sc in store.unscored_cases(run.id) if sc.case_key not in in_memory]
        except Exception:  # noqa: BLE001 - the store is unreachable: score what is in memory
            logger.exception("contextjudge: could not read this run's unscored cases from the store")
            stored = []
        cases += [sc.test_case for sc in stored]
        keys += [sc.case_key for sc in stored]
        with kept.lock:
            kept.counts.judged += len(stored)
    result = run_sync(aevaluate(cases, kept.metrics, run=run, case_keys=keys, **kwargs))
    by_index = {tr.index: tr for tr in result.test_results}
    for i, case in enumerate(todo):
        tr = by_index.get(i)
        if tr is not None:
            kept.scored(case, tr.metrics_data)
    if store is not None:
        with kept.lock:
            kept.counts.backlog = 0  # what the store held unscored is scored now
    return result

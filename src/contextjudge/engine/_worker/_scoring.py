"""One claimed case scored and settled (``_CaseScoring``): completed (its results and queue row in one group
commit, while the lease holds), given back (the judge is down, a failure) or set aside (the budget is spent)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..._aio import in_store_thread
from .._run import Run
from .._score import BudgetSkip, score_within_budget
from ._budget import _SetAside
from ._counts import WorkerCounts
from ._leases import _Leases
from ._outage import _Outage, judge_down

logger = logging.getLogger("contextjudge")

# a hook on each scored case's results: ``hook(test_case, results, case_key, run_id)``, awaited when it returns an
# awaitable (``Worker(on_results=...)``)
OnResults = Callable[[Any, list, str, str], Any]


class _Owner(Protocol):
    """What case scoring reads of the worker that owns it (``_loop.Worker`` is one): a Protocol here, since the
    worker's module imports this one."""

    @property
    def store(self) -> Any: ...
    @property
    def owner(self) -> str: ...
    @property
    def counts(self) -> WorkerCounts: ...
    @property
    def lease(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def backoff_max(self) -> float: ...
    @property
    def call_hooks(self) -> Sequence[Callable[[dict[str, Any]], Any]]: ...
    @property
    def on_results(self) -> Sequence[OnResults]: ...
    def stop(self, now: bool = False) -> None: ...

# the (run id, case key) of the case a task scores: judge-call events are filed under it, and written with the
# case's results in the same transaction
_CASE: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("contextjudge_worker_case",
                                                                              default=None)


_GROUP_MAX = 64  # cases written in one group commit at most


class _CaseScoring:
    """Scores the cases a ``Worker`` claimed and settles each: completed (results and queue row in one transaction,
    while the lease holds), given back (the judge is down, a failure) or set aside (the budget is spent). It files
    each judge-call event under its case, to be written with the case's results, and knows which cases are being
    completed or were lost to another worker. ``run`` and ``once`` are those of the worker's current ``run()``."""

    def __init__(self, worker: _Owner, outage: _Outage, leases: _Leases, budget: _SetAside,
                 metrics_for: Callable[[str], list[Any]], say: Callable[[str], None]) -> None:
        self.worker, self.outage, self.leases, self.budget = worker, outage, leases, budget
        self.metrics_for, self.say = metrics_for, say
        self.run: Run | None = None
        self.once = False
        self.calls: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.completing: set[tuple[str, str]] = set()
        self.lost: set[tuple[str, str]] = set()
        # group commit: the cases scored while a complete is being written wait here, and are written together in
        # the next transaction (``store.complete_many``), so a busy worker pays one commit for many cases
        self._pending: list[tuple[tuple[str, str, list[Any], list[dict[str, Any]]], asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def _write(self, run_id: str, key: str, results: list[Any], calls: list[dict[str, Any]]) -> bool:
        """Complete one case in the worker's next group commit; True when its results were written."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = ((run_id, key, results, calls), fut)
        self._pending.append(entry)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        try:
            return bool(await asyncio.shield(fut))
        except asyncio.CancelledError:
            if entry in self._pending:  # not handed to the store yet: nothing of it will be written
                self._pending.remove(entry)
            raise

    async def flushed(self) -> None:
        """Wait for the group commit being written, if any (a worker that stops lets it finish)."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def _flush(self) -> None:
        """Write what waits, a transaction at a time, until nothing waits."""
        while self._pending:
            batch, self._pending = self._pending[:_GROUP_MAX], self._pending[_GROUP_MAX:]
            try:
                oks = await in_store_thread(self.worker.store.complete_many, self.worker.owner,
                                            [item for item, _f in batch])
            except Exception as exc:  # noqa: BLE001 - each case's scoring sees it, as from its own complete
                for _item, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for (_item, fut), ok in zip(batch, oks, strict=True):
                    if not fut.done():
                        fut.set_result(ok)

    def cancel_lost(self, lost: list[tuple[str, str]], tasks: dict[tuple[str, str], asyncio.Task]) -> None:
        """Cancel the tasks of the cases another worker took (none being completed, nor already settled)."""
        for ref in lost:
            if ref not in self.leases:  # completed or given back meanwhile
                continue
            task = tasks.get(ref)
            if task is not None and ref not in self.completing and not task.done():
                self.lost.add(ref)
                task.cancel()

    async def give_back(self, run_id: str, key: str, *, count: bool = True, failed: str | None = None) -> None:
        """Give a case back to the queue (``failed``: the claim counts as a failed attempt, with this note)."""
        try:
            kw: dict[str, Any] = {"failed": True, "note": failed} if failed is not None else {}
            if await in_store_thread(self.worker.store.release, self.worker.owner, run_id, key, **kw) and count and not failed:
                self.worker.counts.released += 1
        except Exception:
            logger.exception("contextjudge: could not give back case %s of run %s; it returns to the queue when "
                             "its lease expires", key, run_id)
        self.leases.discard((run_id, key))

    def on_call(self, event: dict[str, Any]) -> None:
        """A judge-call event of the run: to the call hooks, to the outage state, and filed under its case."""
        for hook in self.worker.call_hooks:
            try:
                hook(event)
            except Exception:  # noqa: BLE001 - metrics never break judging
                logger.debug("contextjudge: a judge-call hook failed", exc_info=True)
        if not event.get("cached"):
            ended, since = self.outage.answered()
            if ended and since is not None:
                self.say(f"worker {self.worker.owner}: the judge answers again after {time.time() - since:.0f}s down; "
                          f"{self.worker.counts.judge_down} case(s) were given back meanwhile")
        ref = _CASE.get()
        if ref is not None:
            self.calls.setdefault(ref, []).append(event)

    async def score(self, sc: Any) -> None:
        """Score a claimed case and settle it: completed, given back or set aside."""
        run_id, key = sc.run_id, sc.case_key
        ref = (run_id, key)
        _CASE.set(ref)
        assert self.run is not None
        try:
            metrics = await in_store_thread(self.metrics_for, run_id)
            started = time.monotonic()
            results = await score_within_budget(self.run, key, sc.test_case, metrics)
            if isinstance(results, BudgetSkip):
                await self.put_aside(ref, self.budget.note(results.resumes_at, results.scope))
                return
            results = list(results or [])
            # a result says the judge could not be reached or kept failing past its retries (an outage, not this
            # case's fault: a refusal of the request itself is not counted as one): give the case back, its
            # attempt uncounted, instead of completing it with errors; its verdicts already answered are in the
            # store's cache, so scoring it again asks only what failed
            down = [r for r in results if judge_down(r)]
            if down:
                await self._judge_unavailable(ref, down[0].error or "", answered=self.outage.last_ok >= started)
                return
            await self._complete(sc, ref, results)
        except asyncio.CancelledError:
            if ref in self.lost:  # another worker has it: nothing of this case is written here
                self.worker.counts.lost_lease += 1
                self.leases.discard(ref)
                return
            raise  # stopping: _wind_down gives it back
        except Exception as exc:
            self.worker.counts.errors += 1
            logger.exception("contextjudge: case %s of run %s could not be scored; given back to the queue (set aside "
                             "after %d failed claims)", key, run_id, self.worker.max_attempts)
            # the claim counts as an attempt: a case that fails every time is set aside, not claimed forever
            await self.give_back(run_id, key, failed=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self.completing.discard(ref)
            self.calls.pop(ref, None)
            self.lost.discard(ref)

    async def _judge_unavailable(self, ref: tuple[str, str], error: str, answered: bool = False) -> None:
        """Give a case back (queued, the attempt not counted) because the judge is down; pause claiming, doubling
        the pause from 1 s up to ``backoff_max`` while the outage lasts; warn once per outage. ``answered``: other
        calls were answered since the case started (an outage that began while it was in flight, or a judge that
        fails on this case alone: see below)."""
        self.worker.counts.judge_down += 1
        # other calls answered since this case started: an outage that began while it was in flight (its attempt is
        # not counted), or a judge that fails on this case alone; the latter, after three such give-backs here,
        # counts its attempts, so it is set aside after max_attempts, never written as errors
        if answered and self.outage.fails_alone(ref):
            await self.give_back(*ref, failed=f"the judge failed on this case while answering others: "
                                               f"{error}"[:500])
            return
        await self.give_back(*ref, count=False)
        if self.outage.step():  # an outage begins
            if self.once:
                what = ("this --once pass stops and leaves the queue as it is: run it again when the judge is back")
                self.worker.stop()
            else:
                what = (f"claiming pauses, {self.outage.backoff:g}s at first and up to {self.worker.backoff_max:g}s, and the "
                        "worker resumes by itself when the judge answers again")
            logger.warning("contextjudge: the judge is unavailable (%s). The case was given back to the queue, not "
                           "completed with an error; %s. Check the judge: its server or base_url, the API key, the "
                           "provider's status page.", (error or "")[:300], what)

    async def put_aside(self, ref: tuple[str, str], note: str) -> None:
        """Set a case aside (queue state ``skipped``) because the budget is spent."""
        self.budget.mark(self.run.context.budget_blocked() if self.run is not None else None)
        await in_store_thread(self.worker.store.release, self.worker.owner, ref[0], ref[1], state="skipped", note=note)
        self.leases.discard(ref)
        self.worker.counts.skipped_budget += 1

    async def _complete(self, sc: Any, ref: tuple[str, str], results: list[Any]) -> None:
        """Write the case's results and complete its queue row in one transaction, while the lease holds; count it
        and hand it to the ``on_results`` hooks."""
        run_id, key = ref
        self.completing.add(ref)
        ok = await self._write(run_id, key, results, self.calls.pop(ref, []))
        self.leases.discard(ref)
        self.outage.forget(ref)
        if not ok:
            self.worker.counts.lost_lease += 1
            logger.warning("contextjudge: case %s of run %s was taken by another worker (this one held it past "
                           "its %gs lease) or removed from the queue (its run deleted); its results were not "
                           "written", key, run_id, self.worker.lease)
            return
        if not results:
            self.worker.counts.no_metric += 1
        else:
            self.worker.counts.judged += 1
            if any(r.error for r in results):
                self.worker.counts.errors += 1
        for hook in self.worker.on_results:
            try:
                out = hook(sc.test_case, results, key, run_id)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                logger.exception("contextjudge: an on_results hook failed on case %s", key)

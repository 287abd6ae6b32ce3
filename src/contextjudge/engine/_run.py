"""``Run``: one run of scoring, and everything it owns: the judge context, the verdict cache, the store, its life.

Every way of scoring (``evaluate``, capture in each mode, the pytest plugin, the CLI) scores its cases inside one
``Run``. The run holds the ``RunContext`` judge calls share (options, the verdict cache, usage, the run's default
judge for metrics built without a model) and, when there is a store, opens the run there (``begin``), writes cases,
results and judge calls to it, and closes it (``end``). A run that begins, ends: ``end`` is idempotent and is
called by whoever owns the run (``evaluate`` and pytest at their end, a capture session at ``close()`` or
interpreter exit, ``score_deferred`` when it finishes a capture's cases).

Coroutines use the ``a``-forms (``abegin``, ``asave_case``, ``asave_result``, ``aend``): the store is called in the
store's threads (``_aio.in_store_thread``), so the event loop never waits on it. A judge call recorded on a loop is
written there without waiting for it; ``end`` waits for those rows first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._aio import in_store_thread, store_submit
from .._result import MetricResult
from ..errors import StoreError
from ..judges import JudgeOptions, RunContext, VerdictCache

if TYPE_CHECKING:
    from ..store import RunWrites

__all__ = ["Run", "metric_config", "metric_specs"]

logger = logging.getLogger("contextjudge")


def metric_config(metric: Any) -> dict[str, Any]:
    """What the store keeps of a metric's configuration (its class, name, threshold, template; a ranking metric's
    cut-off ``k`` and ``similarity_threshold``)."""
    out = {"class": type(metric).__name__, "name": getattr(metric, "name", None),
           "threshold": getattr(metric, "threshold", None), "strict_mode": getattr(metric, "strict_mode", None),
           "template": getattr(getattr(metric, "evaluation_template", None), "__qualname__", None)}
    for extra in ("k", "similarity_threshold"):
        if getattr(metric, extra, None) is not None:
            out[extra] = getattr(metric, extra)
    return out


def metric_specs(config: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The metrics a run's stored configuration names (as ``metric_config`` wrote them), read back: each metric's
    key (``metrics.BY_KEY``) with its recorded ``threshold`` and ``strict_mode`` as keyword arguments, in order,
    each key once; classes this contextjudge does not know are left out."""
    from ..metrics import BY_KEY  # noqa: PLC0415

    by_class: dict[str, str] = {str(cls.__name__): key for key, cls in BY_KEY.items()}
    specs: list[tuple[str, dict[str, Any]]] = []
    for m in (config or {}).get("metrics") or []:
        class_name = m.get("class") if isinstance(m, dict) else m
        key = by_class.get(class_name) if isinstance(class_name, str) else None
        if key is None or any(k == key for k, _ in specs):
            continue
        kw: dict[str, Any] = {}
        if isinstance(m, dict):
            if isinstance(m.get("threshold"), (int, float)):
                kw["threshold"] = float(m["threshold"])
            if isinstance(m.get("strict_mode"), bool):
                kw["strict_mode"] = m["strict_mode"]
            if isinstance(m.get("k"), int) and not isinstance(m.get("k"), bool):
                kw["k"] = m["k"]
            if isinstance(m.get("similarity_threshold"), (int, float)):
                kw["similarity_threshold"] = float(m["similarity_threshold"])
        specs.append((key, kw))
    return specs


class Run:
    """One run: its judge context and verdict cache, its store, and its begin / save / end.

    ``store`` is a results store or its path/URL (None: nothing is written); ``run_id`` resumes that run in the
    store; ``model`` is the judge of metrics built without one (kept here, never written onto the metrics);
    ``contain_store_errors`` logs a failing store write and goes on (capture: the app never breaks) instead of
    raising it (``evaluate``: the caller asked for the store).
    """

    def __init__(self, *, store: RunWrites | str | os.PathLike[str] | None = None, run_id: str | None = None,
                 name: str | None = None,
                 config: dict[str, Any] | None = None, judge_options: JudgeOptions | None = None,
                 model: Any = None, context: RunContext | None = None, contain_store_errors: bool = False) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ..store import open_store  # noqa: PLC0415 - optional module, loaded when asked for

            store = open_store(store)
        self.store: RunWrites | None = store
        self.id: str | None = run_id
        self.name = name
        self.config = dict(config or {})
        self.contain_store_errors = contain_store_errors
        self.store_error: str | None = None  # the store failed mid-run (see _write)
        self.context = context or RunContext(options=judge_options or JudgeOptions(),
                                             cache=VerdictCache(backend=store))
        if model is not None:
            self.context.default_model = model
        self.completed: dict[tuple[str, str], MetricResult] = {}
        self.noted_skips: set[tuple[str, str]] = set()
        self._lock = threading.RLock()
        self._pending: set[concurrent.futures.Future] = set()  # judge-call rows being written (_save_judge_call)
        self._begun = False
        self._ended = False
        self._hooked = False

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open" if self._begun else "not begun"
        return f"Run(id={self.id!r}, name={self.name!r}, {state}, store={self.store!r})"

    # ------------------------------------------------------------------------------------------ life
    @property
    def begun(self) -> bool:
        """Whether the run was opened (``begin``)."""
        return self._begun

    @property
    def ended(self) -> bool:
        """Whether the run was closed (``end``)."""
        return self._ended

    def judges(self, metrics: Sequence[Any]) -> list[dict[str, Any]]:
        """Which judges score this run (name and identity), for the store; a judge that cannot load is left out."""
        from ..judges import Calibration, judge_identity, judge_name  # noqa: PLC0415

        out: list[dict[str, Any]] = []
        for m in metrics:
            if getattr(m, "needs_judge", True) is False:
                continue
            try:
                model = self.context.judge_for(m)
                entry = {"name": judge_name(model), "identity": judge_identity(model)}
                summary = model.calibration.summary() if isinstance(getattr(model, "calibration", None),
                                                                    Calibration) else None
                if summary:  # "calibrated on N of your labels; kappa X [CI] cross-validated", per family
                    entry["calibration"] = summary
            except Exception:  # noqa: BLE001 - the metric reports its own judge failure when it runs
                continue
            if entry not in out:
                out.append(entry)
        return out

    def begin(self, metrics: Sequence[Any] = (), *, cases: int | None = None) -> str:
        """Open the run (in the store, when there is one) and return its id; a second call returns the same id."""
        with self._lock:
            if self._begun and not self._ended:
                return self.id  # type: ignore[return-value]
            self._ended = False  # an ended run that gets more work is resumed (a capture going on after
            # score_deferred), and ends again later
            if self.store is None:
                if self.id is None:
                    from ..cases.identity import new_run_id  # noqa: PLC0415

                    self.id = new_run_id()
                self._begun = True
                return self.id
            from .._version import __version__  # noqa: PLC0415

            # a capture in mode "worker" never judges: the worker's --model does, so resolving (and announcing)
            # a judge in the app's process would be wrong and noisy
            judges = [] if self.config.get("mode") == "worker" else self.judges(metrics)
            config = {**self.config, "name": self.name, "metrics": [metric_config(m) for m in metrics],
                      "judges": judges, "contextjudge": __version__, "cases": cases}
            try:
                self.id = self.store.begin_run(self.id, config)
                self.completed = self.store.completed_results(self.id)
            except Exception:
                if not self.contain_store_errors:
                    raise
                logger.exception("contextjudge: could not start a run in the store; results are kept in memory only")
                self.store = None
                self.context.cache.backend = None
                return self.begin(metrics, cases=cases)
            if not self._hooked:
                self.context.on_call.append(self._save_judge_call)
                self._hooked = True
            self._begun = True
            return self.id

    def end(self, summary: dict[str, Any] | None = None, *, status: str = "finished") -> None:
        """Close the run in the store with its summary (once; later calls do nothing), after the judge-call rows
        still being written."""
        self.flush()
        with self._lock:
            if self._ended or not self._begun:
                self._ended = self._ended or not self._begun
                return
            self._ended = True
            if self.store is None or self.id is None:  # begun with a store: its id is the store's
                return
            try:
                self.store.end_run(self.id, summary or {}, status=status)
            except Exception:
                if not self.contain_store_errors:
                    raise
                logger.exception("contextjudge: could not close run %s in the store", self.id)

    async def abegin(self, metrics: Sequence[Any] = (), *, cases: int | None = None) -> str:
        """``begin`` for a coroutine: the store is written in the store's threads, never on the event loop."""
        if self.store is None or (self._begun and not self._ended):
            return self.begin(metrics, cases=cases)
        return await in_store_thread(self.begin, metrics, cases=cases)

    async def aend(self, summary: dict[str, Any] | None = None, *, status: str = "finished") -> None:
        """``end`` for a coroutine: the judge-call rows still being written, then the run's row, off the loop."""
        if self.store is None or self._ended or not self._begun:
            self.end(summary, status=status)
            return
        with self._lock:
            pending = list(self._pending)
        if pending:  # awaited here, not waited for in a store thread that the rows may need
            await asyncio.wait([asyncio.wrap_future(f) for f in pending])
        await in_store_thread(self.end, summary, status=status)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the judge-call rows handed to the store's threads are written (``end`` does it first)."""
        with self._lock:
            pending = list(self._pending)
        if pending:
            concurrent.futures.wait(pending, timeout=timeout)

    # ------------------------------------------------------------------------------------------ writes
    def _failed(self, what: str, exc: BaseException, store: RunWrites) -> None:
        """A store write failed: contained (capture), logged and skipped; else a ``StoreError`` (a full disk, a lost
        database) stops the writing and the run goes on in memory, so the caller gets every result with the error
        (``EvaluationResult.store_error``) instead of an exception that drops what was scored; anything else is
        raised."""
        if self.contain_store_errors:
            logger.exception("contextjudge: could not write %s to the store", what, exc_info=exc)
            return
        if not isinstance(exc, StoreError):
            raise exc
        with self._lock:
            if self.store is not store:  # already given up: this write was in flight when the first one failed
                return
            self.store = None
        self.store_error = str(exc)
        logger.error("contextjudge: could not write %s to the store (%s); the run goes on with its results "
                     "in memory only, and returns them with this error.", what, exc)
        self.context.cache.backend = None

    def _write(self, what: str, fn: Any, *args: Any) -> None:
        store = self.store
        if store is None or not self._begun:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - sorted out by _failed
            self._failed(what, exc, store)

    async def _awrite(self, what: str, fn: Any, *args: Any) -> None:
        store = self.store
        if store is None or not self._begun:
            return
        try:
            await in_store_thread(fn, *args)
        except Exception as exc:  # noqa: BLE001 - sorted out by _failed
            self._failed(what, exc, store)

    def save_case(self, key: str, index: int, test_case: Any) -> None:
        """Write a test case to the run's store (nothing without one)."""
        if self.store is not None:
            self._write("a test case", self.store.save_case, self.id, key, index, test_case)

    def save_result(self, key: str, result: MetricResult) -> None:
        """Write a metric result of case ``key`` to the run's store (nothing without one)."""
        if self.store is not None:
            self._write("a result", self.store.save_result, self.id, key, result)

    async def asave_case(self, key: str, index: int, test_case: Any) -> None:
        """``save_case`` for a coroutine: written in the store's threads; it returns once the row is there, so a
        case's results that follow always find it."""
        if self.store is not None:
            await self._awrite("a test case", self.store.save_case, self.id, key, index, test_case)

    async def asave_result(self, key: str, result: MetricResult) -> None:
        """``save_result`` for a coroutine: written in the store's threads while the loop goes on."""
        if self.store is not None:
            await self._awrite("a result", self.store.save_result, self.id, key, result)

    def _save_judge_call(self, event: dict[str, Any]) -> None:
        store = self.store
        if store is None or self.id is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on a loop: write it here
            store.save_judge_call(self.id, event)
            return
        # on a loop (the judge client records every call there): the row is written in the store's threads and the
        # call goes on at once; end() waits for the rows still being written
        fut = store_submit(store.save_judge_call, self.id, event)
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._written)

    def _written(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            logger.error("contextjudge: could not write a judge call to the store: %s", exc,
                         exc_info=(type(exc), exc, exc.__traceback__))

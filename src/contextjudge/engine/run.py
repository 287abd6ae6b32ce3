"""``Run``: one run of scoring, and everything it owns: the judge context, the verdict cache, the store, its life.

Every way of scoring (``evaluate``, capture in each mode, the pytest plugin, the CLI) scores its cases inside one
``Run``. The run holds the ``RunContext`` judge calls share (options, the verdict cache, usage, the run's default
judge for metrics built without a model) and, when there is a store, opens the run there (``begin``), writes cases,
results and judge calls to it, and closes it (``end``). A run that begins, ends: ``end`` is idempotent and is
called by whoever owns the run (``evaluate`` and pytest at their end, a capture session at ``close()`` or
interpreter exit, ``score_deferred`` when it finishes a capture's cases).
"""

from __future__ import annotations


import logging
import os
import threading
from typing import Any, Sequence

from .._result import MetricResult
from ..errors import StoreError
from ..judges.cache import VerdictCache
from ..judges.context import RunContext
from ..judges.options import JudgeOptions

__all__ = ["Run", "metric_config", "metric_specs"]

logger = logging.getLogger("contextjudge")


def metric_config(metric: Any) -> dict[str, Any]:
    """What the store keeps of a metric's configuration (its class, name, threshold, template)."""
    return {"class": type(metric).__name__, "name": getattr(metric, "name", None),
            "threshold": getattr(metric, "threshold", None), "strict_mode": getattr(metric, "strict_mode", None),
            "template": getattr(getattr(metric, "evaluation_template", None), "__qualname__", None)}


def metric_specs(config: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The metrics a run's stored configuration names (as ``metric_config`` wrote them), read back: each metric's
    key (``metrics.BY_KEY``) with its recorded ``threshold`` and ``strict_mode`` as keyword arguments, in order,
    each key once; classes this contextjudge does not know are left out."""
    from ..metrics import BY_KEY  # noqa: PLC0415

    by_class = {cls.__name__: key for key, cls in BY_KEY.items()}
    specs: list[tuple[str, dict[str, Any]]] = []
    for m in (config or {}).get("metrics") or []:
        cls = m.get("class") if isinstance(m, dict) else m
        key = by_class.get(cls)
        if key is None or any(k == key for k, _ in specs):
            continue
        kw: dict[str, Any] = {}
        if isinstance(m, dict):
            if isinstance(m.get("threshold"), (int, float)):
                kw["threshold"] = float(m["threshold"])
            if isinstance(m.get("strict_mode"), bool):
                kw["strict_mode"] = m["strict_mode"]
        specs.append((key, kw))
    return specs


class Run:
    """One run: its judge context and verdict cache, its store, and its begin / save / end.

    ``store`` is a results store or its path/URL (None: nothing is written); ``run_id`` resumes that run in the
    store; ``model`` is the judge of metrics built without one (kept here, never written onto the metrics);
    ``contain_store_errors`` logs a failing store write and goes on (capture: the app never breaks) instead of
    raising it (``evaluate``: the caller asked for the store).
    """

    def __init__(self, *, store: Any = None, run_id: str | None = None, name: str | None = None,
                 config: dict[str, Any] | None = None, judge_options: JudgeOptions | None = None,
                 model: Any = None, context: RunContext | None = None, contain_store_errors: bool = False) -> None:
        if isinstance(store, (str, os.PathLike)):
            from ..store import open_store  # noqa: PLC0415 - optional module, loaded when asked for

            store = open_store(store)
        self.store = store
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
        self._begun = False
        self._ended = False
        self._hooked = False

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open" if self._begun else "not begun"
        return f"Run(id={self.id!r}, name={self.name!r}, {state}, store={self.store!r})"

    # ------------------------------------------------------------------------------------------ life
    @property
    def begun(self) -> bool:
        return self._begun

    @property
    def ended(self) -> bool:
        return self._ended

    def judges(self, metrics: Sequence[Any]) -> list[dict[str, Any]]:
        """Which judges score this run (name and identity), for the store; a judge that cannot load is left out."""
        from ..judges.models import judge_identity, judge_name  # noqa: PLC0415

        out: list[dict[str, Any]] = []
        for m in metrics:
            try:
                model = self.context.judge_for(m)
                entry = {"name": judge_name(model), "identity": judge_identity(model)}
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
        """Close the run in the store with its summary (once; later calls do nothing)."""
        with self._lock:
            if self._ended or not self._begun:
                self._ended = self._ended or not self._begun
                return
            self._ended = True
            if self.store is None:
                return
            try:
                self.store.end_run(self.id, summary or {}, status=status)
            except Exception:
                if not self.contain_store_errors:
                    raise
                logger.exception("contextjudge: could not close run %s in the store", self.id)

    # ------------------------------------------------------------------------------------------ writes
    def _write(self, what: str, fn: Any, *args: Any) -> None:
        if self.store is None or not self._begun:
            return
        if not self.contain_store_errors:
            try:
                fn(*args)
            except StoreError as exc:
                # a full disk or a lost database: stop writing and keep scoring, so the caller gets every result
                # with the error (EvaluationResult.store_error) instead of an exception that drops what was scored
                self.store_error = str(exc)
                logger.error("contextjudge: could not write %s to the store (%s); the run goes on with its results "
                             "in memory only, and returns them with this error.", what, exc)
                self.store = None
                self.context.cache.backend = None
            return
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - capture never breaks the app over its store
            logger.exception("contextjudge: could not write %s to the store", what)

    def save_case(self, key: str, index: int, test_case: Any) -> None:
        if self.store is not None:
            self._write("a test case", self.store.save_case, self.id, key, index, test_case)

    def save_result(self, key: str, result: MetricResult) -> None:
        if self.store is not None:
            self._write("a result", self.store.save_result, self.id, key, result)

    def _save_judge_call(self, event: dict[str, Any]) -> None:
        if self.store is not None and self.id is not None:
            self.store.save_judge_call(self.id, event)

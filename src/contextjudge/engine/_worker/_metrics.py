"""Which metrics a worker scores a run's cases with: those the run's configuration names, else the defaults
(``metrics_for_run``), or the worker's own (``MetricsByRun``, one list per run, built once)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...metrics import default_metric_keys
from .._run import metric_specs

if TYPE_CHECKING:
    from ...store import RunReads

__all__ = ["DEFAULT_METRIC_KEYS", "MetricsByRun", "metrics_for_run"]

# what a worker scores a run with no metrics in its configuration with (`contextjudge score` reads that run's cases
# instead: metrics.default_metrics_for)
DEFAULT_METRIC_KEYS = tuple(default_metric_keys(expected_output=True, conversations=True))


def metrics_for_run(config: dict[str, Any], *, threshold: float | None = None,
                    thresholds: dict[str, float] | None = None, default: Sequence[str] = DEFAULT_METRIC_KEYS
                    ) -> list[Any]:
    """The metrics a stored run is scored with: those its configuration names (class, threshold, strict mode, as
    ``Run.begin`` wrote them), else ``default`` (metric keys). ``threshold`` (every metric) and ``thresholds`` (by
    metric key) override the recorded thresholds. Built without a judge: the worker's run gives them its own."""
    from ...metrics import from_keys

    specs = metric_specs(config) or [(k, {}) for k in default]
    recorded = {key: kw.pop("threshold", None) for key, kw in specs}
    given = {key: (thresholds or {}).get(key, threshold) for key, _ in specs}
    return from_keys([key for key, _ in specs], thresholds={k: given[k] if given[k] is not None else recorded[k]
                                                            for k in recorded}, options=dict(specs))


class MetricsByRun:
    """The metrics a worker scores each run with, built once per run: ``metrics`` (a list for every run, a callable
    ``(run config) -> metrics``, or None: ``metrics_for_run``), the run's configuration read from ``store``."""

    def __init__(self, store: RunReads, metrics: Sequence[Any] | Callable[[dict[str, Any]], Sequence[Any]] | None) -> None:
        self.store, self.metrics = store, metrics
        self._by_run: dict[str, list[Any]] = {}

    def __call__(self, run_id: str) -> list[Any]:
        got = self._by_run.get(run_id)
        if got is None:
            if self.metrics is not None and not callable(self.metrics):
                got = list(self.metrics)
            else:
                try:
                    config = self.store.run_info(run_id).config
                except Exception:  # noqa: BLE001 - a run deleted meanwhile: its defaults
                    config = {}
                got = list(self.metrics(config)) if callable(self.metrics) else metrics_for_run(config)
            self._by_run[run_id] = got
        return got

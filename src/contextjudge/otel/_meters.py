"""Results as OpenTelemetry metrics (``_ResultMeters``): counts, scores and judge usage by metric and retriever, and a
worker's case counts."""

from __future__ import annotations

import logging
from typing import Any

from .._result import is_embedded_judge
from .._version import __version__
from ..cases.provenance import RETRIEVER_KEY

logger = logging.getLogger("contextjudge")


class _ResultMeters:
    """The OpenTelemetry metric instruments an ``OTelExporter`` records results on (``metrics=True``)."""

    def __init__(self, meter_provider: Any) -> None:
        from opentelemetry import metrics as otel_metrics  # noqa: PLC0415 - the API, installed with the tracer's

        provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        meter = provider.get_meter("contextjudge", __version__)
        self._meter = meter
        self._m: dict[str, Any] = {
            "results": meter.create_counter("contextjudge.results", unit="{result}",
                                            description="Metric results, by metric, retriever and outcome"),
            "score": meter.create_histogram("contextjudge.score", unit="1",
                                            description="Metric scores (0 to 1), by metric and retriever"),
            "calls": meter.create_counter("contextjudge.judge.calls", unit="{call}",
                                          description="Judge calls made for the results"),
            "tokens": meter.create_counter("contextjudge.judge.tokens", unit="{token}",
                                           description="Judge tokens of the results (input / output)"),
            "cost": meter.create_counter("contextjudge.judge.cost", unit="USD",
                                         description="Judge dollars of the results (where the price is known)"),
        }

    def record(self, test_case: Any, results: list[Any]) -> None:
        """Count the case's results (by metric, retriever and outcome), their scores and their judge usage."""
        m = self._m
        meta = getattr(test_case, "additional_metadata", None) or {}
        retriever = str(meta.get(RETRIEVER_KEY) or "")
        for r in results:
            try:
                name = str(getattr(r, "name", "metric"))
                score = getattr(r, "score", None)
                outcome = "error" if score is None else ("pass" if getattr(r, "success", False) else "fail")
                attrs = {"contextjudge.metric": name, "contextjudge.retriever": retriever}
                m["results"].add(1, {**attrs, "contextjudge.outcome": outcome})
                if score is not None:
                    m["score"].record(float(score), attrs)
                u = getattr(r, "usage", None)
                judge = {"contextjudge.judge": str(getattr(r, "evaluation_model", None) or "?")}
                if u is not None:
                    if u.calls:
                        m["calls"].add(int(u.calls), judge)
                    billed = not is_embedded_judge(judge["contextjudge.judge"])
                    if billed and u.input_tokens:
                        m["tokens"].add(int(u.input_tokens), {**judge, "contextjudge.kind": "input"})
                    if billed and u.output_tokens:
                        m["tokens"].add(int(u.output_tokens), {**judge, "contextjudge.kind": "output"})
                    if u.cost:
                        m["cost"].add(float(u.cost), judge)
            except Exception:  # noqa: BLE001 - metrics never break scoring
                logger.debug("contextjudge: could not record OpenTelemetry metrics", exc_info=True)

    def observe_worker(self, worker: Any) -> None:
        """Report ``worker``'s case counts (``contextjudge.worker.cases``, by outcome) as an observable counter."""
        from opentelemetry.metrics import Observation  # noqa: PLC0415

        def observe(_options: Any) -> list[Any]:
            return [Observation(int(v), {"contextjudge.outcome": k}) for k, v in worker.counts.to_dict().items()]

        self._meter.create_observable_counter(
            "contextjudge.worker.cases", callbacks=[observe], unit="{case}",
            description="Cases by what became of them in the worker")

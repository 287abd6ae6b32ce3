"""Exporters with providers of their own: given span exporters and metric readers (``exporter_for``), or configured
from the standard ``OTEL_*`` variables (``exporter_from_environment``, for ``contextjudge worker --otel``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, cast

from ..errors import ConfigurationError
from ._delivery import _Counting
from ._spans import OTelExporter, _require_api


def exporter_for(span_exporters: Iterable[Any], *, metric_readers: Iterable[Any] = (), resource: Any = None,
                 **kwargs: Any) -> OTelExporter:
    """An exporter with providers of its own: its evaluation spans go, in batches, to ``span_exporters`` (SDK span
    exporters; what each delivers or fails to is counted, so ``flush`` can say what did not arrive), and, with
    ``metric_readers`` (SDK metric readers, e.g. a ``PeriodicExportingMetricReader``), its metrics too. Keyword
    arguments go to ``OTelExporter``."""
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter  # noqa: PLC0415

    provider = TracerProvider(resource=resource) if resource is not None else TracerProvider()
    counting = [_Counting(e) for e in span_exporters]
    for c in counting:
        provider.add_span_processor(BatchSpanProcessor(cast(SpanExporter, c)))  # an exporter by its methods
    readers = list(metric_readers)
    meter_provider = None
    if readers:
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415

        meter_provider = MeterProvider(metric_readers=readers, resource=resource) if resource is not None else \
            MeterProvider(metric_readers=readers)
    exporter = OTelExporter(provider, meter_provider=meter_provider, **kwargs)
    exporter._counting = counting  # noqa: SLF001
    exporter._owns_provider = True  # noqa: SLF001
    exporter._owns_meters = meter_provider is not None  # noqa: SLF001
    return exporter


def _named_exporters(variable: str, default: str, group: str, order: list[str]
                     ) -> tuple[list[str], dict[str, Any], list[str]]:
    """The exporters ``variable`` names (comma-separated; ``none`` is no exporter), the installed ones (the SDK's
    entry points of ``group``; ``otlp`` is the first of ``order`` installed when no package registers that name),
    and the names that are not installed."""
    from importlib.metadata import entry_points  # noqa: PLC0415

    names = [n.strip() for n in os.environ.get(variable, default).split(",")
             if n.strip() and n.strip().lower() != "none"]
    if not names:
        return [], {}, []
    available = {ep.name: ep for ep in entry_points(group=group)}
    if "otlp" not in available:
        for alias in order:
            if alias in available:
                available["otlp"] = available[alias]
                break
    return names, available, [n for n in names if n not in available]


def exporter_from_environment(**kwargs: Any) -> OTelExporter:
    """An exporter with a tracer provider of its own, configured from the standard ``OTEL_*`` variables.

    ``OTEL_TRACES_EXPORTER`` (default ``otlp``; a comma-separated list; ``console`` prints spans; ``none``) names
    the span exporters, found through the SDK's ``opentelemetry_traces_exporter`` entry points, each configured by
    its own variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``...). The resource comes from
    ``OTEL_SERVICE_NAME`` (default ``contextjudge-worker``) and ``OTEL_RESOURCE_ATTRIBUTES``. Spans are sent in
    batches, flushed at ``close()`` and at interpreter exit. Keyword arguments go to ``OTelExporter``.
    """
    _require_api()
    try:
        import opentelemetry.sdk.trace.export  # noqa: F401, PLC0415 - only whether the SDK is installed
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError("--otel needs the OpenTelemetry SDK: pip install 'contextjudge[otel]' (and an "
                                 "exporter, e.g. opentelemetry-exporter-otlp).") from exc
    # "otlp" is the SDK's name for OTLP over the protocol OTEL_EXPORTER_OTLP_PROTOCOL names (gRPC unless it says
    # http/protobuf); the packages register their exporters as otlp_proto_grpc / otlp_proto_http
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    order = (["otlp_proto_http", "otlp_proto_grpc"] if (protocol or "").startswith("http")
             else ["otlp_proto_grpc", "otlp_proto_http"] if protocol else ["otlp_proto_http", "otlp_proto_grpc"])
    names, available, missing = _named_exporters("OTEL_TRACES_EXPORTER", "otlp", "opentelemetry_traces_exporter",
                                                  order)
    if missing:
        hint = ("pip install opentelemetry-exporter-otlp" if any(n.startswith("otlp") for n in missing)
                else "install the package that provides it")
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER names {', '.join(missing)}, which is not installed ({hint}); installed: "
            f"{', '.join(sorted(available)) or 'none'}. Set OTEL_TRACES_EXPORTER=console to print the spans.")
    attributes = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "contextjudge-worker"
    readers = []
    metric_names, m_available, m_missing = _named_exporters("OTEL_METRICS_EXPORTER", "none",
                                                            "opentelemetry_metrics_exporter", order)
    if metric_names:  # the same numbers as OTel metrics, when OTEL_METRICS_EXPORTER names an exporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: PLC0415

        if m_missing:
            raise ConfigurationError(
                f"OTEL_METRICS_EXPORTER names {', '.join(m_missing)}, which is not installed; installed: "
                f"{', '.join(sorted(m_available)) or 'none'}. Set OTEL_METRICS_EXPORTER=console to print them, or none.")
        readers = [PeriodicExportingMetricReader(m_available[n].load()()) for n in metric_names]
    return exporter_for([available[n].load()() for n in names], metric_readers=readers,
                        resource=Resource.create(attributes), **kwargs)

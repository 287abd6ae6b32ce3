"""Metric results as OpenTelemetry evaluation spans in the traced request's trace (OpenInference conventions).

``import contextjudge`` never imports OpenTelemetry; this module imports it only when an exporter is built.

- ``span_context_now() -> dict | None``: the active span's ids as ``provenance.OTEL_KEY`` describes, or None when
  the app has no active span. Costs next to nothing when the app never imported ``opentelemetry`` (one read of
  ``sys.modules``). The integrations call it on the app's thread at the start of the root call and at the
  retrieval, and join the two with ``case_trace``.
- ``OTelExporter(tracer_provider=None)``: ``export(test_case, results, *, case_key=None, run_id=None) -> int`` makes
  one evaluation span per result in the case's recorded trace: its parent is the request's span (which has ended
  by the time a score exists), with a link to the retriever's span; a case with no recorded trace is skipped
  (counted in ``skipped``). As a session callback: ``session.on_result.append(exporter)`` (called as
  ``exporter(case, result)``), or ``exporter.attach(session)``, which also records the session's run id. As the
  worker's hook: ``exporter(test_case, results, case_key, run_id)``.
- ``exporter_from_environment() -> OTelExporter``: for ``contextjudge worker --otel``: the SDK's tracer provider
  configured from the standard ``OTEL_*`` environment variables (``OTEL_TRACES_EXPORTER``, ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, the exporter's own ``OTEL_EXPORTER_OTLP_*``), or a ``ConfigurationError`` that says
  what to install.

Each evaluation span is named ``contextjudge.eval <metric>`` and carries:

- ``openinference.span.kind`` = ``EVALUATOR``;
- the result in OpenInference's feedback form (spec "Annotations and Evaluations"), flattened at index 0:
  ``evaluations.0.evaluation.name`` (the metric), ``.score``, ``.label`` (``pass``/``fail``), ``.explanation`` (the
  judge's reason, or the error), ``.annotator_kind`` (``LLM`` for a model judge, ``CODE`` for the embedded local
  judge), ``.identifier`` (``[<run id>:]<case key>:<metric>``, stable, so a result exported twice is one result) and
  ``.metadata`` (a JSON object: threshold, success, judge, case key, run id); missing fields are omitted;
- the same result as the OpenTelemetry GenAI event ``gen_ai.evaluation.result`` on the span;
- ``contextjudge.metric``, ``contextjudge.score``, ``contextjudge.threshold``, ``contextjudge.success``,
  ``contextjudge.judge``, ``contextjudge.case_key``, ``contextjudge.run_id`` and, for an error result,
  ``contextjudge.error_type``; an error result also has the status ERROR with the error as its description.

The span is sampled the way its request was (the recorded ``trace_flags``): a parent-based sampler drops the
evaluations of requests it did not sample.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, Iterable

from ._version import __version__
from .cases.provenance import otel_of
from .errors import ConfigurationError

__all__ = ["OTelExporter", "case_trace", "exporter_from_environment", "span_context_now"]

logger = logging.getLogger("contextjudge")

EVAL_SPAN_PREFIX = "contextjudge.eval "
_GENAI_EVENT = "gen_ai.evaluation.result"
_MAX_TEXT = 4000  # an explanation or input longer than this is cut: span attributes are not a document store


# ---------------------------------------------------------------------------------------------------- at capture
def span_context_now() -> dict[str, Any] | None:
    """The active OpenTelemetry span's ids (``{"trace_id", "span_id", "trace_flags"}``), or None.

    None when the app never imported ``opentelemetry`` (nothing is imported here), when no span is active, or
    when the active span is invalid. Never raises.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
                "trace_flags": int(ctx.trace_flags)}
    except Exception:  # noqa: BLE001 - an odd tracer must never break the app's call
        return None


def case_trace(request: dict[str, Any] | None, retrieval: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``provenance.OTEL_KEY`` value of a case: the request's span (taken at the root call's start) and, when
    it differs and is in the same trace, the retriever's span (taken at the retrieval) as ``retriever_span_id``.

    Without a request span, the retrieval's span stands for the request. None when neither was recorded.
    """
    base = request or retrieval
    if not base:
        return None
    out = dict(base)
    if (request and retrieval and retrieval.get("trace_id") == request.get("trace_id")
            and retrieval.get("span_id") != request.get("span_id")):
        out["retriever_span_id"] = retrieval["span_id"]
    return out


# ---------------------------------------------------------------------------------------------------- exporter
def _require_api() -> Any:
    try:
        from opentelemetry import trace  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError("the OpenTelemetry exporter needs the OpenTelemetry API and SDK: "
                                 "pip install 'contextjudge[otel]'.") from exc
    return trace


def _semconv() -> dict[str, str]:
    """The OpenInference attribute names: the installed conventions' constants, else the spec's literals."""
    try:
        from openinference.semconv.trace import (  # noqa: PLC0415
            EvaluationAttributes,
            OpenInferenceSpanKindValues,
            SpanAttributes,
        )

        prefix = f"{SpanAttributes.EVALUATIONS}.0."
        return {"kind": SpanAttributes.OPENINFERENCE_SPAN_KIND, "evaluator": OpenInferenceSpanKindValues.EVALUATOR.value,
                "input": SpanAttributes.INPUT_VALUE,
                "name": prefix + EvaluationAttributes.EVALUATION_NAME,
                "score": prefix + EvaluationAttributes.EVALUATION_SCORE,
                "label": prefix + EvaluationAttributes.EVALUATION_LABEL,
                "explanation": prefix + EvaluationAttributes.EVALUATION_EXPLANATION,
                "annotator_kind": prefix + EvaluationAttributes.EVALUATION_ANNOTATOR_KIND,
                "identifier": prefix + EvaluationAttributes.EVALUATION_IDENTIFIER,
                "metadata": prefix + EvaluationAttributes.EVALUATION_METADATA}
    except (ImportError, AttributeError):
        prefix = "evaluations.0.evaluation."
        return {"kind": "openinference.span.kind", "evaluator": "EVALUATOR", "input": "input.value",
                **{f: prefix + f for f in ("name", "score", "label", "explanation", "annotator_kind", "identifier",
                                           "metadata")}}


def _cut(text: Any) -> str:
    text = str(text)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _annotator_kind(judge: str | None) -> str:
    """``CODE`` for the embedded local judge (an embedding model and rules, no language model), else ``LLM``."""
    name = (judge or "").lower()
    return "CODE" if name.startswith(("local", "contextjudge-local")) else "LLM"


class OTelExporter:
    """Sends metric results as evaluation spans into the trace of the request they judged (see the module doc).

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace.get_tracer_provider()``): an app that
    set up tracing needs nothing more. ``include_input`` puts the case's input on the span as ``input.value``
    (off by default: the request's own spans already carry it, and it may be sensitive). ``exported`` and
    ``skipped`` count spans made and cases without a recorded trace.
    """

    def __init__(self, tracer_provider: Any = None, *, include_input: bool = False) -> None:
        trace = _require_api()
        self._trace = trace
        self.tracer_provider = tracer_provider
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._tracer = provider.get_tracer("contextjudge", __version__)
        self.include_input = include_input
        self._attrs = _semconv()
        self._lock = threading.Lock()
        self.exported = 0
        self.skipped = 0
        self.failed = 0

    def __repr__(self) -> str:
        return f"OTelExporter(exported={self.exported}, skipped={self.skipped}, failed={self.failed})"

    # ------------------------------------------------------------------------------------------ callbacks
    def __call__(self, case: Any, result: Any, case_key: str | None = None, run_id: str | None = None) -> int:
        """As a session's ``on_result``: ``exporter(captured_case, result)``; as the worker's hook:
        ``exporter(test_case, results, case_key, run_id)``. Returns the number of spans made."""
        if isinstance(result, (list, tuple)):
            return self.export(case, result, case_key=case_key, run_id=run_id)
        test_case = getattr(case, "test_case", case)
        key = case_key if case_key is not None else getattr(case, "case_id", None)
        return self.export(test_case, [result], case_key=key, run_id=run_id)

    def attach(self, session: Any) -> Any:
        """Export every result of a capture session (with the session's run id); returns the session."""

        def on_result(case: Any, result: Any) -> None:
            self.export(case.test_case, [result], case_key=case.case_id, run_id=session.run_id)

        session.on_result.append(on_result)
        return session

    # ------------------------------------------------------------------------------------------ export
    def export(self, test_case: Any, results: Iterable[Any], *, case_key: str | None = None,
               run_id: str | None = None) -> int:
        """One evaluation span per result in the case's recorded trace; returns how many were made.

        A case with no recorded trace (``provenance.OTEL_KEY``) is skipped and counted. A span that cannot be made
        is logged and counted in ``failed``; nothing raises.
        """
        results = list(results)
        where = otel_of(test_case)
        if where is None:
            with self._lock:
                self.skipped += 1
            return 0
        try:
            parent, links = self._context(where)
        except Exception:  # noqa: BLE001 - a stored case with malformed ids
            logger.warning("contextjudge: the OpenTelemetry ids stored with case %s are not valid (%r); its "
                           "results are not exported.", case_key, where)
            with self._lock:
                self.failed += len(results)
            return 0
        if case_key is None:
            case_key = getattr(test_case, "id", None)
        made = 0
        for result in results:
            try:
                self._span(result, test_case, parent, links, case_key, run_id)
                made += 1
            except Exception:  # noqa: BLE001 - exporting must never break scoring
                logger.exception("contextjudge: could not export a %s result to OpenTelemetry",
                                 getattr(result, "name", "metric"))
                with self._lock:
                    self.failed += 1
        with self._lock:
            self.exported += made
        return made

    def _context(self, where: dict[str, Any]) -> tuple[Any, list[Any]]:
        trace = self._trace
        trace_id = int(str(where["trace_id"]), 16)
        flags = trace.TraceFlags(int(where.get("trace_flags", 1)) & 0xFF)
        request = trace.SpanContext(trace_id=trace_id, span_id=int(str(where["span_id"]), 16), is_remote=True,
                                    trace_flags=flags)
        if not request.is_valid:
            raise ValueError("invalid span context")
        links = []
        retriever = where.get("retriever_span_id")
        if retriever:
            ctx = trace.SpanContext(trace_id=trace_id, span_id=int(str(retriever), 16), is_remote=True,
                                    trace_flags=flags)
            if ctx.is_valid:
                links.append(trace.Link(ctx, {"contextjudge.link": "retriever"}))
        return trace.set_span_in_context(trace.NonRecordingSpan(request)), links

    def _span(self, result: Any, test_case: Any, parent: Any, links: list[Any], case_key: str | None,
              run_id: str | None) -> None:
        a = self._attrs
        name = str(getattr(result, "name", "metric"))
        score = getattr(result, "score", None)
        error = getattr(result, "error", None)
        judge = getattr(result, "evaluation_model", None)
        success = bool(getattr(result, "success", False))
        threshold = getattr(result, "threshold", None)
        explanation = error if error else getattr(result, "reason", None)
        label = None if error else ("pass" if success else "fail")
        attrs: dict[str, Any] = {a["kind"]: a["evaluator"], a["name"]: name,
                                 a["annotator_kind"]: _annotator_kind(judge),
                                 "contextjudge.metric": name, "contextjudge.success": success}
        if score is not None:
            attrs[a["score"]] = float(score)
            attrs["contextjudge.score"] = float(score)
        if label is not None:
            attrs[a["label"]] = label
        if explanation:
            attrs[a["explanation"]] = _cut(explanation)
        if case_key:
            attrs[a["identifier"]] = f"{run_id}:{case_key}:{name}" if run_id else f"{case_key}:{name}"
            attrs["contextjudge.case_key"] = str(case_key)
        if run_id:
            attrs["contextjudge.run_id"] = str(run_id)
        if threshold is not None:
            attrs["contextjudge.threshold"] = float(threshold)
        if judge:
            attrs["contextjudge.judge"] = str(judge)
        meta = {k: v for k, v in (("threshold", threshold), ("success", success), ("judge", judge),
                                  ("case_key", case_key), ("run_id", run_id),
                                  ("error_type", getattr(result, "error_type", None))) if v is not None}
        attrs[a["metadata"]] = json.dumps(meta, default=str, ensure_ascii=False)
        if error:
            attrs["contextjudge.error_type"] = str(getattr(result, "error_type", None) or "Error")
        if self.include_input and isinstance(getattr(test_case, "input", None), str):
            attrs[a["input"]] = _cut(test_case.input)
        span = self._tracer.start_span(EVAL_SPAN_PREFIX + name, context=parent, links=links, attributes=attrs)
        try:
            event: dict[str, Any] = {"gen_ai.evaluation.name": name}
            if score is not None:
                event["gen_ai.evaluation.score.value"] = float(score)
            if label is not None:
                event["gen_ai.evaluation.score.label"] = label
            if explanation:
                event["gen_ai.evaluation.explanation"] = _cut(explanation)
            span.add_event(_GENAI_EVENT, event)
            if error:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR,
                                                   f"{getattr(result, 'error_type', None) or 'Error'}: {error}"))
        finally:
            span.end()

    # ------------------------------------------------------------------------------------------ lifecycle
    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Send the spans the provider still buffers (a batch processor); True when it could. Never raises (a
        failure is logged)."""
        try:
            provider = (self.tracer_provider if self.tracer_provider is not None
                        else self._trace.get_tracer_provider())
            flush = getattr(provider, "force_flush", None)
            return bool(flush(timeout_millis)) if callable(flush) else True
        except Exception as exc:  # noqa: BLE001 - an unreachable collector must not fail the app or the worker
            logger.warning("contextjudge: could not flush the OpenTelemetry spans (%s: %s)", type(exc).__name__, exc)
            return False

    def close(self) -> None:
        """Flush; and shut the provider down when this exporter built it (``exporter_from_environment``). Never
        raises."""
        self.flush()
        if getattr(self, "_owns_provider", False):
            try:
                self.tracer_provider.shutdown()
            except Exception as exc:  # noqa: BLE001
                logger.warning("contextjudge: could not shut the OpenTelemetry provider down (%s: %s)",
                               type(exc).__name__, exc)


# ---------------------------------------------------------------------------------------------------- worker
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
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError("--otel needs the OpenTelemetry SDK: pip install 'contextjudge[otel]' (and an "
                                 "exporter, e.g. opentelemetry-exporter-otlp).") from exc
    from importlib.metadata import entry_points  # noqa: PLC0415

    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    names = [n for n in names if n.lower() != "none"]
    available = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    # "otlp" is the SDK's name for OTLP over the protocol OTEL_EXPORTER_OTLP_PROTOCOL names (gRPC unless it says
    # http/protobuf); the packages register their exporters as otlp_proto_grpc / otlp_proto_http
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    order = (["otlp_proto_http", "otlp_proto_grpc"] if (protocol or "").startswith("http")
             else ["otlp_proto_grpc", "otlp_proto_http"] if protocol else ["otlp_proto_http", "otlp_proto_grpc"])
    if "otlp" not in available:
        for alias in order:
            if alias in available:
                available["otlp"] = available[alias]
                break
    missing = [n for n in names if n not in available]
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
    provider = TracerProvider(resource=Resource.create(attributes))
    for n in names:
        provider.add_span_processor(BatchSpanProcessor(available[n].load()()))
    exporter = OTelExporter(provider, **kwargs)
    exporter._owns_provider = True  # noqa: SLF001
    return exporter

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
- Metrics: ``OTelExporter(metrics=True)`` (the global meter provider) or ``meter_provider=...`` also records each
  result as OTel metrics, whether or not its case has a trace: ``contextjudge.results`` (counter; metric, retriever,
  outcome), ``contextjudge.score`` (histogram; metric, retriever), ``contextjudge.judge.calls``,
  ``contextjudge.judge.tokens`` (billed tokens: not the embedded judge's), ``contextjudge.judge.cost``; and, with
  ``attach_worker(worker)``, ``contextjudge.worker.cases`` (observable counter by outcome).
- ``flush(timeout_millis)`` waits at most that long, and says (a warning, and False) what was not delivered.
- ``exporter_for(span_exporters, metric_readers=())``: an exporter with providers of its own, which counts what its
  span exporters delivered.
- ``exporter_from_environment() -> OTelExporter``: for ``contextjudge worker --otel``: the SDK's tracer provider
  (and, when ``OTEL_METRICS_EXPORTER`` names an exporter, a meter provider) configured from the standard ``OTEL_*``
  environment variables (``OTEL_TRACES_EXPORTER``, ``OTEL_SERVICE_NAME``,
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
from collections.abc import Callable, Iterable
from typing import Any, cast

from ._result import is_embedded_judge
from ._version import __version__
from .cases.provenance import RETRIEVER_KEY, otel_of
from .errors import ConfigurationError

__all__ = ["OTelExporter", "case_trace", "exporter_for", "exporter_from_environment", "span_context_now"]

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


def _annotator_kind(judge: str | None, details: Any = None) -> str:
    """``CODE`` for the embedded local judge (an embedding model and rules, no language model) and for the judge-free
    ranking metrics (their results record the judge identity ``no-judge``), else ``LLM``."""
    if isinstance(details, dict) and details.get("judge_identity") == "no-judge":
        return "CODE"
    name = (judge or "").lower()
    return "CODE" if name.startswith("local") or is_embedded_judge(name) else "LLM"


class OTelExporter:
    """Sends metric results as evaluation spans into the trace of the request they judged (see the module doc).

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace.get_tracer_provider()``): an app that
    set up tracing needs nothing more. ``include_input`` puts the case's input on the span as ``input.value``
    (off by default: the request's own spans already carry it, and it may be sensitive). ``exported`` and
    ``skipped`` count spans made and cases without a recorded trace.
    """

    def __init__(self, tracer_provider: Any = None, *, include_input: bool = False, metrics: bool = False,
                 meter_provider: Any = None) -> None:
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
        self._counting: list[_Counting] = []  # the span exporters this exporter built, which count what was delivered
        self._owns_provider = False  # built by exporter_for / exporter_from_environment: close() shuts them down
        self._owns_meters = False
        self._reported = 0
        self.meter_provider = meter_provider
        self._meters = _ResultMeters(meter_provider) if metrics or meter_provider is not None else None

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
        if self._meters is not None:
            self._meters.record(test_case, results)
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
                                 a["annotator_kind"]: _annotator_kind(judge, getattr(result, "details", None)),
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

    def attach_worker(self, worker: Any) -> None:
        """Also report ``worker``'s case counts (``contextjudge.worker.cases``, by outcome: claimed, judged,
        skipped_budget, errors...) as an observable counter, when this exporter sends metrics."""
        if self._meters is not None:
            self._meters.observe_worker(worker)

    # ------------------------------------------------------------------------------------------ lifecycle
    @property
    def undelivered(self) -> int:
        """Spans the exporters this exporter built (``exporter_from_environment``, ``exporter_for``) could not
        deliver (the collector refused them or could not be reached); 0 for a provider of your own."""
        return sum(c.failed for c in self._counting)

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Send the spans the provider still buffers (a batch processor), waiting at most ``timeout_millis``; True
        when they were delivered. False, with a warning that says what was not delivered, when the flush did not end
        in time (a collector that is down, its client still retrying: the spans are left to it, and the caller goes
        on), failed, or a span exporter this exporter built reported spans it could not deliver. Never raises."""
        try:
            provider = (self.tracer_provider if self.tracer_provider is not None
                        else self._trace.get_tracer_provider())
            found = [getattr(provider, "force_flush", None)]
            if self.meter_provider is not None or self._owns_meters:
                found.append(getattr(self.meter_provider, "force_flush", None))
            flushes: list[Callable[[int], Any]] = [f for f in found if callable(f)]
            if not flushes:
                return True
        except Exception as exc:  # noqa: BLE001
            logger.warning("contextjudge: could not flush the OpenTelemetry spans (%s: %s)", type(exc).__name__, exc)
            return False
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["ok"] = all(bool(f(timeout_millis)) for f in flushes)
            except Exception as exc:  # noqa: BLE001 - an unreachable collector must not fail the app or the worker
                box["exc"] = exc

        thread = threading.Thread(target=run, name="contextjudge-otel-flush", daemon=True)
        thread.start()
        thread.join(max(0.0, timeout_millis) / 1000.0)
        pending = self._pending()
        if thread.is_alive():
            logger.warning("contextjudge: the OpenTelemetry flush did not finish within %.1fs: %s evaluation span(s) "
                           "not delivered yet%s (is the collector reachable? OTEL_EXPORTER_OTLP_ENDPOINT). They are "
                           "left to the exporter, which may still send them.",
                           timeout_millis / 1000.0, pending if pending is not None else "some",
                           self._undelivered_words())
            return False
        if "exc" in box:
            err = box["exc"]
            logger.warning("contextjudge: could not flush the OpenTelemetry spans (%s: %s)", type(err).__name__, err)
            return False
        failed = self.undelivered
        if failed > self._reported:
            logger.warning("contextjudge: %d evaluation span(s) could not be delivered to the OpenTelemetry "
                           "collector%s.", failed - self._reported, self._undelivered_words())
            self._reported = failed
            return False
        return bool(box.get("ok", True))

    def _pending(self) -> int | None:
        if not self._counting:
            return None
        return sum(c.pending for c in self._counting)

    def _undelivered_words(self) -> str:
        errs = [c.last_error for c in self._counting if c.last_error]
        return f" (last error: {errs[-1]})" if errs else ""

    def close(self, timeout_millis: int = 30_000) -> None:
        """Flush (within ``timeout_millis``); and shut the providers down when this exporter built them
        (``exporter_from_environment``), also within the timeout. Never raises."""
        self.flush(timeout_millis)
        owned = [p for p, own in ((self.tracer_provider, self._owns_provider),
                                  (self.meter_provider, self._owns_meters)) if own and p is not None]
        for provider in owned:
            thread = threading.Thread(target=_shutdown, args=(provider,), name="contextjudge-otel-shutdown",
                                      daemon=True)
            thread.start()
            thread.join(max(0.0, timeout_millis) / 1000.0)
            if thread.is_alive():
                logger.warning("contextjudge: the OpenTelemetry provider did not shut down within %.1fs; going on "
                               "without it.", timeout_millis / 1000.0)


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


def _shutdown(provider: Any) -> None:
    try:
        provider.shutdown()
    except Exception as exc:  # noqa: BLE001
        logger.warning("contextjudge: could not shut the OpenTelemetry provider down (%s: %s)", type(exc).__name__,
                       exc)


class _Counting:
    """A span exporter that hands spans to another and counts what it delivered, failed to deliver, and is still
    sending (so a flush can say what did not reach the collector)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.delivered = 0
        self.failed = 0
        self.pending = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

        n = len(spans)
        with self._lock:
            self.pending += n
        ok = False
        try:
            result = self.inner.export(spans)
            ok = result == SpanExportResult.SUCCESS
            if not ok:
                self.last_error = f"the exporter returned {getattr(result, 'name', result)}"
            return result
        except Exception as exc:  # noqa: BLE001
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return SpanExportResult.FAILURE
        finally:
            with self._lock:
                self.pending -= n
                if ok:
                    self.delivered += n
                else:
                    self.failed += n

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flush = getattr(self.inner, "force_flush", None)
        return bool(flush(timeout_millis)) if callable(flush) else True


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
        import opentelemetry.sdk.trace.export  # noqa: F401, PLC0415 - only whether the SDK is installed
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
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
    readers = []
    metric_names = [n.strip() for n in os.environ.get("OTEL_METRICS_EXPORTER", "none").split(",")
                    if n.strip() and n.strip().lower() != "none"]
    if metric_names:  # the same numbers as OTel metrics, when OTEL_METRICS_EXPORTER names an exporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # noqa: PLC0415

        m_available = {ep.name: ep for ep in entry_points(group="opentelemetry_metrics_exporter")}
        if "otlp" not in m_available:
            for alias in order:
                if alias in m_available:
                    m_available["otlp"] = m_available[alias]
                    break
        m_missing = [n for n in metric_names if n not in m_available]
        if m_missing:
            raise ConfigurationError(
                f"OTEL_METRICS_EXPORTER names {', '.join(m_missing)}, which is not installed; installed: "
                f"{', '.join(sorted(m_available)) or 'none'}. Set OTEL_METRICS_EXPORTER=console to print them, or none.")
        readers = [PeriodicExportingMetricReader(m_available[n].load()()) for n in metric_names]
    return exporter_for([available[n].load()() for n in names], metric_readers=readers,
                        resource=Resource.create(attributes), **kwargs)

"""``OTelExporter``: metric results as OpenInference evaluation spans in the trace of the request they judged, and
its flush and close."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .._result import is_embedded_judge
from .._version import __version__
from ..cases.provenance import otel_of
from ..errors import ConfigurationError
from ._delivery import _Counting
from ._meters import _ResultMeters

logger = logging.getLogger("contextjudge")


EVAL_SPAN_PREFIX = "contextjudge.eval "
_GENAI_EVENT = "gen_ai.evaluation.result"
_MAX_TEXT = 4000  # an explanation or input longer than this is cut: span attributes are not a document store


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


def _shutdown(provider: Any) -> None:
    try:
        provider.shutdown()
    except Exception as exc:  # noqa: BLE001
        logger.warning("contextjudge: could not shut the OpenTelemetry provider down (%s: %s)", type(exc).__name__,
                       exc)

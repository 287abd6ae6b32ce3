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

One concept a module: ``_context`` the ids taken at capture (``span_context_now``, ``case_trace``); ``_spans`` the
exporter and its evaluation spans (``OTelExporter``); ``_meters`` the results as OTel metrics; ``_delivery`` what the
span exporters it built delivered; ``_providers`` exporters with providers of their own (``exporter_for``,
``exporter_from_environment``).
"""

from __future__ import annotations

from ._context import case_trace, span_context_now
from ._providers import exporter_for, exporter_from_environment
from ._spans import EVAL_SPAN_PREFIX as EVAL_SPAN_PREFIX
from ._spans import OTelExporter

__all__ = ["OTelExporter", "case_trace", "exporter_for", "exporter_from_environment", "span_context_now"]

"""Metric results as OpenTelemetry evaluation spans in the traced request's trace (OpenInference conventions).

CONTRACT (issue 17; the lead wrote the names, the OpenTelemetry helper fills them in). ``import contextjudge`` never
imports OpenTelemetry; this module imports it only when an exporter is built.

- ``span_context_now() -> dict | None``: the active span's ids as ``provenance.OTEL_KEY`` describes, or None when
  the app has no active span. Costs nothing when the app never imported ``opentelemetry`` (reads ``sys.modules``).
  The integrations call it at the start of the root call and at the retrieval.
- ``OTelExporter(tracer_provider=None)``: ``export(test_case, results, *, case_key=None, run_id=None) -> int`` makes
  one evaluation span per result in the case's recorded trace, linked to the retriever's span; a case with no
  recorded trace is skipped (counted). As a session callback: ``session.on_result.append(exporter)`` (called as
  ``exporter(case, result)``).
- ``exporter_from_environment() -> OTelExporter``: for ``contextjudge worker --otel``: the SDK's tracer provider
  configured from the standard ``OTEL_*`` environment variables, or a ``ConfigurationError`` that says what to
  install.
"""

from __future__ import annotations

__all__: list[str] = []

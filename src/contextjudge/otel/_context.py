"""At capture, on the app's thread: the active span's ids (``span_context_now``), and a case's recorded trace made of
the request's and the retrieval's (``case_trace``). Nothing here imports OpenTelemetry."""

from __future__ import annotations

import sys
from typing import Any


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

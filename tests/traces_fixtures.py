"""OTLP JSON traces written by hand for the receiver and import tests: an OpenInference RAG trace (a root chain,
a retriever with its documents, an LLM call that used them), in the shape the OTLP/HTTP JSON encoding and the
OpenTelemetry Collector's file exporter give (hex ids, typed attribute values)."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any


def attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def span(trace_id: str, span_id: str, parent: str | None, name: str, start: int, end: int,
         attrs: dict[str, Any]) -> dict[str, Any]:
    out = {"traceId": trace_id, "spanId": span_id, "name": name, "kind": 1, "startTimeUnixNano": str(start),
           "endTimeUnixNano": str(end), "attributes": [attr(k, v) for k, v in attrs.items()]}
    if parent:
        out["parentSpanId"] = parent
    return out


def rag_trace(question: str = "How many vacation days do I get?", *, session: str | None = "conv-1",
              docs: list[tuple[str, str, float]] | None = None, answer: str = "You get 25 days.",
              trace_id: str | None = None, t0: int = 1_700_000_000_000_000_000) -> list[dict[str, Any]]:
    """The spans of one OpenInference RAG trace, root last (as an SDK exports them: each span when it ends)."""
    docs = docs or [("vac-1", "Employees get 25 vacation days per year.", 0.91),
                    ("vac-2", "Unused vacation days roll over up to 5 days.", 0.72)]
    tid = trace_id or secrets.token_hex(16)
    root, ret, llm = secrets.token_hex(8), secrets.token_hex(8), secrets.token_hex(8)
    common = {"session.id": session} if session else {}
    r_attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": question, **common}
    for i, (did, text, score) in enumerate(docs):
        r_attrs[f"retrieval.documents.{i}.document.id"] = did
        r_attrs[f"retrieval.documents.{i}.document.content"] = text
        r_attrs[f"retrieval.documents.{i}.document.score"] = score
        r_attrs[f"retrieval.documents.{i}.document.metadata"] = json.dumps({"title": did})
    prompt = "Context:\n" + "\n".join(t for _, t, _ in docs) + f"\nQuestion: {question}"
    return [
        span(tid, ret, root, "retriever", t0 + 1_000, t0 + 2_000, r_attrs),
        span(tid, llm, root, "llm", t0 + 3_000, t0 + 4_000, {
            "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": prompt, "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": answer, "http.url": "https://api.example/v1", **common}),
        span(tid, root, None, "rag", t0, t0 + 5_000, {"openinference.span.kind": "CHAIN", "input.value": question,
                                                      "output.value": answer, **common}),
    ]


def request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """One OTLP export request holding ``spans``."""
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", "rag-app")]},
                               "scopeSpans": [{"scope": {"name": "openinference"}, "spans": spans}]}]}


@contextlib.contextmanager
def running_receiver() -> Iterator[tuple[Any, Any]]:
    """A trace receiver on a free loopback port whose cases go to a capture session that keeps them (mode "off"):
    ``(receiver, session)``, shut down and closed on exit."""
    from contextjudge.capture import CaptureSession
    from contextjudge.traces import TraceCollector, TraceReceiver

    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, settle=0.05, window=30.0)
    rec = TraceReceiver(collector, port=0).start()
    try:
        yield rec, session
    finally:
        rec.shutdown()
        collector.close()
        session.close()

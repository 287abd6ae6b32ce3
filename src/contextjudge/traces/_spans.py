"""Spans in: OTLP protobuf (``ExportTraceServiceRequest``), OTLP JSON (one request, or JSON lines of them, as the
OpenTelemetry Collector's file exporter writes) and Phoenix's span exports, each read into the one ``Span`` record
the assembler works on.

Only what the assembler reads is kept of a span: its ids, name, times and the attributes of the conventions it
knows (``KEPT_PREFIXES``); an app's other attributes (HTTP headers, database statements) are dropped at decoding, so
an open trace costs memory in proportion to what becomes a case.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["KEPT_PREFIXES", "PayloadError", "Span", "from_json", "from_json_payload", "from_phoenix", "from_protobuf"]

KEPT_PREFIXES = ("openinference.", "input.", "output.", "retrieval.", "llm.", "session.", "user.", "metadata",
                 "tag.", "gen_ai.", "traceloop.", "db.", "conversation.")


class PayloadError(ValueError):
    """A payload that is not OTLP traces (or a Phoenix span export) as its content type says."""


@dataclass(slots=True)
class Span:
    """One span, as the assembler reads it: ids in lower-case hex, times in nanoseconds since the epoch."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int
    attributes: dict[str, Any]
    flags: int = 1


def _kept(key: str) -> bool:
    return key.startswith(KEPT_PREFIXES)


# --- protobuf -------------------------------------------------------------------------------------------------


def _any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        return v.double_value
    if which == "bool_value":
        return v.bool_value
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return None


def from_protobuf(body: bytes) -> list[Span]:
    """The spans of an OTLP/HTTP protobuf body (``ExportTraceServiceRequest``)."""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: PLC0415
            ExportTraceServiceRequest,
        )
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise PayloadError("reading OTLP protobuf needs opentelemetry-proto: pip install 'contextjudge[otel]' "
                           "(or send OTLP JSON, Content-Type: application/json)") from exc
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise PayloadError(f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None
    out: list[Span] = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                if len(s.trace_id) != 16 or len(s.span_id) != 8:
                    raise PayloadError("a span has no valid trace_id (16 bytes) or span_id (8 bytes)")
                attrs = {kv.key: _any_value(kv.value) for kv in s.attributes if _kept(kv.key)}
                out.append(Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex() or None, s.name,
                                s.start_time_unix_nano, s.end_time_unix_nano, attrs, (s.flags & 0xFF) or 1))
    return out


# --- OTLP JSON ------------------------------------------------------------------------------------------------


def _json_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for key, value in v.items():
        if key == "stringValue":
            return value
        if key == "intValue":
            return int(value)
        if key == "doubleValue":
            return float(value)
        if key == "boolValue":
            return bool(value)
        if key == "arrayValue":
            return [_json_value(x) for x in (value or {}).get("values") or ()]
        if key == "kvlistValue":
            return {kv.get("key"): _json_value(kv.get("value")) for kv in (value or {}).get("values") or ()}
        if key == "bytesValue":
            return base64.b64decode(value).hex()
    return None


def _hex_id(value: Any, size: int, what: str) -> str:
    """An id of OTLP JSON: hex (the spec), or base64 (protobuf's own JSON mapping, which some writers use)."""
    if not isinstance(value, str) or not value:
        raise PayloadError(f"a span has no {what}")
    text = value.lower()
    if len(text) == size * 2 and all(c in "0123456789abcdef" for c in text):
        return text
    try:
        raw = base64.b64decode(value, validate=True)
    except Exception:  # noqa: BLE001
        raw = b""
    if len(raw) != size:
        raise PayloadError(f"a span's {what} {value[:40]!r} is neither {size * 2} hex digits nor base64")
    return raw.hex()


def from_json_payload(doc: Any) -> list[Span]:
    """The spans of one decoded OTLP JSON request (``{"resourceSpans": [...]}``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", doc.get("resource_spans")), list):
        raise PayloadError('the JSON is not an OTLP traces request: it needs "resourceSpans": [...]')
    out: list[Span] = []
    for rs in doc.get("resourceSpans") or doc.get("resource_spans") or ():
        for ss in (rs or {}).get("scopeSpans") or (rs or {}).get("scope_spans") or ():
            for s in (ss or {}).get("spans") or ():
                if not isinstance(s, dict):
                    raise PayloadError("a span is not a JSON object")
                attrs = {}
                for kv in s.get("attributes") or ():
                    key = kv.get("key") if isinstance(kv, dict) else None
                    if isinstance(key, str) and _kept(key):
                        attrs[key] = _json_value(kv.get("value"))
                parent = s.get("parentSpanId") or s.get("parent_span_id")
                out.append(Span(_hex_id(s.get("traceId") or s.get("trace_id"), 16, "traceId"),
                                _hex_id(s.get("spanId") or s.get("span_id"), 8, "spanId"),
                                _hex_id(parent, 8, "parentSpanId") if parent else None,
                                str(s.get("name") or ""),
                                int(s.get("startTimeUnixNano") or s.get("start_time_unix_nano") or 0),
                                int(s.get("endTimeUnixNano") or s.get("end_time_unix_nano") or 0),
                                attrs, int(s.get("flags") or 1) & 0xFF or 1))
    return out


def from_json(body: bytes | str) -> list[Span]:
    """The spans of an OTLP JSON body: one request, or JSON lines of requests (the Collector's file exporter)."""
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    try:
        return from_json_payload(json.loads(text))
    except json.JSONDecodeError:
        pass
    out: list[Span] = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PayloadError(f"line {n} is not JSON ({exc.msg})") from None
            out.extend(from_json_payload(doc))
    return out


# --- Phoenix --------------------------------------------------------------------------------------------------


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Nested attributes (Phoenix keeps ``{"retrieval": {"documents": [{"document": {...}}]}}``) as dotted keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = value


def _ns(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value:
        from datetime import datetime  # noqa: PLC0415

        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    return 0


def from_phoenix(records: Iterable[Any]) -> list[Span]:
    """The spans of a Phoenix span export: dicts with ``context.trace_id`` / ``context.span_id``, ``parent_id``,
    ``name``, ``start_time``, ``end_time`` and ``attributes`` (flat dotted keys, or nested as Phoenix stores them);
    ``span_kind`` stands in for ``openinference.span.kind`` when the attributes lack it."""
    out: list[Span] = []
    for r in records:
        if not isinstance(r, dict):
            raise PayloadError("a Phoenix span is not a JSON object")
        ctx: dict[str, Any] = r["context"] if isinstance(r.get("context"), dict) else {}
        trace_id = ctx.get("trace_id") or r.get("context.trace_id") or r.get("trace_id")
        span_id = ctx.get("span_id") or r.get("context.span_id") or r.get("span_id")
        attrs: dict[str, Any] = {}
        raw = r.get("attributes")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                raw = {}
        _flatten(raw if isinstance(raw, dict) else {}, "", attrs)
        for k, v in r.items():  # a dataframe's rows: attributes.input.value and the like
            if isinstance(k, str) and k.startswith("attributes.") and v is not None:
                attrs[k[len("attributes."):]] = v
        kind = r.get("span_kind")
        if kind and "openinference.span.kind" not in attrs:
            attrs["openinference.span.kind"] = kind
        attrs = {k: v for k, v in attrs.items() if _kept(k)}
        parent = r.get("parent_id") or r.get("parent_span_id")
        out.append(Span(_hex_id(trace_id, 16, "trace_id"), _hex_id(span_id, 8, "span_id"),
                        _hex_id(parent, 8, "parent_id") if parent else None, str(r.get("name") or ""),
                        _ns(r.get("start_time")), _ns(r.get("end_time")), attrs))
    return out


def iter_phoenix_file(text: str) -> Iterator[Any]:
    """The records of a Phoenix export file: a JSON list, a JSON object with ``data`` / ``spans``, or JSON lines."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PayloadError(f"line {n} is not JSON ({exc.msg})") from None
        return
    if isinstance(doc, dict):
        doc = doc.get("data", doc.get("spans", [doc]))
    yield from doc if isinstance(doc, list) else [doc]

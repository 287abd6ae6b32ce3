"""``contextjudge import-traces FILE...``: spans from files, the receiver's way.

A file is read as OTLP JSON (one export request, or JSON lines of them: the OpenTelemetry Collector's ``file``
exporter) or as a Phoenix span export (a JSON list, ``{"data": [...]}``, or JSON lines, of spans with
``context.trace_id``); ``.gz`` files are decompressed. Every file's spans go into one window, so a trace split across
files is assembled whole.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ._spans import PayloadError, Span, from_json, from_phoenix, iter_phoenix_file

__all__ = ["read_span_file"]


def _first_record(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        line = next((x for x in text.splitlines() if x.strip()), "")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return None


def read_span_file(path: str | Path) -> tuple[list[Span], str]:
    """The spans of one file and its format (``"otlp"`` or ``"phoenix"``); ``PayloadError`` when it is neither."""
    p = Path(path)
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError(f"{p}: not UTF-8 text (OTLP JSON or a Phoenix span export is expected)") from None
    first = _first_record(text)
    if isinstance(first, dict) and ("resourceSpans" in first or "resource_spans" in first):
        try:
            return from_json(text), "otlp"
        except PayloadError as exc:
            raise PayloadError(f"{p}: {exc}") from None
    sample = first[0] if isinstance(first, list) and first else first
    if isinstance(sample, dict) and isinstance(sample.get("data"), list):
        sample = sample["data"][0] if sample["data"] else {}
    if isinstance(sample, dict) and (isinstance(sample.get("context"), dict) or "context.span_id" in sample):
        try:
            return from_phoenix(iter_phoenix_file(text)), "phoenix"
        except PayloadError as exc:
            raise PayloadError(f"{p}: {exc}") from None
    raise PayloadError(f"{p}: neither OTLP JSON (a 'resourceSpans' list per line, as the Collector's file exporter "
                       "writes) nor a Phoenix span export (spans with 'context.trace_id')")

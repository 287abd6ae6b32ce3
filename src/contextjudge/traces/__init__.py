"""Traces in: the cases of an app's OpenTelemetry / OpenInference spans, with no change to the app (issue 50).

``TraceCollector`` holds spans by trace in a bounded window (``_window``) and, when a trace is whole, reads its
retrievals as cases (``_cases``: OpenInference and OpenTelemetry GenAI / OpenLLMetry conventions) for a capture
session: queued for ``contextjudge worker`` or scored at once. Spans come from ``TraceReceiver`` (OTLP/HTTP,
``contextjudge collect``), from files (``read_span_file``: OTLP JSON, Phoenix exports; ``contextjudge
import-traces``) or from a running Phoenix (``_phoenix``). Inside: ``_spans`` (decoding into one ``Span`` record),
``_window``, ``_cases``, ``_collector``, ``_receiver``, ``_files``.
"""

from ._cases import TRACE_KEY, cases_of_trace, kind_of
from ._collector import TraceCollector
from ._files import read_span_file
from ._phoenix import PhoenixSource
from ._receiver import TraceReceiver, is_loopback
from ._spans import PayloadError, Span, from_json, from_phoenix, from_protobuf

__all__ = ["TRACE_KEY", "PayloadError", "PhoenixSource", "Span", "TraceCollector", "TraceReceiver", "cases_of_trace",
           "from_json", "from_phoenix", "from_protobuf", "is_loopback", "kind_of", "read_span_file"]

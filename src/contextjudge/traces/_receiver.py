"""The OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON, gzip or not) into a ``TraceCollector``.

The standard library's ``ThreadingHTTPServer``, as ``label --serve`` uses (no web framework for one endpoint). It
listens on loopback by default; bound to any other address it needs a token (``Authorization: Bearer <token>``, the
header an OpenTelemetry exporter sends with ``OTEL_EXPORTER_OTLP_HEADERS``). A payload it cannot read gets a 4xx
that says why (400 not OTLP, 413 too large, 415 a content type other than protobuf or JSON, 401 no or a wrong
token) and is counted; nothing a client sends stops the server. ``GET /healthz`` answers the counts as JSON.
"""

from __future__ import annotations

import gzip
import hmac
import ipaddress
import json
import logging
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigurationError
from ._collector import TraceCollector
from ._spans import PayloadError, from_json, from_protobuf

__all__ = ["MAX_BODY", "TraceReceiver", "is_loopback"]

logger = logging.getLogger("contextjudge")

MAX_BODY = 32 * 1024 * 1024  # bytes of one request, after decompression
_IDLE = 30.0  # seconds an idle connection is kept
_MAX_CONNECTIONS = 64


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most ``_MAX_CONNECTIONS`` at once (a connection past it waits up to 5 s for a
    slot, then is closed): an exporter retries, and the receiver's memory stays bounded."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(timeout=5):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class TraceReceiver:
    """An OTLP/HTTP traces endpoint on ``host:port`` (port 0: a free one, ``.port`` after ``start()``)."""

    def __init__(self, collector: TraceCollector, *, host: str = "127.0.0.1", port: int = 4318,
                 token: str | None = None, max_body: int = MAX_BODY) -> None:
        if not is_loopback(host) and not token:
            raise ConfigurationError(
                f"the receiver would accept spans from any machine that reaches {host}:{port}; give it a token "
                "(--token T, or $CONTEXTJUDGE_COLLECT_TOKEN) and set the exporter's header "
                "OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer T', or listen on 127.0.0.1 (the default).")
        self.collector = collector
        self.token = token
        self.max_body = max_body
        self.counts = {"requests": 0, "rejected": 0}
        self._lock = threading.Lock()
        self._server = _Server((host, port), _handler(self))
        address = self._server.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The URL an exporter sends to (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}/v1/traces"

    def start(self) -> TraceReceiver:
        """Serve from a daemon thread (``contextjudge-otlp``)."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="contextjudge-otlp", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``shutdown()``."""
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """Stop serving and close the socket (the collector is the caller's to close)."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def count(self, key: str) -> None:
        """Count one request outcome."""
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def all_counts(self) -> dict[str, int]:
        """The receiver's counts and the collector's."""
        with self._lock:
            out = dict(self.counts)
        out.update(self.collector.counts)
        return out


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise _Reject(415, f"Content-Encoding {encoding!r} is not read; send gzip or none")
    d = zlib.decompressobj(wbits=47 if encoding == "gzip" else 15)  # 47: gzip or zlib header
    try:
        out = d.decompress(body, limit + 1)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise _Reject(400, f"the body is not valid {encoding} ({exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise _Reject(413, f"the body is larger than {limit} bytes once decompressed; export smaller batches")
    return out


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Handler(BaseHTTPRequestHandler):
    receiver: TraceReceiver
    protocol_version = "HTTP/1.1"
    timeout = _IDLE
    server_version = "contextjudge-collect"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("contextjudge collect: " + format, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        token = self.receiver.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else self.headers.get("X-CJ-Token", "")
        return hmac.compare_digest(given.encode(), token.encode())

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        """``/healthz``: the counts."""
        if self.path.split("?")[0] != "/healthz":
            self._send(404, b"not found: POST spans to /v1/traces", "text/plain")
            return
        if not self._authorized():
            self._send(401, b"unauthorized: send Authorization: Bearer <token>", "text/plain")
            return
        self._send(200, json.dumps(self.receiver.all_counts()).encode(), "application/json")

    def do_POST(self) -> None:  # noqa: N802
        """``/v1/traces``: read the spans, hold them for assembly, answer an empty export response."""
        r = self.receiver
        r.count("requests")
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            if self.path.split("?")[0] != "/v1/traces":
                raise _Reject(404, "not found: this receiver takes traces at /v1/traces")
            if not self._authorized():
                raise _Reject(401, "unauthorized: send Authorization: Bearer <token> (the token given to "
                                   "`contextjudge collect --token`)")
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                raise _Reject(411, "a Content-Length is required") from None
            if length < 0 or length > r.max_body:
                self.close_connection = True
                raise _Reject(413, f"the body is larger than {r.max_body} bytes; export smaller batches")
            body = self.rfile.read(length)
            if ctype not in ("application/x-protobuf", "application/protobuf", "application/json"):
                raise _Reject(415, f"Content-Type {ctype or 'none'!r} is not read; send application/x-protobuf "
                                   "or application/json (OTLP/HTTP)")
            body = _decompress(body, (self.headers.get("Content-Encoding") or "").strip().lower(), r.max_body)
            try:
                spans = from_json(body) if ctype == "application/json" else from_protobuf(body)
            except UnicodeDecodeError:
                raise _Reject(400, "the JSON body is not UTF-8") from None
            except PayloadError as exc:
                raise _Reject(400, str(exc)) from None
            r.collector.add(spans)
        except _Reject as exc:
            r.count("rejected")
            r.count(f"rejected_{exc.status}")
            self._send(exc.status, exc.message.encode(), "text/plain; charset=utf-8")
            return
        except Exception as exc:  # noqa: BLE001 - never let one request take the server down
            logger.exception("contextjudge collect: a request failed")
            r.count("rejected")
            self._send(500, f"internal error: {type(exc).__name__}".encode(), "text/plain")
            return
        r.count("accepted")
        if ctype == "application/json":
            self._send(200, b"{}", "application/json")
        else:
            self._send(200, b"", "application/x-protobuf")


def _handler(receiver: TraceReceiver) -> type[BaseHTTPRequestHandler]:
    return type("OTLPHandler", (_Handler,), {"receiver": receiver})

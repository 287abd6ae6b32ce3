"""``contextjudge label --serve``: the labelling page (issue 37), a front door over the engine's labelling room.

A local page served by the standard library's ``ThreadingHTTPServer`` (no new dependency: the page is one
self-contained HTML document and a few JSON endpoints). Every request must carry the random token printed once at
start (``?t=`` or the ``X-CJ-Token`` header), else 403; only Host and Origin headers naming this machine are answered
when it serves on loopback, and every read is bounded. This module only parses HTTP and checks who asks: the queues,
a case as labelled, the check and write of one label (one store transaction, ``ResultsStore.give_label``, so two
tabs, pages or processes cannot lose or double a label and a killed server loses at most the click in flight) and
the figures are ``engine.LabelSession`` (``engine/_labelling.py``), callable from Python.
"""

from __future__ import annotations

import argparse
import hmac
import json
import secrets
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from ..engine import LabelSession, annotator_agreement, calibrate_order
from . import _shared

__all__ = ["LabelSession", "annotator_agreement", "calibrate_order", "serve_labels"]

MAX_BODY = 1 << 20  # one label is a few hundred bytes; a larger Content-Length is refused unread
READ_TIMEOUT_S = 15.0  # a request whose bytes stop coming (a Content-Length larger than its body) frees its thread


class _Handler(BaseHTTPRequestHandler):
    """The page's requests; ``_handler`` makes a subclass holding the session, the token, the page and the Host
    headers it answers (None: any, when served beyond loopback)."""

    session: LabelSession
    token: str
    page: bytes
    hosts: frozenset[str] | None
    timeout = READ_TIMEOUT_S  # socketserver sets it on the connection: every read and write is bounded

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the terminal shows the URL only
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("X-Frame-Options", "DENY")  # no other site may frame the page (clickjacking)
            self.send_header("Content-Security-Policy", "frame-ancestors 'none'")
            self.end_headers()
            self.wfile.write(body)
        except (ConnectionError, TimeoutError):  # the tab was closed: nobody is left to answer
            self.close_connection = True

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj, default=str).encode())

    def _same_machine(self) -> bool:
        """Host is one of this server's loopback names (a DNS-rebinding page sends its own), and Origin, when
        sent, is this page's own (another site's page sends its)."""
        host = self.headers.get("Host") or ""
        origin = self.headers.get("Origin")
        ok = (self.hosts is None or host in self.hosts) and (origin is None or origin == f"http://{host}")
        if not ok:
            self._send(403, b"forbidden: this page answers only itself, at the address it printed", "text/plain")
        return ok

    def _authorised(self) -> tuple[bool, dict[str, list[str]]]:
        if not self._same_machine():
            return False, {}
        q = parse_qs(urlparse(self.path).query)
        given = self.headers.get("X-CJ-Token") or (q.get("t") or [""])[0]
        ok = hmac.compare_digest(given.encode(), self.token.encode())
        if not ok:
            self._send(403, b"forbidden: this page needs the token printed when it started", "text/plain")
        return ok, q

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok, q = self._authorised()
        if not ok:
            return
        path = urlparse(self.path).path
        try:
            if path == "/":
                self._send(200, self.page, "text/html; charset=utf-8")
            elif path == "/api/queues":
                self._json(200, {"queues": self.session.queues, "run": self.session.run_id})
            elif path == "/api/case":
                key = (q.get("key") or [""])[0]
                if key in self.session.cases:
                    self._json(200, self.session.case(key))
                else:
                    self._json(404, {"error": f"no case {key!r}"})
            elif path == "/api/figures":
                self._json(200, self.session.figures())
            else:
                self._json(404, {"error": "not found"})
        except Exception as exc:  # noqa: BLE001 - the page shows it; the server goes on
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    def do_POST(self) -> None:  # noqa: N802
        from ..errors import ConfigurationError  # noqa: PLC0415

        ok, _ = self._authorised()
        if not ok:
            return
        if urlparse(self.path).path != "/api/label":
            self._json(404, {"error": "not found"})
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_BODY:
            self.close_connection = True
            self._json(413 if n > MAX_BODY else 400, {"error": f"Content-Length {self.headers.get('Content-Length')!r}"
                       f": send one label as a JSON object of at most {MAX_BODY} bytes."})
            return
        try:
            raw = self.rfile.read(n)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
            return
        if len(raw) < n:  # the body stopped short of its Content-Length
            self.close_connection = True
            self._json(400, {"error": f"the body ended after {len(raw)} of {n} bytes: send it whole."})
            return
        try:
            body = json.loads(raw or b"{}")
            self._json(200, self.session.give(body))
        except (ValueError, ConfigurationError) as exc:
            self._json(400, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A closed tab or a stalled client is no error worth a traceback; anything else still prints one."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(session: LabelSession, token: str, page: bytes, hosts: frozenset[str] | None = None
             ) -> type[BaseHTTPRequestHandler]:
    return type("LabelPageHandler", (_Handler,), {"session": session, "token": token, "page": page,
                                                  "hosts": hosts})


def _is_loopback(host: str) -> bool:
    import ipaddress  # noqa: PLC0415

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def serve_labels(args: argparse.Namespace) -> int:
    """Serve the labelling page until interrupted."""
    from ..report import render_label_page  # noqa: PLC0415

    store = _shared._existing_store(args.store, write=True)
    judge = _shared._judge(getattr(args, "model", None), getattr(args, "quiet", False))
    spec = args.model if args.model and args.model.strip().lower() != "fake" else None
    session = LabelSession(store, judge, run=_shared._resolve(store, args.run) if args.run else None,
                           judge_spec=spec, seed=args.seed)
    token = secrets.token_urlsafe(24)
    host = args.host or "127.0.0.1"
    if not _is_loopback(host):
        print(f"warning: serving the labelling page on {host}, not only this machine: anyone who can reach it "
              "and has the token can read the cases and write labels.", file=sys.stderr)
    handler = _handler(session, token, render_label_page().encode())
    server = (_Server6 if ":" in host else _Server)((host, args.port), handler)
    port = server.server_address[1]
    if _is_loopback(host):  # the Host headers a page on this machine sends; a DNS-rebinding page sends its own
        handler.hosts = frozenset(_shared.loopback_names(host, port)[0])  # type: ignore[attr-defined]
    shown = f"[{host}]" if ":" in host else host
    print(f"labelling {len(session.cases)} case(s) of run {session.run_id} in {store.target}", flush=True)
    print(f"open http://{shown}:{port}/?t={token}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return _shared.EXIT_OK

"""``contextjudge label --serve``: the labelling page (issue 37).

A local page served by the standard library's ``ThreadingHTTPServer`` (no new dependency: the page is one
self-contained HTML document and a few JSON endpoints). Every request must carry the random token printed once at
start (``?t=`` or the ``X-CJ-Token`` header), else 403. Each label is written to the store the moment it is given
(``ResultsStore.give_label``: the keyed labels through ``add_labels`` and a ``cj_label_log`` row), under one lock, so
two tabs cannot lose or double a label and a killed server loses at most the click in flight.

Two queues: ``calibrate`` orders the run's cases by what a label teaches (the judged score nearest its threshold
first, round-robin over metric and pass/fail so both signs of every family get labels); ``estimate`` is a seeded
uniform random order, the only labels the bias-corrected means use. The figures (``/api/figures``) are
``acalibrate``'s report, the very dict ``calibrate --json`` prints, plus the bias-corrected means of the
estimate-queue labels, two annotators' agreement with each other, and the labels a target kappa interval width needs.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import random
import secrets
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from . import _shared

__all__ = ["LabelSession", "serve_labels"]

QUEUES = ("calibrate", "estimate")  # as store.give_label checks them


def calibrate_order(keys: list[str], results: dict[tuple[str, str], Any]) -> list[str]:
    """The ``calibrate`` queue: per case its most uncertain judged metric (``_fit_doubt``: a verdict whose confidence
    is nearest 0.5 or whose jurors or tiers disagree, else the score nearest its threshold); cases grouped
    by (metric, pass/fail), each group nearest-first, then dealt round-robin so every family's positives and
    negatives get labels early; cases with no judged score last, in run order."""
    best: dict[str, tuple[float, str, bool]] = {}
    for (key, metric), r in results.items():
        score, threshold = getattr(r, "score", None), getattr(r, "threshold", None)
        if score is None or threshold is None or key not in keys:
            continue
        d = _fit_doubt(abs(float(score) - float(threshold)), _verdict_doubt(getattr(r, "verdicts", None) or []))
        if key not in best or d < best[key][0]:
            best[key] = (d, metric, float(score) >= float(threshold))
    groups: dict[tuple[str, bool], list[tuple[float, str]]] = {}
    for key, (d, metric, sign) in best.items():
        groups.setdefault((metric, sign), []).append((d, key))
    lanes = sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])
    out: list[str] = []
    while any(lanes):
        for lane in lanes:
            if lane:
                out.append(lane.pop(0)[1])
    return out + [k for k in keys if k not in best]


def _fit_doubt(score_distance: float, doubt: float) -> float:
    """How little a case's labels would move the fit (lower: more): a verdict nearest its decision boundary (a
    confidence nearest 0.5, or jurors or tiers that disagree) teaches the fitted weights most, so every case with one
    comes first, by it; a judge without confidences falls back on the score's distance from its threshold, after
    them (issue 47)."""
    return doubt if doubt < 1.0 else 1.0 + score_distance


def _verdict_doubt(verdicts: list[Any]) -> float:
    """How near a result's verdicts come to going the other way: -1 when jurors (a ``Jury``) or tiers (a
    ``TieredJudge`` that escalated) disagree on an item, else the least distance of a verdict's confidence from 0.5
    (1.0 when no verdict has one)."""
    out = 1.0
    for v in verdicts:
        if not isinstance(v, dict):
            continue
        jurors = v.get("jurors")
        said = {bool(j.get("verdict")) for j in jurors.values() if isinstance(j, dict)} \
            if isinstance(jurors, dict) else set()
        if len(said) > 1 or ("cheap_verdict" in v and v.get("cheap_verdict") != v.get("verdict")):
            return -1.0
        conf = v.get("confidence")
        if isinstance(conf, (int, float)):
            out = min(out, abs(float(conf) - 0.5))
    return out


def annotator_agreement(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per label field and pair of annotators, Cohen's kappa over the items both labelled (each one's latest
    label; a withdrawn label counts as none)."""
    from ..stats import cohen_kappa, confusion  # noqa: PLC0415

    latest: dict[tuple[str, str, str, str], bool | None] = {}
    for r in log:
        latest[(r["field"], str(r["who"] or "anonymous"), r["case_key"], r["item"])] = r["value"]
    out = []
    fields = sorted({f for f, _, _, _ in latest})
    for field in fields:
        by_who: dict[str, dict[tuple[str, str], bool]] = {}
        for (f, who, case, item), v in latest.items():
            if f == field and v is not None:
                by_who.setdefault(who, {})[(case, item)] = bool(v)
        people = sorted(by_who)
        for i, a in enumerate(people):
            for b in people[i + 1:]:
                both = sorted(set(by_who[a]) & set(by_who[b]))
                if not both:
                    continue
                tp, fp, fn, tn = confusion((by_who[a][k], by_who[b][k]) for k in both)
                out.append({"field": field, "a": a, "b": b, "items": len(both),
                            "agreement": (tp + tn) / len(both), "kappa": cohen_kappa(tp, fp, fn, tn)})
    return out


def labels_given(log: list[dict[str, Any]]) -> dict[str, int]:
    """Per queue, the items that carry a label now: each (annotator, case, field, item) counted once, by its latest
    label (a re-label is the same label changed, a withdrawn one counts as none), under the queue it came from."""
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in log:
        if r["field"] != "note":
            latest[(str(r["who"] or ""), r["case_key"], r["field"], r["item"])] = r
    return {q: sum(r["queue"] == q and r["value"] is not None for r in latest.values()) for q in QUEUES}


class LabelSession:
    """The page's state: the store, the run whose cases are shown, the judge the figures use, the two queues."""

    def __init__(self, store: Any, judge: Any, *, run: str | None = None, judge_spec: str | None = None,
                 seed: int = 0, target_width: float = 0.2) -> None:
        self.store, self.judge, self.judge_spec = store, judge, judge_spec
        self.run_ref = run
        self.run_id = store.resolve_run(run)
        self.cases = {sc.case_key: sc.test_case for sc in store.load_cases(self.run_id)
                      if hasattr(sc.test_case, "retrieval_context")}
        keys = list(self.cases)
        self.results = store.completed_results(self.run_id)
        shuffled = list(keys)
        random.Random(seed).shuffle(shuffled)
        self.queues = {"calibrate": calibrate_order(keys, self.results), "estimate": shuffled}
        self.target_width = target_width
        self.lock = threading.Lock()  # one label written at a time (read-modify-write of a case's labels)
        self._figures_lock = threading.Lock()  # two polling tabs compute the figures once
        self._figures: tuple[int, dict[str, Any]] | None = None

    # ------------------------------------------------------------------------------------------------ cases
    def case(self, key: str) -> dict[str, Any]:
        from ..cases.labels import node_ref  # noqa: PLC0415
        from ..metrics import gold_statements  # noqa: PLC0415

        tc = self.cases[key]
        got = self._stored_labels(key)
        nodes = []
        entries = got.get("nodes") or []
        for rank, node in enumerate(tc.retrieval_context or []):
            ref = node_ref(node)
            hit: dict[str, Any] = next((e for e in entries if (ref["id"] and e.get("id") == ref["id"])
                        or e.get("hash") == ref["hash"]), {})
            meta = getattr(node, "metadata", None) or {}
            source = (meta.get("source") or meta.get("title") or meta.get("url") or meta.get("file_name")
                      or ref["id"] or "") if isinstance(meta, dict) else (ref["id"] or "")
            nodes.append({"rank": rank + 1, "text": str(getattr(node, "text", node)), "source": str(source),
                          "ref": {"id": ref["id"], "hash": ref["hash"]},
                          "labels": {f: hit.get(f) for f in ("labels", "relevance_labels", "utilization_labels")}})
        pairs = dict(zip(got.get("statements") or [], got.get("statement_labels") or [], strict=False))
        statements = [{"text": s, "label": pairs.get(s)}
                      for s in gold_statements(tc, {}) or []] if tc.expected_output else []
        # the answer's statements as faithfulness splits them, whenever the case has an actual output (calibrate
        # judges faithfulness from these labels whether or not the run scored it)
        said = dict(zip(got.get("answer_statements") or [], got.get("answer_statement_labels") or [], strict=False))
        answer = [{"text": s, "label": said.get(s)}
                  for s in gold_statements(tc, {}, "answer_statement_labels")] if tc.actual_output else []
        return {"key": key, "input": tc.input, "expected_output": tc.expected_output,
                "actual_output": tc.actual_output, "nodes": nodes, "statements": statements,
                "answer_statements": answer}

    def _stored_labels(self, key: str) -> dict[str, Any]:
        for r in self.store.export_labels():
            if r["key"] == key:
                return r
        return {}

    def give(self, body: Any) -> dict[str, Any]:
        """One label from the page (``POST /api/label``): checked against the case (its nodes, its statements)
        before anything is written; ConfigurationError (a 400) says what is wrong."""
        from ..errors import ConfigurationError  # noqa: PLC0415

        if not isinstance(body, dict):
            raise ConfigurationError(f"the body is a JSON {type(body).__name__}, not one label: send one JSON object "
                                     '{"key", "field", "item", "value"} per label.')
        key = body.get("key")
        if not isinstance(key, str) or key not in self.cases:
            raise ConfigurationError(f"no case {key!r} in run {self.run_id}.")
        value = body.get("value")
        if value is not None and not isinstance(value, bool):
            raise ConfigurationError("a label's value is true, false or null (withdraw).")
        field = str(body.get("field"))
        item = body.get("item")
        if field != "note":
            self._check_item(key, field, item)
        with self.lock:
            self.store.give_label(key, field, item, value, who=(str(body.get("who") or "") or None),
                                  queue=body.get("queue"), note=(str(body.get("note") or "") or None),
                                  run_id=self.run_id)
        return {"ok": True}

    def _check_item(self, key: str, field: str, item: Any) -> None:
        """A label names a node or a statement of this case: the page never sends another, so one that does is
        refused rather than stored where no metric finds it."""
        from ..cases.labels import LABEL_FIELDS, NODE_FIELDS, node_ref  # noqa: PLC0415
        from ..errors import ConfigurationError  # noqa: PLC0415
        from ..metrics import gold_statements  # noqa: PLC0415

        tc = self.cases[key]
        if field not in LABEL_FIELDS:
            raise ConfigurationError(f"unknown label field {field!r}: one of {', '.join(LABEL_FIELDS)} (or 'note').")
        if field in NODE_FIELDS:
            if not isinstance(item, dict) or not (item.get("id") or item.get("hash")):
                raise ConfigurationError("a node label names its node: give its 'hash' or 'id' (node_ref).")
            refs = [node_ref(n) for n in tc.retrieval_context or []]
            if not any((item.get("id") and r["id"] == item.get("id")) or (item.get("hash") and r["hash"] ==
                       item.get("hash")) for r in refs):
                raise ConfigurationError(f"case {key!r} retrieved no node with id {item.get('id')!r} / hash "
                                         f"{item.get('hash')!r}: label one of its {len(refs)} node(s).")
            return
        answer = field == "answer_statement_labels"
        source = tc.actual_output if answer else tc.expected_output
        texts = (gold_statements(tc, {}, "answer_statement_labels") if answer else gold_statements(tc, {})) \
            if source else []
        if not isinstance(item, str) or item not in (texts or []):
            what = "actual output" if answer else "expected output"
            raise ConfigurationError(f"{str(item)[:80]!r} is not a statement of case {key!r}'s {what}: label one "
                                     f"of its {len(texts or [])} statement(s), as the page shows them.")

    # ---------------------------------------------------------------------------------------------- figures
    def figures(self) -> dict[str, Any]:
        """``acalibrate``'s report on the store's labelled cases (what ``calibrate --json --store`` prints), and the
        page's own figures beside it; recomputed only when a label was given since the last call."""
        with self._figures_lock:
            return self._compute_figures()

    def _compute_figures(self) -> dict[str, Any]:
        from .._aio import run_sync  # noqa: PLC0415
        from ..engine import acalibrate  # noqa: PLC0415

        log = self.store.label_log()
        if self._figures is not None and self._figures[0] == len(log):
            return self._figures[1]
        cases = self.store.labelled_cases(run=self.store.resolve_run(self.run_ref) if self.run_ref else None)
        report = run_sync(acalibrate(cases, self.judge, judge_spec=self.judge_spec)) if cases else None
        out = {"calibrate": report, "annotators": annotator_agreement(log),
               "labels": labels_given(log),
               "needed": _needed(report, self.target_width), "target_width": self.target_width,
               "corrected": self._corrected()}
        self._figures = (len(log), out)
        return out

    def _corrected(self) -> dict[str, Any]:
        """The run's bias-corrected means as the report computes them (``fill_gold_scores`` then
        ``EvaluationResult.corrected``): only cases labelled from the estimate queue (or from a file) count."""
        from dataclasses import asdict  # noqa: PLC0415

        from ..metrics import fill_gold_scores  # noqa: PLC0415

        result = fill_gold_scores(self.store.load_run(self.run_id))
        out = {}
        for metric in sorted({m for _, m in self.results}):
            est = result.corrected(metric)
            out[metric] = None if est is None else {
                "corrected": asdict(est.corrected), "judged": asdict(est.judged), "n_labelled": est.n_labelled}
        return out


def _needed(report: dict[str, Any] | None, width: float) -> dict[str, int | None]:
    """Per family, roughly how many more labelled cases bring kappa's interval to ``width`` (an interval's width
    shrinks as one over the square root of the cases)."""
    from ..judges import FAMILIES  # noqa: PLC0415

    out: dict[str, int | None] = {}
    for f in FAMILIES:
        fam = (report or {}).get(f)
        if not fam or not fam.get("kappa_ci") or not fam.get("cases"):
            continue
        lo, hi = fam["kappa_ci"]
        n = fam["cases"]
        out[f] = max(0, math.ceil(n * ((hi - lo) / width) ** 2) - n) if hi > lo else 0
    return out


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

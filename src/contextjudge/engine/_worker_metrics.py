"""A worker's numbers for the user's dashboards: Prometheus metrics (``contextjudge worker --metrics-port P``).

Served with the official client library (``prometheus-client``) in the standard text exposition, from a registry of
the worker's own (nothing of the process's default registry leaks in, and two workers in one process stay apart):

- ``contextjudge_worker_cases_total{outcome}``: cases by what became of them in this worker: ``claimed``,
  ``judged`` (results written), ``skipped_budget`` (set aside by a spent budget), ``errors`` (judged with an error
  result, or failed and given back), ``lost_lease``, ``given_back`` (at a stop), ``judge_down`` (given back while the
  judge was down), ``no_metric``; read from the worker's own counts at each scrape, so they are exactly what its
  summary line says;
- ``contextjudge_queue_cases{state}``: the store's queue now (``queued``, ``claimed``, ``expired``, ``done``,
  ``skipped``), every worker's cases together; read at most every ``queue_every`` seconds;
- ``contextjudge_judge_calls_total{judge,cached}``, ``contextjudge_judge_call_seconds{judge}`` (a histogram of
  answered calls), ``contextjudge_judge_tokens_total{judge,kind}`` (input / output), ``contextjudge_judge_dollars_total
  {judge}`` (where the price is known), ``contextjudge_judge_errors_total{error_type}`` (results whose judging failed);
- ``contextjudge_budget_spent{budget,window,unit}`` and ``contextjudge_budget_limit{budget,window,unit}``: what the
  current hour's / day's window of the worker's budget holds (tokens, dollars, calls; shared by every process on the
  store) against its limit;
- ``contextjudge_score_rolling_mean{metric,retriever}`` and ``contextjudge_score_rolling_count{metric,retriever}``:
  the mean of the last ``rolling`` scores (default 100) of each metric and retriever this worker wrote, and how many
  that mean is over; ``contextjudge_results_total{metric,retriever,outcome}`` (pass / fail / error).

``prometheus-client`` is imported only when metrics are asked for (``pip install 'contextjudge[prometheus]'``).
"""

from __future__ import annotations

import collections
import io
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..cases.provenance import RETRIEVER_KEY
from ..errors import ConfigurationError

__all__ = ["WorkerMetrics"]

_OUTCOMES = (("claimed", "claimed"), ("judged", "judged"), ("skipped_budget", "skipped_budget"),
             ("errors", "errors"), ("lost_lease", "lost_lease"), ("released", "given_back"),
             ("judge_down", "judge_down"), ("no_metric", "no_metric"))


def _client() -> Any:
    try:
        import prometheus_client  # noqa: PLC0415 - optional, loaded when metrics are asked for
    except ImportError as exc:
        raise ConfigurationError("worker metrics need the Prometheus client library: pip install "
                                 "'contextjudge[prometheus]' (or prometheus-client).") from exc
    return prometheus_client


class WorkerMetrics:
    """The Prometheus metrics of one ``Worker``: ``attach(worker)`` once, then ``serve(port)`` or read
    ``exposition()``. ``rolling``: scores in each rolling mean; ``queue_every``: seconds between reads of the
    store's queue counts."""

    def __init__(self, *, rolling: int = 100, queue_every: float = 5.0) -> None:
        pc = _client()
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        self._pc = pc
        self._counter_family = CounterMetricFamily
        self._gauge_family = GaugeMetricFamily
        self.registry = pc.CollectorRegistry(auto_describe=False)
        self.rolling = max(1, int(rolling))
        self.queue_every = float(queue_every)
        self.worker: Any = None
        self._lock = threading.Lock()
        self._scores: dict[tuple[str, str], collections.deque] = {}
        self._queue: tuple[float, dict[str, int]] | None = None
        self._server: Any = None
        self._thread: Any = None
        r = self.registry
        self.calls = pc.Counter("contextjudge_judge_calls", "Judge calls (cached: answered by the verdict cache)",
                                ["judge", "cached"], registry=r)
        self.seconds = pc.Histogram("contextjudge_judge_call_seconds", "Seconds per answered judge call", ["judge"],
                                    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r)
        self.tokens = pc.Counter("contextjudge_judge_tokens", "Judge tokens billed (input / output)",
                                 ["judge", "kind"], registry=r)
        self.dollars = pc.Counter("contextjudge_judge_dollars", "Judge dollars (where the judge's price is known)",
                                  ["judge"], registry=r)
        self.errors = pc.Counter("contextjudge_judge_errors", "Results whose judging failed, by error type",
                                 ["error_type"], registry=r)
        self.results = pc.Counter("contextjudge_results", "Metric results written by this worker",
                                  ["metric", "retriever", "outcome"], registry=r)
        r.register(_Collector(self))

    # ------------------------------------------------------------------------------------------ hooks
    def attach(self, worker: Any) -> WorkerMetrics:
        """Count ``worker``'s judge calls and results (its run's call hook and an ``on_results`` hook)."""
        self.worker = worker
        worker.on_results.append(self.on_results)
        worker.call_hooks.append(self.on_call)
        return self

    def on_call(self, event: dict[str, Any]) -> None:
        """Count one judge call: calls (cached or not), seconds, and billed tokens and dollars."""
        judge = str(event.get("judge") or "?")
        cached = bool(event.get("cached"))
        self.calls.labels(judge, "true" if cached else "false").inc()
        if cached:
            return
        u = event.get("usage")
        if u is None:
            return
        get = (lambda k: u.get(k)) if isinstance(u, dict) else (lambda k: getattr(u, k, None))
        secs = get("seconds")
        if secs is not None:
            self.seconds.labels(judge).observe(float(secs))
        inp, out = int(get("input_tokens") or 0), int(get("output_tokens") or 0)
        if not getattr(self.worker, "billable", lambda _j: True)(judge):
            return  # the embedded judge's pseudo-tokens cost nothing: not counted as billed tokens
        if inp:
            self.tokens.labels(judge, "input").inc(inp)
        if out:
            self.tokens.labels(judge, "output").inc(out)
        cost = get("cost")
        if cost:
            self.dollars.labels(judge).inc(float(cost))

    def on_results(self, test_case: Any, results: list, case_key: str, run_id: str) -> None:
        """Count a case's results per metric and retriever (pass, fail or error) and keep the rolling scores."""
        meta = getattr(test_case, "additional_metadata", None) or {}
        retriever = str(meta.get(RETRIEVER_KEY) or "")
        with self._lock:
            for r in results:
                if r.score is None:
                    self.errors.labels(str(r.error_type or "Error")).inc()
                    self.results.labels(r.name, retriever, "error").inc()
                    continue
                self.results.labels(r.name, retriever, "pass" if r.success else "fail").inc()
                q = self._scores.get((r.name, retriever))
                if q is None:
                    q = self._scores[(r.name, retriever)] = collections.deque(maxlen=self.rolling)
                q.append(float(r.score))

    # ------------------------------------------------------------------------------------------ serving
    def serve(self, port: int, addr: str = "127.0.0.1", *, idle_timeout: float = 10.0,
              max_connections: int = 16) -> int:
        """Serve ``/metrics`` on ``addr:port`` from a daemon thread (``port=0``: a free port); returns the port.

        Loopback by default (``addr="0.0.0.0"`` to be scraped from other machines). One thread reads every
        connection until its request is in; a connection whose request is not in ``idle_timeout`` seconds after it
        connected is closed, and with ``MAX_OPEN`` connections waiting a new one closes the oldest. At most
        ``max_connections`` requests are answered at once (each on a thread of a pool of that size): idle or
        flooding clients can neither pile up threads in the worker nor keep a scrape out."""
        try:
            self._server = _server(addr, int(port), self._pc.make_wsgi_app(self.registry), idle_timeout,
                                   max_connections)
        except OSError as exc:
            raise ConfigurationError(f"cannot serve worker metrics on {addr}:{port}: {exc.strerror or exc}. Pick "
                                     "another --metrics-port.") from exc
        self._thread = threading.Thread(target=self._server.serve_forever, name="contextjudge-worker-metrics",
                                        daemon=True)
        self._thread.start()
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop the HTTP endpoint ``serve`` started, if any."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def exposition(self) -> str:
        """The metrics in the text exposition format, as a scrape gets them."""
        return self._pc.generate_latest(self.registry).decode("utf-8")

    # ------------------------------------------------------------------------------------------ read at a scrape
    def _queue_counts(self) -> dict[str, int]:
        now = time.monotonic()
        if self._queue is not None and now - self._queue[0] < self.queue_every:
            return self._queue[1]
        counts = {}
        w = self.worker
        if w is not None:
            try:
                counts = w.store.queue_counts()
            except Exception:  # noqa: BLE001 - a scrape must answer even when the store does not
                counts = self._queue[1] if self._queue else {}
        self._queue = (now, counts)
        return counts


class _Collector:
    """What is read at each scrape: the worker's counts, the queue, the budget windows, the rolling means."""

    def __init__(self, owner: WorkerMetrics) -> None:
        self.owner = owner

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        o = self.owner
        w = o.worker
        cases = o._counter_family("contextjudge_worker_cases", "Cases by what became of them in this worker",
                                  labels=["outcome"])
        counts = w.counts.to_dict() if w is not None else {}
        for attr, label in _OUTCOMES:
            cases.add_metric([label], float(counts.get(attr, 0)))
        yield cases
        queue = o._gauge_family("contextjudge_queue_cases", "Cases in the store's queue by state (every worker's)",
                                labels=["state"])
        for state, n in sorted(o._queue_counts().items()):
            queue.add_metric([state], float(n))
        yield queue
        spent = o._gauge_family("contextjudge_budget_spent", "What the current window of the budget holds",
                                labels=["budget", "window", "unit"])
        limit = o._gauge_family("contextjudge_budget_limit", "The budget's limit per window",
                                labels=["budget", "window", "unit"])
        for name, kind, unit, used, cap in (w.budget_windows() if w is not None else []):
            spent.add_metric([name, kind, unit], float(used))
            if cap is not None:
                limit.add_metric([name, kind, unit], float(cap))
        yield spent
        yield limit
        mean = o._gauge_family("contextjudge_score_rolling_mean", "Mean of the last scores of a metric and retriever",
                               labels=["metric", "retriever"])
        count = o._gauge_family("contextjudge_score_rolling_count", "Scores in that rolling mean",
                                labels=["metric", "retriever"])
        with o._lock:
            items = [(k, list(q)) for k, q in o._scores.items()]
        for (metric, retriever), xs in sorted(items):
            if xs:
                mean.add_metric([metric, retriever], sum(xs) / len(xs))
                count.add_metric([metric, retriever], float(len(xs)))
        yield mean
        yield count


# ---------------------------------------------------------------------------------------------------- the endpoint
# prometheus-client's own start_http_server binds 0.0.0.0 by default and gives each connection a thread with no
# timeout. Ours: one thread reads every connection (a selector) until its request's headers are in, and only a whole
# request goes to one of ``max_connections`` threads, which answers it with wsgiref around the library's
# make_wsgi_app. An idle connection costs a socket, never a thread: it is closed ``idle_timeout`` seconds after it
# connected unless its request came in, and when MAX_OPEN connections are waiting the oldest is closed to let a new
# one in, so held idle connections can never starve a scrape.
MAX_OPEN = 256  # connections waiting for their request at once (the oldest closed first)
MAX_HEAD = 16384  # bytes of request line and headers; a longer head is closed unanswered


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the signature is the stdlib's
        pass


class _Endpoint(WSGIServer):
    """The worker's ``/metrics`` server (see above): ``serve_forever`` is the selector thread, ``shutdown`` stops it."""

    request_queue_size = 128  # the listen backlog (socketserver's 5 makes a burst of connections wait seconds)

    def __init__(self, addr: str, port: int, app: Any, idle_timeout: float, max_connections: int,
                 max_open: int = MAX_OPEN) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.idle_timeout = float(idle_timeout)
        self.max_open = max(1, int(max_open))
        super().__init__((addr, port), _QuietHandler)
        self.set_app(app)
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(max_connections)),
                                        thread_name_prefix="contextjudge-worker-metrics-answer")
        self._stop = threading.Event()
        self._stopped = threading.Event()
        # each waiting connection: [deadline, client address, the bytes so far]; insertion order = deadline order
        self._waiting: dict[socket.socket, list[Any]] = {}

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        sel = selectors.DefaultSelector()
        self.socket.setblocking(False)
        sel.register(self.socket, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                wait = poll_interval
                if self._waiting:
                    first = next(iter(self._waiting.values()))[0]
                    wait = min(wait, max(0.0, first - time.monotonic()))
                for key, _ in sel.select(wait):
                    if key.fileobj is self.socket:
                        self._accept(sel)
                    else:
                        self._read(sel, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                while self._waiting:
                    conn, (deadline, _, _) = next(iter(self._waiting.items()))
                    if deadline > now:
                        break
                    self._drop(sel, conn)
        finally:
            for conn in list(self._waiting):
                self._drop(sel, conn)
            sel.close()
            self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(64):  # a burst at a time, then the waiting ones get their turn
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors, a reset before accept: the listener stays
                return
            while len(self._waiting) >= self.max_open:  # full: the oldest waiting connection makes room
                self._drop(sel, next(iter(self._waiting)))
            conn.setblocking(False)
            self._waiting[conn] = [time.monotonic() + self.idle_timeout, address, bytearray()]
            sel.register(conn, selectors.EVENT_READ)

    def _read(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        entry = self._waiting.get(conn)
        if entry is None:
            return
        try:
            data = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, conn)
            return
        head = entry[2]
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head:  # the whole head: answered on a thread of the pool
            sel.unregister(conn)
            del self._waiting[conn]
            try:
                self._pool.submit(self._answer, conn, entry[1], bytes(head))
            except RuntimeError:  # the pool is shut down: closing
                self.shutdown_request(conn)
        elif len(head) > MAX_HEAD:
            self._drop(sel, conn)

    def _drop(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        self._waiting.pop(conn, None)
        try:
            sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        self.shutdown_request(conn)

    def _answer(self, conn: socket.socket, address: Any, head: bytes) -> None:
        class Answer(_QuietHandler):
            timeout = self.idle_timeout  # a client that does not read its answer is cut off

            def setup(self) -> None:
                super().setup()
                self.rfile = io.BytesIO(head)  # the head the selector read (a scrape is a GET: no body)

        try:
            conn.setblocking(True)
            Answer(conn, address, self)
        except Exception:  # noqa: BLE001 - a broken client never reaches the worker
            pass
        finally:
            self.shutdown_request(conn)

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _server(addr: str, port: int, app: Any, idle_timeout: float, max_connections: int) -> WSGIServer:
    return _Endpoint(addr, port, app, idle_timeout, max_connections)

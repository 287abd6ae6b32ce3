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
import socket
import socketserver
import threading
import time
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

        Loopback by default (``addr="0.0.0.0"`` to be scraped from other machines). A connection that sends nothing
        for ``idle_timeout`` seconds is closed, and at most ``max_connections`` are served at once (the next ones
        are closed at once): idle or flooding clients cannot pile up threads in the worker."""
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
# timeout; this is the same wsgiref server with a deadline on idle connections and a cap on open ones (the app is
# the library's own make_wsgi_app).
class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the signature is the stdlib's
        pass


def _server(addr: str, port: int, app: Any, idle_timeout: float, max_connections: int) -> WSGIServer:
    slots = threading.BoundedSemaphore(max(1, max_connections))

    class Handler(_QuietHandler):
        timeout = idle_timeout  # StreamRequestHandler puts it on the socket: a silent client is closed

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

        def process_request(self, request: Any, client_address: Any) -> None:
            if not slots.acquire(blocking=False):  # full: closed now, no thread made
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                slots.release()

    server = Server((addr, port), Handler)
    server.set_app(app)
    return server

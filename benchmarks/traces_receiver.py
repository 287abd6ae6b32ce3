"""The OTLP receiver's throughput, memory and latency (issue 50).

    python benchmarks/traces_receiver.py [--traces 2000] [--spans-per-trace 10] [--batch 512] [--cpus 0,1]

Three figures, each printed as one JSON line:

1. ``throughput``: a child process posts OTLP/HTTP protobuf requests (``--batch`` spans each, as the SDK's
   BatchSpanProcessor sends them, gzipped) of ``--traces`` RAG traces (a root chain, a retriever with 5 documents,
   an LLM call, and ``--spans-per-trace`` - 3 other spans) from 2 connections to ``contextjudge collect``'s receiver
   in this process, whose cases go to a SQLite store's queue (mode "worker", as the command does without --model).
   spans/s is spans accepted per second of posting; cases/s is cases queued in the store per second from the first
   request until the last case is in the store.
2. ``memory``: the Python memory (tracemalloc) held by 10,000 open traces of ``--spans-per-trace`` spans each in the
   window, after decoding from protobuf (the bytes the receiver keeps).
3. ``latency``: one trace at a time, the seconds from posting its root span (the trace's end) until its case is in
   the store's queue; median and 95th percentile of 30.

``--cpus`` pins this process (and the client it starts) to those CPUs (default: the first two).
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import secrets
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _trace_request(n_traces: int, spans_per_trace: int) -> list:
    """Spans as protobuf ``Span`` messages, trace after trace, each trace's root last."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    def kv(k: str, v) -> KeyValue:
        if isinstance(v, float):
            return KeyValue(key=k, value=AnyValue(double_value=v))
        return KeyValue(key=k, value=AnyValue(string_value=str(v)))

    out = []
    t0 = time.time_ns()
    for i in range(n_traces):
        tid, root = secrets.token_bytes(16), secrets.token_bytes(8)
        q = f"question {i}: how many vacation days do employees get in year {i % 7}?"
        docs = [(f"doc-{i}-{j}", f"Policy paragraph {j} of trace {i}: employees get {20 + j} days. " * 3, 0.9 - j / 10)
                for j in range(5)]
        r_attrs = [kv("openinference.span.kind", "RETRIEVER"), kv("input.value", q), kv("session.id", f"s{i % 50}")]
        for j, (did, text, score) in enumerate(docs):
            r_attrs += [kv(f"retrieval.documents.{j}.document.id", did),
                        kv(f"retrieval.documents.{j}.document.content", text),
                        kv(f"retrieval.documents.{j}.document.score", score),
                        kv(f"retrieval.documents.{j}.document.metadata", json.dumps({"title": did}))]
        prompt = "Context:\n" + "\n".join(t for _, t, _ in docs) + "\nQuestion: " + q
        spans = [Span(trace_id=tid, span_id=secrets.token_bytes(8), parent_span_id=root, name="retriever",
                      start_time_unix_nano=t0 + 1, end_time_unix_nano=t0 + 2, attributes=r_attrs),
                 Span(trace_id=tid, span_id=secrets.token_bytes(8), parent_span_id=root, name="llm",
                      start_time_unix_nano=t0 + 3, end_time_unix_nano=t0 + 4,
                      attributes=[kv("openinference.span.kind", "LLM"),
                                  kv("llm.input_messages.0.message.content", prompt),
                                  kv("llm.output_messages.0.message.content", f"You get {20 + i % 5} days.")])]
        for j in range(spans_per_trace - 3):
            spans.append(Span(trace_id=tid, span_id=secrets.token_bytes(8), parent_span_id=root, name=f"step{j}",
                              start_time_unix_nano=t0 + 5, end_time_unix_nano=t0 + 6,
                              attributes=[kv("openinference.span.kind", "CHAIN"), kv("input.value", q),
                                          kv("output.value", "x" * 200), kv("http.method", "POST")]))
        spans.append(Span(trace_id=tid, span_id=root, name="rag", start_time_unix_nano=t0,
                          end_time_unix_nano=t0 + 10, attributes=[kv("openinference.span.kind", "CHAIN"),
                                                                  kv("input.value", q), kv("output.value", "ok")]))
        out.append(spans)
    return out


def _bodies(traces: list, batch: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    flat = [s for t in traces for s in t]
    out = []
    for i in range(0, len(flat), batch):
        req = ExportTraceServiceRequest()
        ss = req.resource_spans.add().scope_spans.add()
        ss.spans.extend(flat[i:i + batch])
        out.append(gzip.compress(req.SerializeToString(), 1))
    return out


def _post(url: str, body: bytes) -> None:
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()


def _client(url: str, bodies: list[bytes], cpus: list[int], done: mp.Queue) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    from concurrent.futures import ThreadPoolExecutor

    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda b: _post(url, b), bodies))
    done.put((start, time.perf_counter()))


def _queued(store) -> int:
    c = store.queue_counts()
    return c["queued"] + c["claimed"] + c["done"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--spans-per-trace", type=int, default=10)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--cpus", default="0,1")
    args = ap.parse_args()
    cpus = [int(c) for c in args.cpus.split(",")]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)

    from contextjudge.capture import CaptureSession
    from contextjudge.store import open_store
    from contextjudge.traces import TraceCollector, TraceReceiver, from_protobuf

    tmp = tempfile.mkdtemp()
    db = os.path.join(tmp, "cj.db")
    session = CaptureSession(mode="worker", store=db, run_name="bench", warn_after_roots=None, max_kept=1000,
                             max_queue=100_000)
    collector = TraceCollector(session, settle=0.3, max_traces=20_000)
    rec = TraceReceiver(collector, port=0).start()
    store = open_store(db)

    # 1. throughput
    bodies = _bodies(_trace_request(args.traces, args.spans_per_trace), args.batch)
    n_spans = args.traces * args.spans_per_trace
    done: mp.Queue = mp.Queue()
    t0 = time.perf_counter()
    p = mp.get_context("fork").Process(target=_client, args=(rec.endpoint, bodies, cpus, done))
    p.start()
    start, end = done.get(timeout=600)
    p.join()
    posted = time.perf_counter()
    while _queued(store) < args.traces and time.perf_counter() - posted < 120:
        time.sleep(0.05)
    stored = time.perf_counter()
    counts = rec.all_counts()
    print(json.dumps({"figure": "throughput", "spans": n_spans, "traces": args.traces, "requests": len(bodies),
                      "spans_per_s": round(n_spans / (end - start)), "cases_in_store": _queued(store),
                      "cases_per_s": round(_queued(store) / (stored - t0)), "rejected": counts.get("rejected", 0),
                      "cpus": cpus}), flush=True)

    # 2. latency, one trace at a time
    lat = []
    for tr in _trace_request(30, args.spans_per_trace):
        before = _queued(store)
        *children, root = tr
        _post(rec.endpoint, _bodies([children], 10_000)[0])
        t = time.perf_counter()
        _post(rec.endpoint, _bodies([[root]], 10_000)[0])
        while _queued(store) == before and time.perf_counter() - t < 30:
            time.sleep(0.005)
        lat.append(time.perf_counter() - t)
    lat.sort()
    print(json.dumps({"figure": "latency", "trace_end_to_store_s_median": round(statistics.median(lat), 3),
                      "p95": round(lat[int(0.95 * (len(lat) - 1))], 3), "settle_s": collector.window.settle}),
          flush=True)
    rec.shutdown()
    collector.close()
    session.close()
    store.close()

    # 3. memory of 10,000 open traces
    from contextjudge.traces._window import TraceWindow

    raw = [_bodies([t], 10_000)[0] for t in _trace_request(10_000, args.spans_per_trace)]
    tracemalloc.start()
    window = TraceWindow(settle=3600, window=3600, max_traces=10_000)
    base = tracemalloc.get_traced_memory()[0]
    for body in raw:
        window.add(from_protobuf(gzip.decompress(body)))
    held = tracemalloc.get_traced_memory()[0] - base
    window.add(from_protobuf(gzip.decompress(_bodies(_trace_request(1, args.spans_per_trace), 10_000)[0])))
    print(json.dumps({"figure": "memory", "open_traces": len(window), "spans_per_trace": args.spans_per_trace,
                      "mib": round(held / 2**20, 1), "bytes_per_trace": held // 10_000,
                      "evicted_at_10001": window.counts["evicted"]}), flush=True)


if __name__ == "__main__":
    main()

"""``contextjudge collect`` (an OTLP/HTTP receiver) and ``contextjudge import-traces FILE...``: the cases of the
traces an app already sends, with no change to the app (issue 50).
CONTRACT: ``add_traces_commands(sub)`` registers both subcommands."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

from . import _shared

__all__ = ["add_traces_commands"]

_COLLECT = (
    "Receive an app's traces over OTLP/HTTP (POST /v1/traces, protobuf or JSON, gzip or not) and turn each trace's "
    "retrievals into test cases: the question, the documents in the order retrieved (text, id, score, metadata), "
    "the answer of the LLM call that used them, the session id and the app's own trace and span ids. Reads the "
    "OpenInference (Phoenix, Arize) and OpenTelemetry GenAI / OpenLLMetry (Traceloop) conventions. The cases are "
    "queued in the store for `contextjudge worker` (like capture in mode='worker'), or scored here with --model. "
    "Point the app's exporter at it: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces "
    "(docs/traces.md). Listens on 127.0.0.1 only unless --host says otherwise, which then needs --token.")


def _window_args(p: argparse.ArgumentParser) -> None:
    _shared._store_arg(p)
    p.add_argument("--model", help="score the cases here with this judge (see `contextjudge eval --help`); default: "
                                   "queue them for `contextjudge worker --store <the same>`")
    p.add_argument("--run-name", default=None, help="the run the cases go to (default: 'traces')")
    p.add_argument("--sample-rate", type=float, default=None, metavar="R",
                   help="judge only this share of the cases (by conversation, else by question), as capture does")
    p.add_argument("--metrics", nargs="+", metavar="METRIC",
                   help="metrics to score (default: contextual relevancy, utilization and turn relevancy)")


def add_traces_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``collect`` and ``import-traces``."""
    p = sub.add_parser("collect", help="receive an app's OTLP traces and score their retrievals",
                       description=_COLLECT)
    _window_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=4318, help="port (default 4318, OTLP/HTTP's; 0: a free one)")
    p.add_argument("--token", default=os.environ.get("CONTEXTJUDGE_COLLECT_TOKEN"),
                   help="require 'Authorization: Bearer TOKEN' (default: $CONTEXTJUDGE_COLLECT_TOKEN); needed when "
                        "--host is not a loopback address")
    p.add_argument("--settle", type=float, default=0.3, metavar="S",
                   help="seconds to wait after a trace's root span for its late spans (default 0.3)")
    p.add_argument("--window", type=float, default=30.0, metavar="S",
                   help="a trace whose root never comes is assembled this long after its last span (default 30)")
    p.add_argument("--max-traces", type=int, default=10_000, metavar="N",
                   help="open traces held at once; the oldest is assembled early past it (default 10000)")
    _shared._common(p)
    p.set_defaults(func=cmd_collect)
    q = sub.add_parser("import-traces", help="score the retrievals in OTLP JSON or Phoenix span export files",
                       description="Read OTLP JSON files (the OpenTelemetry Collector's file exporter: one export "
                                   "request per line) or Phoenix span exports, and turn their traces' retrievals into "
                                   "test cases, as `contextjudge collect` does; queued for `contextjudge worker`, or "
                                   "scored here with --model.")
    q.add_argument("files", nargs="*", metavar="FILE")
    q.add_argument("--phoenix", metavar="URL",
                   help="read the spans of a running Phoenix (e.g. http://127.0.0.1:6006) and, with --model, write "
                        "each score back as an annotation on its retriever span")
    q.add_argument("--project", default="default", help="the Phoenix project to read (default: 'default')")
    q.add_argument("--phoenix-api-key", default=os.environ.get("PHOENIX_API_KEY"),
                   help="Phoenix's API key, when it has auth on (default: $PHOENIX_API_KEY)")
    _window_args(q)
    _shared._common(q)
    q.set_defaults(func=cmd_import_traces)


def _session(args: argparse.Namespace, default_name: str, on_result: Any = None) -> Any:
    from ..capture import CaptureSession  # noqa: PLC0415
    from ..metrics import from_keys  # noqa: PLC0415

    store = _shared._store(args.store)
    judge = _shared._judge(args.model, args.quiet) if args.model else None
    metrics = None
    if args.metrics:
        keys = _shared._metric_keys(args.metrics, [])
        metrics = from_keys(keys, model=judge)
    return CaptureSession(metrics, model=judge, mode="background" if args.model else "worker", store=store, run_name=args.run_name or default_name,
                          sample_rate=args.sample_rate, warn_after_roots=None, max_kept=1_000, on_result=on_result)


def _summary(counts: dict[str, int], session: Any) -> str:
    c = session.counters
    return (f"{counts.get('spans', 0)} span(s), {counts.get('traces', 0)} trace(s), {counts.get('cases', 0)} case(s) "
            f"({c.get('sampled', c.get('seen', 0))} kept by sampling), {counts.get('unknown_spans', 0)} span(s) of no "
            f"known convention, {counts.get('traces_without_retrieval', 0)} trace(s) without a retrieval"
            + (f", {counts['rejected']} request(s) rejected" if counts.get("rejected") else ""))


def cmd_import_traces(args: argparse.Namespace) -> int:
    """``contextjudge import-traces``."""
    from ..errors import ConfigurationError  # noqa: PLC0415
    from ..traces import PayloadError, PhoenixSource, TraceCollector, read_span_file  # noqa: PLC0415

    if not args.files and not args.phoenix:
        raise _shared.UsageError("give span files (OTLP JSON, Phoenix exports) or --phoenix URL")
    phoenix = None
    if args.phoenix:
        phoenix = PhoenixSource(args.phoenix, project=args.project, api_key=args.phoenix_api_key)
        if not args.model:
            _shared._info("no --model: the cases are queued for `contextjudge worker`, and no score is written "
                          "back to Phoenix (pass --model to score here and annotate the spans)", args.quiet)
    session = _session(args, "traces-import", phoenix.annotate if phoenix is not None and args.model else None)
    collector = TraceCollector(session, source="phoenix" if phoenix else "file", background=False,
                               max_traces=10_000_000)
    try:
        if phoenix is not None:
            try:
                n = 0
                for page in phoenix.spans():
                    collector.add(page)
                    n += len(page)
            except (ConfigurationError, PayloadError) as exc:
                raise _shared.UsageError(str(exc)) from None
            _shared._info(f"{args.phoenix} (project {args.project}): {n} span(s)", args.quiet)
        for path in args.files:
            try:
                spans, fmt = read_span_file(path)
            except (OSError, PayloadError) as exc:
                raise _shared.UsageError(str(exc)) from None
            collector.add(spans)
            _shared._info(f"{path}: {len(spans)} span(s) ({fmt})", args.quiet)
        collector.assemble_due(everything=True)
        session.flush()
    finally:
        session.close()
    print(_summary(collector.counts, session))
    if phoenix is not None and args.model:
        print(f"{phoenix.counts['annotations']} score(s) written to Phoenix as span annotations"
              + (f", {phoenix.counts['annotations_failed']} failed" if phoenix.counts["annotations_failed"] else ""))
    what = "scored" if args.model else "queued for `contextjudge worker`"
    _shared._info(f"cases {what} in run {session.run_id}", args.quiet)
    return _shared.EXIT_OK


def cmd_collect(args: argparse.Namespace) -> int:
    """``contextjudge collect``: serve until SIGTERM / Ctrl-C, then assemble what is open and close the run."""
    from ..errors import ConfigurationError  # noqa: PLC0415
    from ..traces import TraceCollector, TraceReceiver  # noqa: PLC0415

    session = _session(args, "traces")
    collector = TraceCollector(session, settle=args.settle, window=args.window, max_traces=args.max_traces)
    try:
        receiver = TraceReceiver(collector, host=args.host, port=args.port, token=args.token)
    except ConfigurationError as exc:
        session.close()
        raise _shared.UsageError(str(exc)) from None
    except OSError as exc:
        session.close()
        raise _shared.UsageError(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is \
        threading.main_thread() else None
    receiver.start()
    print(f"receiving OTLP traces at {receiver.endpoint}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        receiver.shutdown()
        collector.close()
        session.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(_summary(receiver.all_counts(), session), flush=True)
    return _shared.EXIT_OK

"""``contextjudge worker --store URL``: score the cases a capture queued, out of the app's process.
CONTRACT: ``add_worker_command(sub)`` registers the subcommand."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import _shared

__all__ = ["add_worker_command"]

_DESCRIPTION = (
    "Follow a store's queue: claim the cases a capture in mode='worker' wrote (or --enqueue-unscored ones), score "
    "them with the run's metrics and judge, write each case's results once, and keep going until stopped. Cases "
    "are claimed with leases: a worker that dies gives its cases back when their leases expire (only the judge "
    "calls that were in flight are repeated). Several workers may share a PostgreSQL store; a SQLite store takes "
    "one. SIGTERM or Ctrl-C stops it cleanly (it finishes the cases in hand within --grace seconds and gives back "
    "the rest; a second signal gives back everything at once) and exits 0. By default it runs on all CPUs but one, "
    "at a lower priority (nice 10), so the app keeps a core.")


def add_worker_command(sub: argparse._SubParsersAction) -> None:
    """Register ``worker``."""
    from ._shared import _common, _store_arg

    p = sub.add_parser("worker", help="score queued cases out of the app's process (capture mode='worker')",
                       description=_DESCRIPTION)
    _store_arg(p)
    p.add_argument("--run", help="only this run's cases (id, name or id prefix; default: every run's)")
    p.add_argument("--metrics", nargs="+", metavar="METRIC",
                   help="metrics to score (default: each run's own, as its capture was given, else contextual "
                        "precision, recall, relevancy, utilization, faithfulness and turn relevancy)")
    p.add_argument("--model", help="judge (see `contextjudge eval --help`); default: $CONTEXTJUDGE_MODEL, else "
                                   "OpenAI with OPENAI_API_KEY, else the embedded judge")
    p.add_argument("--threshold", action="append", metavar="[METRIC=]VALUE",
                   help="a metric's threshold (default: the run's, else the metric's own)")
    p.add_argument("--lease", type=_positive(float), default=60.0, metavar="S",
                   help="seconds a claim holds before another worker may take the case; renewed every third of it "
                        "while the case is scored (default 60)")
    p.add_argument("--batch", type=_positive(int), default=8, metavar="N", help="cases claimed at once (default 8)")
    p.add_argument("--concurrency", type=_positive(int), default=4, metavar="N",
                   help="cases scored at once (default 4)")
    p.add_argument("--cpus", type=_non_negative_int, default=None, metavar="N",
                   help="CPUs to run on, the highest-numbered (default: all but one; 0: no limit)")
    p.add_argument("--nice", type=_non_negative_int, default=10, metavar="N",
                   help="lower the worker's priority by N (default 10; 0: unchanged)")
    p.add_argument("--grace", type=_non_negative(float), default=10.0, metavar="S",
                   help="at a stop, seconds to finish the cases in hand before giving them back (default 10)")
    p.add_argument("--poll", type=_positive(float), default=1.0, metavar="S",
                   help="seconds between looks at an empty queue (default 1)")
    for span in ("day", "hour"):
        p.add_argument(f"--budget-tokens-per-{span}", type=_positive(int), metavar="N",
                       help=f"judge tokens allowed per calendar {span} (UTC); shared by every process on the store")
        p.add_argument(f"--budget-dollars-per-{span}", type=_positive(float), metavar="D",
                       help=f"judge dollars allowed per calendar {span} (needs a known price, or a token limit)")
        p.add_argument(f"--budget-calls-per-{span}", type=_positive(int), metavar="N",
                       help=f"judge calls allowed per calendar {span}, of any judge (the embedded judge, which "
                            "spends no token or dollar budget, included)")
    p.add_argument("--requeue-skipped", action="store_true",
                   help="queue again the cases a spent budget set aside, when the budget's next window opens (and "
                        "at start, when it has room)")
    p.add_argument("--metrics-port", type=_non_negative_int, metavar="P",
                   help="serve Prometheus metrics on this port (/metrics; 0: a free port, printed at start; pip "
                        "install 'contextjudge[prometheus]')")
    p.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                   help="address the metrics endpoint listens on (default 127.0.0.1, this machine only; 0.0.0.0 "
                        "to be scraped from other machines)")
    p.add_argument("--otel", action="store_true",
                   help="send each result as an OpenTelemetry evaluation span into its request's trace "
                        "(configured from the OTEL_* environment variables; pip install 'contextjudge[otel]')")
    p.add_argument("--once", action="store_true", help="score what the queue holds now, then exit")
    p.add_argument("--enqueue-unscored", action="store_true",
                   help="first queue the unscored cases of --run (default: the latest run), e.g. a deferred capture")
    p.add_argument("--every", type=_positive(int), default=100, metavar="N",
                   help="print a progress line every N cases (default 100)")
    p.add_argument("--prune-every", type=float, default=3600.0, metavar="SECONDS",
                   help="apply the store's retention setting (`contextjudge prune --set`) this often, one process "
                        "on the store at a time (default 3600; 0: never)")
    _common(p)
    p.set_defaults(func=cmd_worker)


def _positive(kind: Any) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}") \
                from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
        return value
    return parse


def _non_negative(kind: Any) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
        return value
    return parse


_non_negative_int = _non_negative(int)


def _budget(args: argparse.Namespace) -> Any:
    limits = {name: getattr(args, f"budget_{name}") for name in ("tokens_per_day", "dollars_per_day",
                                                                 "tokens_per_hour", "dollars_per_hour",
                                                                 "calls_per_day", "calls_per_hour")}
    limits = {k: v for k, v in limits.items() if v is not None}
    if not limits:
        return None
    from ..judges import Budget

    return Budget(**limits)


def cmd_worker(args: argparse.Namespace) -> int:
    from ..engine import Worker, limit_cpu, metrics_for_run
    from ..errors import StoreError, UsageError
    from ..judges import JudgeOptions

    # before the judge is built: the embedded judge sizes its encoder's threads from the CPUs it may use
    limit_cpu(args.cpus, args.nice)
    store = _shared._store(args.store)
    run_id = _shared._resolve(store, args.run) if args.run else None
    if args.enqueue_unscored:
        target = run_id or _shared._resolve(store, None)
        added = store.enqueue(target, only_unscored=True)
        _shared._info(f"queued {added} unscored case(s) of run {target}", args.quiet)
    threshold, per = _shared._thresholds(args.threshold, "--threshold")
    # the store's labels calibrate the embedded judge: said here, and the worker reads them again while it runs (a
    # label given meanwhile takes over between cases), so it is given the judge as named, not as calibrated now
    judge = _shared._judge(args.model, args.quiet)
    _shared._store_judge(store, judge, args.quiet)
    if args.metrics:
        keys = _shared._metric_keys(args.metrics, [])
        metrics: Any = _shared._build_metrics(keys, None, threshold, per)
    else:
        def metrics(config: dict[str, Any]) -> list[Any]:
            return metrics_for_run(config, threshold=threshold, thresholds=per)
    budget = _budget(args)
    options = JudgeOptions(budget=budget) if budget is not None else None
    hooks = []
    if args.otel:
        from ..otel import exporter_from_environment

        hooks.append(exporter_from_environment())

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    worker = Worker(store, metrics, judge, lease=args.lease, batch=args.batch, concurrency=args.concurrency,
                    run_id=run_id, judge_options=options, on_results=hooks, poll=args.poll, cpus=args.cpus,
                    nice=args.nice, grace=args.grace, log=say, report_every=args.every,
                    requeue_skipped=args.requeue_skipped, prune_every=args.prune_every or None)
    exporter = None
    if args.metrics_port is not None:
        from ..engine import WorkerMetrics
        from ..errors import ConfigurationError

        try:
            exporter = WorkerMetrics().attach(worker)
            port = exporter.serve(args.metrics_port, args.metrics_addr)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from exc
        say(f"worker metrics: http://{args.metrics_addr}:{port}/metrics")
    for hook in hooks:
        if hasattr(hook, "attach_worker"):
            hook.attach_worker(worker)
    try:
        worker.run(once=args.once, handle_signals=True)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        store.close()
        for hook in hooks:  # the exporter sends the spans still in its batch before the worker exits
            hook.close()
        if exporter is not None:
            exporter.close()
    c = worker.counts
    print(f"worker: {c.judged} judged, {c.skipped_budget} skipped (budget), {c.lost_lease} lost lease, "
          f"{c.errors} with errors, {c.released} given back, {c.judge_down} given back while the judge was down"
          + (f", {c.requeued} budget-skipped case(s) queued again" if c.requeued else ""))
    if c.skipped_budget:
        from ..engine import SKIPPED_ADVICE

        print(f"{c.skipped_budget} case(s) were skipped by the budget: " + SKIPPED_ADVICE)
    return _shared.EXIT_OK

"""``contextjudge prune``: retention for a store that lives for years (``store.prune``; see ``store/_retention.py``).

    contextjudge prune --older-than 90d --dry-run     # what would go
    contextjudge prune --older-than 90d --keep-runs 50
    contextjudge prune --older-than 90d --set         # the store's setting: every worker applies it, hourly
"""

from __future__ import annotations

import argparse
import json

from ._shared import EXIT_OK, _common, _existing_store, _store_arg

__all__ = ["add_prune_command", "cmd_prune"]


def add_prune_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prune", help="drop old results from a store (retention), or set the store's retention",
                       description="Remove the cases captured before --older-than (with their nodes, results, "
                                   "verdicts and queue rows), every run but the --keep-runs newest, judge-call rows "
                                   "and verdict-cache entries older than the cutoff, and runs left empty. A case a "
                                   "worker has still to score, a case a spent budget set aside (for `worker "
                                   "--requeue-skipped`; unless --skipped) and a case with gold labels (unless "
                                   "--labels) are kept. Deletes run in short batches, so a worker on the store keeps writing. "
                                   "SQLite gives the space back to the file system.")
    _store_arg(p)
    p.add_argument("--older-than", metavar="AGE", help="an age: 90d, 12h, 2w")
    p.add_argument("--keep-runs", type=int, metavar="N", help="keep only the N newest runs (a running run stays)")
    p.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    p.add_argument("--labels", action="store_true", help="prune labelled cases and old gold labels too")
    p.add_argument("--skipped", action="store_true",
                   help="prune the cases a spent budget set aside too (kept without it: `contextjudge worker "
                        "--requeue-skipped` scores them when the budget's window opens)")
    p.add_argument("--set", action="store_true",
                   help="keep --older-than/--keep-runs as the store's retention setting, which every worker on the "
                        "store applies on its own schedule (hourly); prunes nothing now. --set with neither clears it")
    p.add_argument("--show", action="store_true", help="print the store's retention setting")
    p.add_argument("--vacuum", action="store_true",
                   help="SQLite: a full VACUUM after pruning (turns incremental auto-vacuum on for a store made "
                        "before it; needs the file to itself for a while)")
    p.add_argument("--json", action="store_true", help="print what was pruned as JSON")
    _common(p)
    p.set_defaults(func=cmd_prune)


def cmd_prune(args: argparse.Namespace) -> int:
    from ..errors import ConfigurationError, StoreError, UsageError  # noqa: PLC0415

    store = _existing_store(args.store, write=not (args.show or args.dry_run))
    try:
        if args.show:
            print(json.dumps(store.retention()) if args.json else (store.retention() or "no retention setting"))
            return EXIT_OK
        if args.set:
            store.set_retention(args.older_than, args.keep_runs, labels=args.labels, skipped=args.skipped)
            got = store.retention()
            print(f"retention setting: {got}" if got else "retention setting cleared")
            return EXIT_OK
        if args.older_than is None and args.keep_runs is None:
            raise UsageError("prune needs --older-than AGE (e.g. 90d) or --keep-runs N; --dry-run shows what would "
                             "go.")
        report = store.prune(older_than=args.older_than, keep_runs=args.keep_runs, dry_run=args.dry_run,
                             labels=args.labels, skipped=args.skipped, vacuum=args.vacuum)
    except (ConfigurationError, StoreError) as exc:
        raise UsageError(str(exc)) from exc
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.line())
    return EXIT_OK

"""``contextjudge trend --store URL``: production scores per hour, day or week, and the drop alert for CI or cron.
CONTRACT: ``add_trend_command(sub)`` registers the subcommand."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from . import _shared

if TYPE_CHECKING:
    from ..store import ResultsStore

__all__ = ["add_trend_command"]

_DESCRIPTION = (
    "Per window (hour, day or week, UTC, by when the case was captured), each metric's mean with its 95% interval, "
    "the pass rate with its interval, the judged cases, the errors and the judge(s) used, across every run in the "
    "store (a production app's captures, CI runs...). A window with fewer than --min-cases judged cases of a metric "
    "says so instead of giving a mean. --html writes a one-file page with a chart per metric; --json prints the "
    "figures for scripts. --fail-on-drop exits 1 only when the latest window is significantly worse than its "
    "baseline on some metric (paired by input when the windows share enough inputs, else Welch's test; intervals "
    "widened for the number of metrics tested), and prints which metric, by how much, and the worst cases. A "
    "change of judge between the windows is reported as such and never as a drop.")


def add_trend_command(sub: argparse._SubParsersAction) -> None:
    """Register ``trend``."""
    from ._shared import _common, _store_arg

    p = sub.add_parser("trend", help="scores per hour/day/week across runs; --fail-on-drop for CI or cron",
                       description=_DESCRIPTION)
    _store_arg(p)
    p.add_argument("--metric", action="append", metavar="NAME",
                   help="only this metric (its name, e.g. 'Contextual Relevancy'; repeat for several)")
    p.add_argument("--by", choices=("hour", "day", "week"), default="day", help="window length (default day)")
    p.add_argument("--since", metavar="WHEN",
                   help="from this time: an ISO date or time (UTC), or a span back from now such as 24h, 14d, 8w "
                        "(default: everything)")
    p.add_argument("--until", metavar="WHEN", help="up to this time (same forms; default: now)")
    p.add_argument("--filter", nargs="+", action="extend", metavar="KEY=VALUE", default=[],
                   help="only cases with retriever=NAME, tag=TAG, run=ID, or KEY=VALUE in their metadata")
    p.add_argument("--at", choices=("captured", "judged"), default="captured",
                   help="place a result by when its case was captured (default) or when it was judged")
    p.add_argument("--min-cases", type=int, default=10, metavar="N",
                   help="judged cases a window needs for a mean (default 10)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--html", metavar="FILE", help="write a one-file page with a chart per metric")
    p.add_argument("--fail-on-drop", action="store_true",
                   help="exit 1 when the latest window is significantly worse than --baseline on some metric")
    p.add_argument("--baseline", default="previous", metavar="WHICH",
                   help="what the latest window is compared with: previous (the window before; default), last-week "
                        "(the 7 days before it), or 'window N' (the N windows before it)")
    p.add_argument("--min-drop", type=float, default=0.0, metavar="D",
                   help="with --fail-on-drop, also require the mean to fall by at least D (default 0)")
    _common(p)
    p.set_defaults(func=cmd_trend)


def _filters(items: list[str]) -> dict[str, list[str]]:
    from ..errors import UsageError

    out: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--filter {item!r}: write KEY=VALUE, e.g. retriever=policy_search or tag=prod.")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def _ci(iv: Any, spec: str = ".3f") -> str:
    """An interval as "0.712 [0.650, 0.770]" (``spec="+.3f"``: signed, for a difference); "n/a" without one."""
    if iv is None or iv.estimate is None:
        return "n/a"
    if iv.low is None:
        return format(iv.estimate, spec)
    return f"{format(iv.estimate, spec)} [{format(iv.low, spec)}, {format(iv.high, spec)}]"


def cmd_trend(args: argparse.Namespace) -> int:
    from ..errors import ConfigurationError, StoreError, UsageError
    from ..store import find_drops, store_label

    if args.min_cases < 2:
        raise UsageError("--min-cases must be 2 or more: a window needs two cases for an interval.")
    store = _shared._existing_store(args.store)
    where = _filters(args.filter)
    metric = args.metric or None
    try:
        trend = store.trend(metric=metric, by=args.by, since=args.since, until=args.until, where=where, at=args.at,
                            min_cases=args.min_cases)
        drops: list[Any] = []
        info = None
        if args.fail_on_drop and trend.windows:
            drops, info = find_drops(store, trend, baseline=args.baseline, min_drop=args.min_drop, where=where)
    except (ConfigurationError, StoreError) as exc:
        raise UsageError(str(exc)) from exc
    data = trend.to_dict()
    if args.html:
        from ..report import render_trend

        _shared._write(args.html, render_trend(data, drops=[d.to_dict() for d in drops], drop_info=info,
                                           store_label=store_label(store.url, shareable=True)))
    if args.json:
        out = dict(data)
        if args.fail_on_drop:
            out["drop_check"] = {**(info or {}), "drops": [d.to_dict() for d in drops]}
        print(json.dumps(out, indent=2, default=str))
    else:
        _print_trend(trend, store)
        if trend.unplaced:
            print(f"left out: {trend.unplaced} result(s) without a capture time, written by an older contextjudge "
                  "after the store was upgraded (opening the store for writing with this version fills them in)")
        for ch in data["goldens_changes"]:
            a, b = ch["goldens_before"], ch["goldens_after"]
            print(f"goldens changed between run {ch['before']} and run {ch['after']}: {a.get('name') or 'goldens'} "
                  f"({a.get('hash')}) -> {b.get('name') or 'goldens'} ({b.get('hash')}); windows on either side "
                  "judged different questions")
        if args.fail_on_drop:
            _print_drops(drops, info)
    if args.html:
        print(f"trend page: {args.html}", file=sys.stderr if args.json else sys.stdout)
    if args.fail_on_drop:
        if not trend.windows:
            print("nothing to check: no results in this range", file=sys.stderr)
            return _shared.EXIT_OK
        dropped = [d for d in drops if d.status == "drop"]
        if dropped:
            if not args.json:
                print("FAILED: significant drop on " + ", ".join(d.metric for d in dropped))
            return _shared.EXIT_GATE
    return _shared.EXIT_OK


def _table(headers: list[str], rows: list[list[str]], left: set[int]) -> None:
    """A plain-text table: the ``left`` columns (text) left-aligned, the others (figures) right-aligned."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=False))).rstrip())


def _print_trend(trend: Any, store: ResultsStore) -> None:
    from ..store import store_label

    filters = ", ".join(f"{k}={'|'.join(v)}" for k, v in trend.filters.items())
    print(f"{store_label(store.url)}: by {trend.by} (UTC, by when the case was {trend.at})" + (f", {filters}" if filters else ""))
    if not trend.windows:
        print("no results in this range")
        return
    rows = []
    for w in trend.windows:
        for name, mw in w.metrics.items():
            judges = ", ".join(mw.judges) or "-"
            if mw.enough:
                rows.append([w.label, name, str(mw.n), _ci(mw.mean), _ci(mw.pass_rate), str(mw.errors), judges])
            else:
                rows.append([w.label, name, str(mw.n), f"too few cases (< {trend.min_cases})", "-", str(mw.errors),
                             judges])
    _table(["window", "metric", "judged", "mean [95% CI]", "pass rate [95% CI]", "errors", "judge"], rows,
           left={0, 1, 6})
    for label, name, before, after in trend.judge_changes:
        print(f"judge changed in {label} on {name}: {', '.join(before)} -> {', '.join(after)} (scores on either side "
              "are not comparable as they stand)")


def _print_drops(drops: list[Any], info: dict[str, Any] | None) -> None:
    if not info:
        return
    print(f"\ndrop check: the latest window ({info['latest']['label']}) against {info['baseline']['words']}; "
          f"{info['metrics_tested']} metric(s) tested, each at a {100 * info['adjusted_level']:.1f}% interval "
          f"(Bonferroni for {info['metrics_tested']} metrics, so the chance of any false alarm stays at "
          f"{100 * (1 - info['level']):.0f}%)")
    for d in drops:
        if d.status == "drop":
            print(f"DROP {d.metric}: {d.baseline_mean:.3f} -> {d.latest_mean:.3f}, difference {_ci(d.difference, '+.3f')} "
                  f"({d.method}; {d.spread}; {d.n_baseline} baseline and {d.n_latest} latest cases)")
            for w in d.worst:
                text = " ".join(str(w.get("input") or "").split())
                text = text if len(text) <= 70 else text[:69] + "\u2026"
                print(f"    {w['score']:.3f}  {text}" + (f"  (retriever {w['retriever']})" if w.get("retriever")
                                                          else ""))
        elif d.status == "no drop":
            print(f"no drop {d.metric}: difference {_ci(d.difference, '+.3f')} ({d.method}; {d.spread}; {d.n_baseline} "
                  f"baseline and {d.n_latest} latest cases)")
        elif d.status == "judge changed":
            print(f"JUDGE CHANGED {d.metric}: {', '.join(d.judges_before)} -> {', '.join(d.judges_after)}: not tested "
                  "(a changed judge, prompt or calibration moves scores by itself; this is not a drop of the "
                  "retriever). Compare windows scored by one judge, or rescore the baseline with the new judge.")
        else:
            print(f"not tested {d.metric}: {d.n_baseline} baseline and {d.n_latest} latest judged cases (fewer "
                  "than --min-cases)")

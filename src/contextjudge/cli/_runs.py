"""The commands that read a store: ``report`` (the HTML report of a run), ``compare`` (paired differences between
two runs), ``export`` (a run's results as JSONL or CSV) and ``runs`` (what the store holds)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .._text import shown
from ..errors import UsageError
from ._shared import (
    EXIT_GATE,
    EXIT_OK,
    _common,
    _existing_store,
    _f,
    _info,
    _print_table,
    _resolve,
    _short,
    _store_arg,
    _write,
)

if TYPE_CHECKING:
    from ..store import RunReads

__all__ = ["add_store_commands", "cmd_compare", "cmd_export", "cmd_report", "cmd_runs", "different_goldens_note",
           "regression_of", "regression_verdict", "same_goldens_or_refuse"]


def add_store_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``report``, ``compare``, ``export`` and ``runs``."""
    p = sub.add_parser("report", help="write the HTML report of a run (optionally compared with another)",
                       description="Write one self-contained HTML file: per metric the score distribution, the mean "
                                   "and the pass rate, each with a 95% interval; per case the ranked nodes "
                                   "coloured by verdict with the judge's reasons. With --compare, the paired "
                                   "difference per metric and the cases that changed most.")
    p.add_argument("run", nargs="?", help="run id, name or unique id prefix (default: the latest run)")
    _store_arg(p)
    p.add_argument("--compare", metavar="OTHER_RUN", help="baseline run to compare with")
    p.add_argument("--allow-different-goldens", action="store_true",
                   help="with --compare: compare runs made on different golden sets (refused by default: a "
                        "difference could come from the changed questions, not from the app)")
    p.add_argument("-o", "--output", default="report.html", help="output file (default: report.html)")
    p.add_argument("--title", help="page title")
    p.add_argument("--max-cases", type=int, default=1000, metavar="N",
                   help="past N cases, list in full those with errors, the lowest-scoring and most uncertain per "
                        "metric (and the most changed) and an even sample of the rest, with a note; every figure "
                        "still counts every case (default 1000; 0: list every case)")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="paired differences between two runs, with confidence intervals",
                       description="Print, per metric, the paired difference between RUN and BASELINE (RUN minus "
                                   "BASELINE, over the cases both runs scored, paired by test case id, else input) "
                                   "with its 95% paired-t interval, the per-golden wins and losses with an exact "
                                   "sign test, the goldens that lost their answer document, and the cases that "
                                   "changed most. With --fail-on-regression, exits 1 when a golden retrieved none of "
                                   "the expected documents its baseline retrieved (exact), or when the sign test "
                                   "says a gated metric dropped (one-sided, 5% across the gated metrics); with "
                                   "--max-drop D, also when a metric's mean difference is below -D. A metric with no "
                                   "shared cases never fails.")
    p.add_argument("baseline", help="baseline run id or name")
    p.add_argument("run", nargs="?", help="run to compare (default: the latest run)")
    _store_arg(p)
    p.add_argument("-o", "--output", metavar="FILE", help="also write the HTML compare report")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a golden lost every expected document its baseline retrieved, or a gated "
                        "metric dropped by the exact sign test on per-golden wins and losses")
    p.add_argument("--max-drop", type=_drop_arg, metavar="D",
                   help="exit 1 when a metric's mean paired difference is below -D (a plain threshold on the drop, "
                        "e.g. 0.1; it gates however few cases there are, where significance cannot)")
    p.add_argument("--allow-different-goldens", action="store_true",
                   help="compare runs made on different golden sets (refused by default: a difference could come "
                        "from the changed questions, not from the app)")
    _common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("export", help="a run's results as JSONL or CSV, for your own analysis",
                       description="JSONL: one line per test case with all its metric results and verdicts. CSV: one "
                                   "row per (case, metric).")
    p.add_argument("run", nargs="?", help="run id or name (default: the latest run)")
    _store_arg(p)
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="output format (default jsonl)")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    _common(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("runs", help="list the runs in a store (name, status, judge)",
                       description="List the runs in a store, newest first, with the judge that scored each.")
    _store_arg(p)
    _common(p)
    p.set_defaults(func=cmd_runs)


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import render_report  # noqa: PLC0415

    store = _existing_store(args.store)
    run_id = _resolve(store, args.run)
    other = _resolve(store, args.compare) if args.compare else None
    if other is not None:
        before, after = store.run_info(other).goldens, store.run_info(run_id).goldens
        if same_goldens_or_refuse(before, after, args.allow_different_goldens):
            assert before is not None and after is not None
            print(different_goldens_note(before, after))
    _info(f"rendering run {run_id}" + (f" against {other}" if other else "") + " ...", args.quiet)
    _write(args.output, render_report(store=store, run=run_id, compare=other, title=args.title,
                                            max_cases=args.max_cases))
    print(f"report: {args.output}")
    return EXIT_OK


def same_goldens_or_refuse(baseline: dict[str, Any] | None, current: dict[str, Any] | None, allow: bool,
                           override: str = "--allow-different-goldens", error: type[Exception] = UsageError) -> bool:
    """``report.refuse_different_goldens`` with the CLI's flag and error."""
    from ..report import refuse_different_goldens  # noqa: PLC0415

    return refuse_different_goldens(baseline, current, allow=allow, override=override, error=error)


def different_goldens_note(baseline: dict[str, Any], current: dict[str, Any]) -> str:
    """The line said when runs on different golden sets are compared anyway (the HTML compare page says it too)."""
    from ..report import different_goldens_note as note  # noqa: PLC0415

    return note(baseline, current)


def cmd_compare(args: argparse.Namespace) -> int:
    """Paired differences per metric over the cases both runs scored, and what regressed, named per golden
    (``report.find_regression``); with --fail-on-regression, exit 1 when a golden lost its answer document or a
    gated metric dropped by the exact sign test. A metric without shared cases is said so and never fails."""
    from ..report import compare_runs  # noqa: PLC0415

    store = _existing_store(args.store)
    base = _resolve(store, args.baseline)
    cur = _resolve(store, args.run)
    goldens = [store.run_info(cur).goldens, store.run_info(base).goldens]
    different = same_goldens_or_refuse(goldens[1], goldens[0], getattr(args, "allow_different_goldens", False))
    # the comparison reads scores only: a run's verdicts (most of what it holds) are left in the store
    current, baseline = store.load_run(cur, verdicts=False), store.load_run(base, verdicts=False)
    changes = compare_runs(current, baseline)
    reg = regression_of(store, cur, current, baseline)
    signs = {t.metric: t for t in reg.tests}
    rows, unpaired, dropped = [], [], []
    for c in changes:
        if args.max_drop is not None and c.difference.estimate is not None and c.difference.estimate < -args.max_drop:
            dropped.append(c)
        iv = c.difference
        ci = "n/a" if iv.low is None else f"[{iv.low:+.3f}, {iv.high:+.3f}]"
        diff = "n/a" if iv.estimate is None else f"{iv.estimate:+.3f}"
        t = signs.get(c.metric)
        reading = c.reading
        if reg.k_changed and reading in ("better", "worse"):
            reading = f"{'higher' if reading == 'better' else 'lower'} ({reg.k_words()})"
        rows.append([c.metric, _f(c.baseline_mean), _f(c.current_mean), diff, ci, str(iv.n),
                     "-" if t is None else f"{t.wins}/{t.losses}", "-" if t is None else f"{t.p_value:.3f}",
                     "" if t is None or t.gated else "not gated", reading])
        if iv.n == 0:
            unpaired.append(c)
    print(f"{_run_label(store, cur)} compared with {_run_label(store, base)} (paired by test case id, else input; "
          "difference = this run - baseline, 95% paired-t intervals; wins/losses per golden, with the exact "
          "one-sided sign test's p for a drop)")
    _print_table(["metric", "baseline", "this run", "difference", "95% CI", "pairs", "wins/losses", "sign p",
                  "gate", "reading"], rows)
    for line in reg.lines():
        print(line)
    if different:  # both runs recorded their goldens
        print(different_goldens_note(goldens[1] or {}, goldens[0] or {}))
    for c in unpaired:
        where = ("only the baseline scored it" if c.current_mean is None else
                 "only this run scored it" if c.baseline_mean is None else "no case has a score in both runs")
        print(f"{c.metric}: no shared cases ({where}); not compared, and never a regression")
    for c in changes:
        if not c.top_cases:
            continue
        print(f"\nCases that changed most on {c.metric} (top {len(c.top_cases)} by |difference|):")
        _print_table(["case", "baseline", "this run", "change"],
                     [[_short(f"#{cc.index + 1} {cc.text}", 70), _f(cc.baseline), _f(cc.current),
                       f"{cc.difference:+.3f}"] for cc in c.top_cases])
    if args.output:
        from ..report import render_report  # noqa: PLC0415

        _write(args.output, render_report(store=store, run=cur, compare=base))
        print(f"report: {args.output}")
    few = [c for c in changes if c.reading == "too few cases to tell"]
    if few:
        n = max(c.difference.n for c in few)
        print(f"\nToo few cases to tell on {', '.join(c.metric for c in few)}: with {n} paired case(s) the 95% "
              "interval cannot settle the difference. "
              + ("Add goldens, or gate on the drop itself: --max-drop 0.1." if args.max_drop is None else
                 f"--max-drop {args.max_drop:g} gates on the drop itself."))
    failed = False
    if args.fail_on_regression and reg.failed:
        print("FAILED: " + regression_verdict(reg))
        failed = True
    if dropped:
        print("FAILED: dropped more than " + f"{args.max_drop:g} on "
              + ", ".join(f"{c.metric} ({c.difference.estimate:+.3f})" for c in dropped) + " (--max-drop)")
        failed = True
    return EXIT_GATE if failed else EXIT_OK


def regression_of(store: RunReads, run_id: str, current: Any, baseline: Any) -> Any:
    """``report.stored_regression``: the sign tests gate only the metrics the current run gates on."""
    from ..report import stored_regression  # noqa: PLC0415

    return stored_regression(store, run_id, current, baseline)


def regression_verdict(reg: Any) -> str:
    """Why ``--fail-on-regression`` fails, in one line (``Regression.verdict``)."""
    return str(reg.verdict())


def _drop_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a drop between 0 and 1 (scores run from 0 to 1): "
                                         "write it like --max-drop 0.1")
    return value


def _run_label(store: RunReads, run_id: str) -> str:
    """A run as people know it: its name, with its id and when it began ("nightly (run 20261124-2017-ab12,
    2026-11-24 20:17 UTC)"), so two runs of one app are told apart."""
    try:
        info = store.run_info(run_id)
        name, created = info.name, info.created_at
    except Exception:  # noqa: BLE001 - the label is a nicety; the id is enough
        name, created = None, None
    when = f", {time.strftime('%Y-%m-%d %H:%M', time.gmtime(created))} UTC" if created else ""
    return shown(f"{name} (run {run_id}{when})" if name and name != run_id else f"run {run_id}{when}")


def cmd_export(args: argparse.Namespace) -> int:
    store = _existing_store(args.store)
    run_id = _resolve(store, args.run)
    out: Any = sys.stdout
    if args.output:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
            out = open(args.output, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise UsageError(f"cannot write {args.output!r}: {exc.strerror or exc}. Pass a writable -o path.") \
                from exc
    try:
        if args.format == "jsonl":
            for tr in store.iter_test_results(run_id):  # a batch of cases at a time: memory stays flat
                row = tr.to_dict()
                row["run_id"] = run_id
                out.write(json.dumps(row, default=str) + "\n")
        else:
            fields = ["run_id", "case_key", "case_index", "case_name", "input", "metric", "score", "threshold",
                      "success", "reason", "error", "evaluation_model", "judge_calls", "input_tokens",
                      "output_tokens"]
            w = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            for rec in store.iter_records(run_id):
                w.writerow(rec)
        out.flush()
    except BrokenPipeError:
        raise  # the reader stopped (| head): main() ends quietly
    except OSError as exc:
        raise UsageError(f"cannot write the export: {exc}") from exc
    finally:
        if out is not sys.stdout:
            out.close()
    if args.output:
        print(f"exported run {run_id} to {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    store = _existing_store(args.store)
    runs = store.list_runs()
    if not runs:
        print("no runs yet")
        return EXIT_OK
    rows = []
    # a run a worker judges names no judge of its own: its results do
    by_results = store.result_judges([r.run_id for r in runs if not _run_judges(r)])
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.created_at))
        judges = ", ".join(_run_judges(r) or by_results.get(r.run_id, [])) or "-"
        rows.append([r.run_id, r.name or "-", when, r.status, str(r.cases), str(r.results), judges])
    _print_table(["run", "name", "created (UTC)", "status", "cases", "results", "judge"], rows)
    return EXIT_OK


def _run_judges(info: Any) -> list[str]:
    """The judges that scored a run: those its results name (kept in its summary when it ends: a deferred run is
    scored after it began, by whatever judge `contextjudge score` was given), else those it began with."""
    scored = (info.summary or {}).get("judges") if isinstance(info.summary, dict) else None
    if scored:
        return [str(j) for j in scored]
    return [str(j.get("name", "?")) for j in info.judges or [] if isinstance(j, dict)]

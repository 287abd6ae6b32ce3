"""The trust commands of the CLI: ``contextjudge calibrate`` and ``contextjudge label`` (issue 16).

Registered by ``_shared.build_parser``; shares its exit codes and helpers.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from . import _shared

if TYPE_CHECKING:
    from ..store import ResultsStore

__all__ = ["add_trust_commands"]


def add_trust_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` and ``label`` to the CLI's sub-commands (filled in by the calibration work)."""
    _add_calibrate(sub)
    _add_label(sub)
    return None


# ------------------------------------------------------------------------------------------------ label
def _read_label_records(path: str, lines: list[int] | None = None) -> list[dict]:
    """The records of a labels JSONL file (blank lines skipped); a bad line is a UsageError naming it. ``lines``
    gets each record's line number."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415

    from .._json import loads as read_json  # noqa: PLC0415
    from ..errors import UsageError  # noqa: PLC0415

    if not os.path.exists(path):
        raise UsageError(f"labels file {path!r} does not exist: check the path.")
    records = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = read_json(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}, line {n}: not JSON ({exc.msg}). A labels file holds one JSON object "
                                     "per line: {\"key\" or \"input\": ..., \"labels\": [1, 0, ...]}.") from exc
                if not isinstance(rec, dict):
                    raise UsageError(f"{path}, line {n}: expected a JSON object, got {type(rec).__name__}.")
                records.append(rec)
                if lines is not None:
                    lines.append(n)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason}); save the labels file as UTF-8 JSONL.") from exc
    if not records:
        raise UsageError(f"labels file {path!r} holds no records: add one JSON object per line.")
    return records


def _export_labels(args: argparse.Namespace) -> int:
    """``label --export FILE``: the store's labels as the JSONL ``label`` reads (keyed: node labels by node identity,
    statement labels with their statements), one record per labelled case key; and the labels the schema-5 upgrade
    could not key, listed."""
    store = _shared._existing_store(args.store)
    records = store.export_labels()
    _shared._write(args.export, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    print(f"wrote {len(records)} labelled case(s) to {args.export}")
    left = store.unmatched_labels()
    if left:
        print(f"{len(left)} case(s) hold rank-order labels that name no node (kept, not used, not exported): "
              + ", ".join(repr(u["case_key"]) for u in left[:10]) + (" ..." if len(left) > 10 else ""))
    return _shared.EXIT_OK


def cmd_label(args: argparse.Namespace) -> int:
    """Attach gold labels to a store's captured cases; exit 0 when at least one record matched, 1 when none did."""
    from .._text import shorten  # noqa: PLC0415
    from ..errors import ConfigurationError, UsageError  # noqa: PLC0415
    from ..metrics import label_problems  # noqa: PLC0415 - counts against each matched case

    if args.serve:
        from ._label_serve import serve_labels  # noqa: PLC0415

        return serve_labels(args)
    if args.export:
        return _export_labels(args)
    if args.file is None:
        raise UsageError("contextjudge label needs a labels FILE to attach (or --export FILE to write the store's "
                         "labels out).")
    lines: list[int] = []
    records = _read_label_records(args.file, lines)
    store = _shared._existing_store(args.store, write=True)
    try:
        matched, unmatched = store.add_labels(records, check=label_problems, lines=lines,
                                              run=_shared._resolve(store, args.run) if args.run else None)
    except ConfigurationError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc
    cases = sorted({k for m in matched for k in m.case_keys})
    by_key = sum(m.by == "key" for m in matched)
    print(f"labelled {len(cases)} case(s) in {store.target} from {len(matched)} of {len(records)} record(s) "
          f"({by_key} matched by key, {len(matched) - by_key} by input)")
    if unmatched:
        print(f"{len(unmatched)} record(s) matched no captured case (no case has that key, nor that input):")
        for m in unmatched[:20]:
            said = ", ".join(part for part in (f"key {m.key!r}" if m.key is not None else "",
                                                f"input {shorten(str(m.input), 70)!r}" if m.input else "") if part)
            print(f"  record {m.record} (line {lines[m.record - 1]}): {said}")
        if len(unmatched) > 20:
            print(f"  ... and {len(unmatched) - 20} more")
    if not matched:
        print("FAILED: no record matched a case of this store; check --store, and that each record's key (or id) "
              "or input is that of a captured case (`contextjudge export` lists them).")
        return _shared.EXIT_GATE
    print(f"next: eval, score, worker and report on this store judge with the embedded judge calibrated on its "
          f"labels (model 'local', by itself); contextjudge calibrate --store {store.target} --model MODEL shows "
          "how far a judge agrees with them; `contextjudge report` shows the bias-corrected means")
    return _shared.EXIT_OK


def _add_label(sub: argparse._SubParsersAction) -> None:
    from ._shared import _common, _store_arg  # noqa: PLC0415

    p = sub.add_parser("label", help="attach gold labels (JSONL) to a store's captured cases",
                       description="Attach gold labels to the captured cases of a store, for `contextjudge "
                                   "calibrate --store` and for bias-corrected means in the summary and the report. "
                                   "FILE is JSONL: one object per line saying which case it labels (\"key\" or "
                                   "\"id\": the case's key in the store; else \"input\", matched ignoring case, "
                                   "punctuation and spacing; a record labels every case, in any run, with that key "
                                   "or input) and its labels: \"labels\" (per retrieved node, in rank order: useful "
                                   "for the expected output), \"relevance_labels\", \"utilization_labels\", "
                                   "\"statement_labels\" (and optionally \"statements\"); each label yes/no, "
                                   "true/false or 1/0; or node labels by text: \"nodes\": [{\"text\" or \"id\", "
                                   "\"useful\", \"relevant\", \"used\"}]. Labels are stored keyed by node identity "
                                   "(docs/labels.md): rank-order labels name the nodes of the record's own "
                                   "\"retrieval_context\", else of the case in --run. Labels replace a case's "
                                   "earlier labels. Prints what matched "
                                   "and lists the records that did not. Exit codes: 0 at least one record matched, "
                                   "1 none did, 2 an error (a missing file, a bad line or label: nothing is written).")
    p.add_argument("file", metavar="FILE", nargs="?", default=None, help="labels JSONL")
    p.add_argument("--export", metavar="FILE", default=None,
                   help="write the store's labels to FILE instead, as JSONL this command reads (keyed by node "
                        "identity: also how a rank-order labels file becomes one that names its nodes)")
    p.add_argument("--run", metavar="RUN", default=None,
                   help="the run whose retrieval the rank-order labels were written for (an id, name or prefix); "
                        "needed when runs retrieved different nodes for a labelled case")
    p.add_argument("--serve", action="store_true",
                   help="serve the labelling page instead: one case at a time (of --run, else the latest run), "
                        "each label saved the moment it is given, with the judge's agreement (--model) updating "
                        "as you label; prints the page's address with its access token (docs/labels.md)")
    p.add_argument("--host", default=None, help="with --serve: the address to listen on (default 127.0.0.1, this "
                                                 "machine only; another is warned about)")
    p.add_argument("--port", type=int, default=0, help="with --serve: the port (default: a free one)")
    p.add_argument("--seed", type=int, default=0, help="with --serve: the estimate queue's random draw (default 0)")
    p.add_argument("--model", default=None, help="with --serve: the judge whose agreement the page shows "
                                                 "(as for calibrate)")
    _store_arg(p)
    _common(p)
    p.set_defaults(func=cmd_label)


# ------------------------------------------------------------------------------------------------ calibrate
def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    from ..judges import DEFAULT_FILE  # noqa: PLC0415
    from ._shared import _common  # noqa: PLC0415

    p = sub.add_parser(
        "calibrate", help="how far your judge agrees with your own labels; fit its thresholds to them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the judge on test cases you labelled and report, per verdict family, its agreement with "
                    "your labels (accuracy, Cohen's kappa, true-positive and true-negative rates, each with a 95%% "
                    "bootstrap interval over cases) and the items where it disagrees; per metric, the mean judged "
                    "score against the mean gold score. For a judge that reports confidences (the embedded judge), "
                    "it also fits each family's decision threshold to your labels and saves it to a file a judge "
                    "loads with --model @FILE.",
        epilog="Labels file (JSONL, one test case a line):\n"
               '  {"id": "q1", "input": "...", "expected_output": "...", "actual_output": "...",\n'
               '   "retrieval_context": ["node 1", "node 2"], "labels": [1, 0], "relevance_labels": [1, 0],\n'
               '   "utilization_labels": [1, 0], "statement_labels": [1, 1]}\n'
               "labels: each node useful for the expected output (precision); relevance_labels: relevant to the "
               "input (relevancy);\nutilization_labels: useful for the actual output (utilization); "
               "statement_labels: each sentence of the expected\noutput supported by the nodes (recall; give "
               "'statements' to label your own split). A missing list is not calibrated.\n"
               "Exit codes: 0 ok, 2 an error (a bad labels file), 3 the judge failed on some cases.")
    p.add_argument("--labels", metavar="FILE", help="labelled test cases (JSONL)")
    p.add_argument("--store", metavar="PATH_OR_URL",
                   help="instead of --labels: the labelled cases of this results store (labels attached with "
                        "`contextjudge label --store URL FILE`)")
    p.add_argument("--run", help="with --store: only this run's cases (default: every labelled case)")
    p.add_argument("--builtin", action="store_true",
                   help="instead of your labels: the labelled set that ships with contextjudge (900 items, 300 per "
                        "verdict family, from held-back open training data), to learn how far a judge agrees with "
                        "labels before trusting it; the embedded judge's figures are printed beside (no threshold "
                        "file is written unless you pass --save)")
    p.add_argument("--model", help="the judge to calibrate: 'local', a model name, provider:model or @FILE "
                                   "(default: $CONTEXTJUDGE_MODEL, else as `contextjudge eval`)")
    p.add_argument("--json", action="store_true", help="print one JSON object (families as top-level keys)")
    save = p.add_mutually_exclusive_group()
    save.add_argument("--save", metavar="PATH", default="",
                      help=f"where fitted thresholds are written (default: {DEFAULT_FILE}; with --builtin: none)")
    save.add_argument("--no-save", dest="save", action="store_const", const=None, help="write no threshold file")
    p.add_argument("--report", metavar="HTML", help="also write an HTML page of the calibration")
    p.add_argument("--show", type=int, default=5, metavar="N",
                   help="disagreeing items shown per family in the table (default 5; --json lists all)")
    _common(p)
    p.set_defaults(func=cmd_calibrate)


def _ci(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _kappa(row: dict[str, Any]) -> str:
    """A family's kappa as printed: "n/a (only yes labels)" when its labels or verdicts are one class."""
    from ..stats import one_class  # noqa: PLC0415

    conf = row.get("confusion") or {}
    single = one_class(*(int(conf[k]) for k in ("tp", "fp", "fn", "tn"))) \
            if all(k in conf for k in ("tp", "fp", "fn", "tn")) else None
    return f"n/a ({single})" if single else _ci(row["kappa"], row["kappa_ci"])


def _print_calibration(report: dict, show: int) -> None:
    from .._text import shorten  # noqa: PLC0415
    from ..judges import FAMILIES  # noqa: PLC0415
    from ._shared import _f, _print_table  # noqa: PLC0415

    fams = [f for f in FAMILIES if f in report]
    print(f"judge {report['judge']} against your labels: {report['cases']} labelled cases "
          "(95% bootstrap intervals over cases)")
    rows = [[f, str(report[f]["cases"]), str(report[f]["items"]), _f(report[f]["base_rate"]),
             _ci(report[f]["accuracy"], report[f]["accuracy_ci"]), _kappa(report[f]),
             _ci(report[f]["tpr"], report[f]["tpr_ci"]), _ci(report[f]["tnr"], report[f]["tnr_ci"]),
             "{tp}/{fp}/{fn}/{tn}".format(**report[f]["confusion"])] for f in fams]
    _print_table(["family", "cases", "items", "base rate", "accuracy", "kappa", "TPR", "TNR", "tp/fp/fn/tn"], rows)
    jury = [f for f in fams if report[f].get("jurors")]
    if jury:
        print("\neach juror against your labels, on the same items (the jury's row above):")
        _print_table(["family", "juror", "accuracy", "kappa", "TPR", "TNR"],
                     [[f, name, _ci(j["accuracy"], j["accuracy_ci"]), _ci(j["kappa"], j["kappa_ci"]),
                       _ci(j["tpr"], j["tpr_ci"]), _ci(j["tnr"], j["tnr_ci"])]
                      for f in jury for name, j in report[f]["jurors"].items()])
    if report.get("unused_labels"):
        print(f"\n{len(report['unused_labels'])} node label(s) unused: their node is not among the labelled "
              "case's retrieved nodes (labels name nodes, never ranks):")
        for u in report["unused_labels"][:10]:
            print(f"  {u['case']}: {shorten(str(u.get('text') or u['node']), 90)!r}")  # the node as a person reads it
    if report.get("metrics"):
        print()
        _print_table(["metric", "cases", "judged mean", "gold mean", "MAE", "Spearman"],
                     [[m["metric"], str(m["cases"]), _f(m["judged_mean"]), _f(m["gold_mean"]), _f(m["mae"]),
                       _f(m["spearman"])] for m in report["metrics"].values()])
    print()
    for f in fams:
        fit = report[f]["threshold"]
        if "lambda" in fit:  # the embedded judge: its own weights refitted
            if fit.get("fitted"):
                how = (f"weights fitted (shrinkage {fit['lambda']:g})" if fit.get("lambda") is not None else
                       "the shipped weights kept") + (", a memory of the labels kept" if fit.get("memory_kept")
                                                      else "")
                print(f"{f}: {how}, on {fit['items']} labelled items of {fit['cases']} cases; kappa "
                      f"{_f(fit['kappa_before'])} -> {_ci(fit['kappa_cv'], fit.get('kappa_cv_ci'))} cross-validated "
                      f"({fit['folds']} folds over cases); {_f(fit['kappa_after'])} on these labels with the weights "
                      "(flattered: fitted on them)")
            else:
                print(f"{f}: the judge keeps its own weights: {fit['why']}")
        elif fit.get("fitted"):
            cv = "n/a" if fit.get("kappa_after_cv") is None else f"{fit['kappa_after_cv']:.3f}"
            print(f"{f}: threshold {fit['threshold']:.4f} fitted; kappa {_f(fit['kappa_before'])} -> "
                  f"{_f(fit['kappa_after'])} on these labels (flattered: fitted on them), {cv} cross-validated "
                  f"({fit['folds']}-fold over cases)")
        else:
            print(f"{f}: no threshold fitted: {fit['why']}")
    for f in fams:
        dis = report[f]["disagreements"]
        if not dis or show <= 0:
            continue
        print(f"\n{f}: {len(dis)} items where the judge and your labels disagree"
              + (f" (first {show}; --json lists all)" if len(dis) > show else ""))
        for d in dis[:show]:
            conf = "" if d["confidence"] is None else f", confidence {d['confidence']:.2f}"
            print(f"  {d['case']} {d['item']}: label {'yes' if d['label'] else 'no'}, judge "
                  f"{'yes' if d['verdict'] else 'no'}{conf}: {shorten(d['text'], 90)!r}")
    if report.get("note"):
        print(f"\n{report['note']}")
    for e in report.get("errors", []):
        print(f"error: {e['case']} ({e['family']}): {e['error']}")
    if report.get("advice"):
        from ..engine import MIN_EACH, MIN_ITEMS  # noqa: PLC0415

        print("\nadvice:")
        for a in report["advice"]:
            print(f"  {a['metric']}: {a['advice']} ({a['why']})")
            if a["too_few"]:
                print(f"    warning: only {a['items']} labelled items ({a['yes']} yes, {a['items'] - a['yes']} no): "
                      f"fewer than a stable threshold needs ({MIN_ITEMS} items, {MIN_EACH} of each label); label "
                      "more cases before relying on this advice")


def builtin_check_path() -> str:
    """The labelled set that ships with the package (training/judge_check.py builds it)."""
    from ..engine import builtin_check_path as path  # noqa: PLC0415

    return path()


def _embedded_beside(cases: list, judge: Any, quiet: bool) -> dict | None:
    """The embedded judge's agreement on the same cases (``engine.embedded_beside``; None when it is the judge being
    checked, or cannot be built: said on stderr)."""
    from ..engine import embedded_beside  # noqa: PLC0415
    from ..errors import JudgeUnavailableError  # noqa: PLC0415

    try:
        return embedded_beside(cases, judge)
    except JudgeUnavailableError as exc:
        _shared._info(f"the embedded judge's figures are not shown beside: {exc}", quiet)
        return None


def _print_beside(report: dict) -> None:
    from ..judges import FAMILIES  # noqa: PLC0415
    from ._shared import _print_table  # noqa: PLC0415

    other = report.get("embedded_judge")
    fams = [f for f in FAMILIES if f in report]
    print()
    if other is None:
        print("This is the embedded judge: an LLM judge worth its cost should beat these figures, above all on "
              "sentence_relevance and statement_support (docs/judges.md).")
        return
    _print_table(["family", "kappa (this judge)", "kappa (embedded judge)", "TPR this / embedded",
                  "TNR this / embedded"],
                 [[f, _ci(report[f]["kappa"], report[f]["kappa_ci"]), _ci(other[f]["kappa"], other[f]["kappa_ci"]),
                   f"{_ci(report[f]['tpr'], None)} / {_ci(other[f]['tpr'], None)}",
                   f"{_ci(report[f]['tnr'], None)} / {_ci(other[f]['tnr'], None)}"] for f in fams if f in other])
    worse = [f for f in fams if f in other and (report[f]["kappa"] or 0) < (other[f]["kappa"] or 0)]
    if worse:
        print(f"Your judge agrees with these labels less than the free embedded judge on: {', '.join(worse)}.")


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the judge over labelled cases, print agreement, save fitted thresholds."""
    import json  # noqa: PLC0415

    from ..engine import acalibrate, calibration_of, kept_verdicts, read_labels_file  # noqa: PLC0415
    from ..errors import ConfigurationError, UsageError  # noqa: PLC0415
    from ..judges import DEFAULT_FILE  # noqa: PLC0415

    if sum(map(bool, (args.labels, args.store, args.builtin))) != 1:
        raise UsageError("calibrate needs the labelled cases: pass --labels FILE (JSONL), --store URL (a store "
                         "with labels attached by `contextjudge label`) or --builtin (the set that ships with "
                         "contextjudge), one of them.")
    if args.save == "":  # not given: the default file, but a check on the built-in set writes none
        args.save = None if args.builtin else DEFAULT_FILE
    store: ResultsStore | None = None
    try:
        if args.builtin:
            cases = read_labels_file(builtin_check_path())
        elif args.labels:
            cases = read_labels_file(args.labels)
        else:
            store = _shared._existing_store(args.store, write=True)
            cases = store.labelled_cases(run=_shared._resolve(store, args.run) if args.run else None)
            if not cases:
                raise UsageError("the store holds no labelled case: attach labels with `contextjudge label --store "
                                 "URL FILE`, or pass --labels FILE.")
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    judge = _shared._judge(args.model, args.quiet)
    spec = args.model if args.model and args.model.strip().lower() != "fake" else None
    _shared._info(f"calibrating on {len(cases)} labelled cases ...", args.quiet)
    from .._aio import run_sync  # noqa: PLC0415

    try:
        # a store's labelled cases: what the judge said of each is kept in the store (as the labelling page's and the
        # store calibration's are), so a second calibrate judges only the cases whose judged work changed
        report = run_sync(acalibrate(cases, judge, judge_spec=spec, verdicts=kept_verdicts(store)))
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    calibration = calibration_of(report)
    report["saved"] = None
    report["kept_in_store"] = False
    if store is not None and not args.run:  # every label of the store: its calibration, which later commands use
        from ..engine import keep_store_calibration  # noqa: PLC0415

        report["kept_in_store"] = keep_store_calibration(store, judge, cases, report)
    if calibration is not None and args.save:
        try:
            calibration.write(args.save)
        except OSError as exc:
            raise UsageError(f"cannot write {args.save!r}: {exc.strerror or exc}. Pass --save PATH or --no-save.") \
                from exc
        report["saved"] = args.save
    if args.report:
        from ..report import render_calibration  # noqa: PLC0415

        _shared._write(args.report, render_calibration(report))
    if args.builtin:
        report["embedded_judge"] = _embedded_beside(cases, judge, args.quiet)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_calibration(report, args.show)
        if args.builtin:
            _print_beside(report)
        if args.report:
            print(f"report: {args.report}")
    if report["saved"]:
        _shared._info(f"thresholds saved to {report['saved']}; judge with them: --model @{report['saved']} "
                  f"(CLI) or model=\"@{report['saved']}\" (Python)", False)
    elif calibration is not None:
        why = "a check on the built-in set writes none; --save PATH keeps them" if args.builtin else "--no-save"
        _shared._info(f"thresholds fitted but not saved ({why})", args.quiet)
    return _shared.EXIT_CASE_ERRORS if report["errors"] else _shared.EXIT_OK

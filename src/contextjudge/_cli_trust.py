"""The trust commands of the CLI: ``contextjudge calibrate`` and ``contextjudge label`` (issue 16).

Registered by ``cli.build_parser``; shares its exit codes and helpers.
"""

from __future__ import annotations

import argparse

__all__ = ["add_trust_commands"]


def add_trust_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` and ``label`` to the CLI's sub-commands (filled in by the calibration work)."""
    _add_label(sub)
    return None


# ------------------------------------------------------------------------------------------------ label
def _read_label_records(path: str) -> list[dict]:
    """The records of a labels JSONL file (blank lines skipped); a bad line is a UsageError naming it."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415

    from .errors import UsageError  # noqa: PLC0415

    if not os.path.exists(path):
        raise UsageError(f"labels file {path!r} does not exist: check the path.")
    records = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise UsageError(f"{path}, line {n}: not JSON ({exc.msg}). A labels file holds one JSON object "
                                     "per line: {\"key\" or \"input\": ..., \"labels\": [1, 0, ...]}.") from exc
                if not isinstance(rec, dict):
                    raise UsageError(f"{path}, line {n}: expected a JSON object, got {type(rec).__name__}.")
                records.append(rec)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason}); save the labels file as UTF-8 JSONL.") from exc
    if not records:
        raise UsageError(f"labels file {path!r} holds no records: add one JSON object per line.")
    return records


def cmd_label(args: argparse.Namespace) -> int:
    """Attach gold labels to a store's captured cases; exit 0 when at least one record matched, 1 when none did."""
    from . import cli  # noqa: PLC0415 - its helpers and exit codes
    from ._text import shorten  # noqa: PLC0415
    from .errors import ConfigurationError, UsageError  # noqa: PLC0415

    records = _read_label_records(args.file)
    store = cli._existing_store(args.store)
    try:
        matched, unmatched = store.add_labels(records)
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
            print(f"  record {m.record}: {said}")
        if len(unmatched) > 20:
            print(f"  ... and {len(unmatched) - 20} more")
    if not matched:
        print("FAILED: no record matched a case of this store; check --store, and that each record's key (or id) "
              "or input is that of a captured case (`contextjudge export` lists them).")
        return cli.EXIT_GATE
    print(f"next: contextjudge calibrate --store {store.target} --model MODEL (the judge against these labels); "
          "`contextjudge report` shows the bias-corrected means")
    return cli.EXIT_OK


def _add_label(sub: argparse._SubParsersAction) -> None:
    from .cli import _common, _store_arg  # noqa: PLC0415

    p = sub.add_parser("label", help="attach gold labels (JSONL) to a store's captured cases",
                       description="Attach gold labels to the captured cases of a store, for `contextjudge "
                                   "calibrate --store` and for bias-corrected means in the summary and the report. "
                                   "FILE is JSONL: one object per line saying which case it labels (\"key\" or "
                                   "\"id\": the case's key in the store; else \"input\", matched ignoring case, "
                                   "punctuation and spacing; a record labels every case, in any run, with that key "
                                   "or input) and its labels: \"labels\" (per retrieved node, in rank order: useful "
                                   "for the expected output), \"relevance_labels\", \"utilization_labels\", "
                                   "\"statement_labels\" (and optionally \"statements\"); each label yes/no, "
                                   "true/false or 1/0. Labels replace a case's earlier labels. Prints what matched "
                                   "and lists the records that did not. Exit codes: 0 at least one record matched, "
                                   "1 none did, 2 an error (a missing file, a bad line or label: nothing is written).")
    p.add_argument("file", metavar="FILE", help="labels JSONL")
    _store_arg(p)
    _common(p)
    p.set_defaults(func=cmd_label)

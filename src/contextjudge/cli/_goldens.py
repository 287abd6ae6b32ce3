"""``contextjudge goldens``: a first test set. ``generate`` writes checked questions from your documents (or from the
nodes a stored run retrieved), ``from-store`` turns captured traffic into goldens, ``hash`` names a goldens file and
writes its content hash on its first line. The work is the engine's (``generate_goldens``, ``goldens_from_store``)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import uuid
from typing import Any

from ..errors import UsageError
from ._shared import EXIT_ERROR, EXIT_OK, _common, _existing_store, _info, _judge, _store_judge

__all__ = ["add_goldens_command"]


def add_goldens_command(sub: argparse._SubParsersAction) -> None:
    """Register ``goldens generate``, ``goldens from-store`` and ``goldens hash``."""
    p = sub.add_parser("goldens", help="make a first test set: from your documents, or from captured traffic",
                       description="Make goldens (questions with expected answers and expected chunk ids) for "
                                   "`contextjudge eval --goldens`. See docs/goldens.md.")
    gsub = p.add_subparsers(dest="goldens_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), EXIT_ERROR)[1])

    g = gsub.add_parser("generate", help="questions a user would ask, written by a chat model from your documents, "
                                         "each checked by the judge before it is kept",
                        description="Chunk the documents (a folder, files, or the nodes a stored run retrieved), ask "
                                    "MODEL for questions each chunk answers (styles: short, conversational, "
                                    "multi_part, two_chunks; unanswerable on request), drop near-duplicates, check each golden "
                                    "with the judge (its answer supported by its chunk, its chunk useful for it; "
                                    "an unanswerable one the other way) and write JSONL with a name and content hash. "
                                    "--dry-run prints the calls and tokens it would take, calling nothing.")
    g.add_argument("--docs", nargs="+", metavar="PATH", default=[], help="document files or folders")
    g.add_argument("--from-store", metavar="STORE", help="write questions from the nodes a stored run retrieved")
    g.add_argument("--run", metavar="RUN", help="with --from-store: the run (default: the latest)")
    g.add_argument("--model", required=True, help="the chat model that writes questions (an OpenAI model name, or "
                                                  "openai:NAME; OPENAI_BASE_URL for a compatible server)")
    g.add_argument("--judge", help="the judge that checks each golden: the judge in use, as `eval --model` names it "
                                   "(default: $CONTEXTJUDGE_MODEL, else local, the embedded judge, free and offline; "
                                   "the embedded judge is calibrated on the store's labels where it has any, as in "
                                   "`eval`)")
    g.add_argument("--store", metavar="PATH_OR_URL",
                   help="the store whose labels calibrate the embedded judge (default: the --from-store store, else "
                        "$CONTEXTJUDGE_STORE or .contextjudge/results.db where it exists)")
    g.add_argument("--no-check", action="store_true", help="keep every readable golden without checking it")
    g.add_argument("--per-chunk", type=int, default=3, metavar="N", help="questions asked per chunk (default 3)")
    g.add_argument("--styles", default=",".join(_styles()),
                   help=f"question styles, comma-separated (default: {','.join(_styles())}; add unanswerable for "
                        "questions the documents cannot answer, best kept in a file of their own)")
    g.add_argument("--chunk-size", type=int, default=1000, metavar="CHARS",
                   help="characters per chunk for files (default 1000); the app's own chunks are kept as they are")
    g.add_argument("--splitter", metavar="MODULE:NAME",
                   help="cut files the way your app does: its LangChain text splitter or LlamaIndex node parser "
                        "(e.g. myapp.ingest:splitter; a function returning one is called)")
    g.add_argument("--max-chunks", type=int, metavar="N", help="write from at most N chunks (a seeded sample)")
    g.add_argument("--seed", type=int, default=0, help="seed of the styles' deal and of the sample (default 0)")
    g.add_argument("--budget-calls", type=int, metavar="N", help="stop after N model calls (writing and checking)")
    g.add_argument("--budget-tokens", type=int, metavar="N", help="stop after N tokens")
    g.add_argument("--budget-dollars", type=float, metavar="X", help="stop after X dollars (a priced model)")
    g.add_argument("--dry-run", action="store_true", help="print the estimate only; no model is called")
    g.add_argument("--name", help="the goldens' name (default: the output file's stem)")
    g.add_argument("-o", "--output", default="goldens.jsonl", help="output file (default goldens.jsonl)")
    g.add_argument("--json", action="store_true", help="print the summary (or estimate) as JSON")
    _common(g)
    g.set_defaults(func=cmd_generate)

    t = gsub.add_parser("from-store", help="goldens from captured traffic: questions, the nodes a person (else the "
                                           "judge) found useful, answers a person accepted",
                        description="One golden per distinct question in the store: expected_context_ids from the "
                                    "nodes labelled useful (else, without --labelled, those the judge called useful, "
                                    "marked expected_context_by: judge), expected_output from the case's golden or "
                                    "an answer a person accepted; sampled evenly across retrievers and days.")
    t.add_argument("--store", metavar="PATH_OR_URL", help="the store (default: $CONTEXTJUDGE_STORE, else "
                                                          ".contextjudge/results.db)")
    t.add_argument("--run", metavar="RUN", help="only this run (default: every run)")
    t.add_argument("--labelled", action="store_true", help="only what people labelled (no judge-made expected ids)")
    t.add_argument("--limit", type=int, metavar="N", help="at most N goldens, sampled across retrievers and days")
    t.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    t.add_argument("--redact", metavar="MODULE:FUNCTION",
                   help="your personal-data hook: called with each golden (a dict), returns it (changed) or None "
                        "to leave it out")
    t.add_argument("--name", help="the goldens' name (default: the output file's stem)")
    t.add_argument("-o", "--output", default="goldens.jsonl", help="output file (default goldens.jsonl)")
    _common(t)
    t.set_defaults(func=cmd_from_store)

    h = gsub.add_parser("hash", help="print a goldens file's name and content hash, and write them on its first "
                                     "line", description="The hash is the one a run records for its goldens.")
    h.add_argument("path")
    h.add_argument("--name", help="name the set (default: the header's name, else the file's stem)")
    _common(h)
    h.set_defaults(func=cmd_hash)


def _styles() -> tuple[str, ...]:
    from ..engine import DEFAULT_STYLES  # noqa: PLC0415

    return tuple(DEFAULT_STYLES)


def _budget(args: argparse.Namespace) -> Any:
    if args.budget_calls is None and args.budget_tokens is None and args.budget_dollars is None:
        return None
    from ..judges import Budget  # noqa: PLC0415

    return Budget(calls_per_day=args.budget_calls, tokens_per_day=args.budget_tokens,
                  dollars_per_day=args.budget_dollars, name=f"goldens-{uuid.uuid4().hex[:8]}")


def cmd_generate(args: argparse.Namespace) -> int:
    from ..engine import StoredNodes, generate_goldens  # noqa: PLC0415

    sources: list[Any] = list(args.docs)
    if args.from_store:
        sources.append(StoredNodes(_existing_store(args.from_store), run=args.run))
    elif args.run:
        raise UsageError("--run goes with --from-store STORE: which stored run's nodes to write questions from.")
    if not sources:
        raise UsageError("nothing to write questions from: pass --docs PATH... or --from-store STORE.")
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    judge: Any = args.judge or os.environ.get("CONTEXTJUDGE_MODEL") or "local"
    if not args.no_check:
        # the judge in use: the one `eval` would pick, calibrated on the store's labels as `eval` does
        store = sources[-1].store if args.from_store and not args.store else _store_if_any(args.store)
        judge = _store_judge(store, _judge(judge, args.quiet), args.quiet)
    result = generate_goldens(sources, model=args.model, per_chunk=args.per_chunk, styles=styles, judge=judge,
                              check=not args.no_check, budget=_budget(args), seed=args.seed,
                              chunk_size=args.chunk_size, max_chunks=args.max_chunks, dry_run=args.dry_run,
                              splitter=_splitter(args.splitter) if args.splitter else None)
    if args.dry_run:
        assert result.estimate is not None  # a dry run returns its estimate
        print(json.dumps(result.estimate.to_dict(), indent=2) if args.json else str(result.estimate))
        return EXIT_OK
    header = result.write(args.output, name=args.name)
    if args.json:
        print(json.dumps({"output": args.output, "name": header["name"], "hash": header["hash"],
                          "goldens": len(result.goldens), "dropped": result.dropped, "usage": result.usage,
                          "stopped": result.stopped}, indent=2, default=str))
    else:
        print(result.summary())
        print(f"wrote {args.output}: goldens {header['name']!r}, content hash {header['hash']}")
    return EXIT_OK


def _store_if_any(target: str | None) -> Any:
    """``--store`` (which must exist), else the default store where it exists, else None."""
    from ..store import DEFAULT_STORE_PATH  # noqa: PLC0415

    if target:
        return _existing_store(target)
    default = os.environ.get("CONTEXTJUDGE_STORE") or DEFAULT_STORE_PATH
    return _existing_store(default) if "://" in default or os.path.exists(default) else None


def _hook(spec: str, flag: str = "--redact", example: str = "myapp.privacy:scrub") -> Any:
    mod, _, attr = spec.partition(":")
    if not mod or not attr:
        raise UsageError(f"{flag} {spec!r}: write it as module:name (e.g. {example}).")
    sys.path.insert(0, ".")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"{flag} {spec!r}: cannot load it ({type(exc).__name__}: {exc}).") from exc
    finally:
        sys.path.remove(".")
    if flag == "--redact" and not callable(fn):
        raise UsageError(f"{flag} {spec!r} is not a function.")
    return fn


def _splitter(spec: str) -> Any:
    """The app's splitter named by ``--splitter``: the object, or what a function of no arguments returns."""
    obj = _hook(spec, "--splitter", "myapp.ingest:splitter")
    if not (hasattr(obj, "split_text") or hasattr(obj, "get_nodes_from_documents")) and callable(obj):
        try:
            made = obj()
        except TypeError:
            return obj  # a function of a text: used as it is
        if hasattr(made, "split_text") or hasattr(made, "get_nodes_from_documents"):
            return made
        raise UsageError(f"--splitter {spec!r}: it returned a {type(made).__name__}, not a text splitter or node "
                         "parser.")
    return obj


def cmd_from_store(args: argparse.Namespace) -> int:
    from ..engine import goldens_from_store, write_goldens  # noqa: PLC0415

    store = _existing_store(args.store)
    rows, report = goldens_from_store(store, run=args.run, labelled=args.labelled, limit=args.limit,
                                      seed=args.seed, redact=_hook(args.redact) if args.redact else None)
    if not rows:
        left = ", ".join(f"{n} {why}" for why, n in sorted(report["left_out"].items())) or "none read"
        raise UsageError(f"no goldens from {report['cases_read']} case(s) ({left}). Label some nodes "
                         "(`contextjudge label`) or score the run with contextual precision first.")
    header = write_goldens(args.output, rows, name=args.name,
                           made_by={"from": "traffic", "labelled_only": args.labelled})
    judged = sum(1 for r in rows if r.get("expected_context_by") == "judge")
    _info(f"{report['cases_read']} case(s) read, {len(rows)} golden(s) kept"
          + (f" ({judged} with judge-made expected ids: check them before you trust them)" if judged else "")
          + "".join(f"; {n} {why}" for why, n in sorted(report["left_out"].items())), args.quiet)
    print(f"wrote {args.output}: goldens {header['name']!r}, content hash {header['hash']}")
    return EXIT_OK


def cmd_hash(args: argparse.Namespace) -> int:
    from pathlib import Path  # noqa: PLC0415

    from ..cases.goldens import load_goldens  # noqa: PLC0415
    from ..engine import write_goldens  # noqa: PLC0415

    path = Path(args.path)
    if path.suffix.lower() != ".jsonl":
        raise UsageError(f"{path}: `goldens hash` writes a header line into a JSONL goldens file.")
    goldens = load_goldens(path)
    name = args.name or goldens.name if goldens.declared_hash is not None or args.name else path.stem
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and "contextjudge_goldens" not in json.loads(line)]
    header = write_goldens(path, rows, name=name)
    print(f"{path}: goldens {header['name']!r}, {header['goldens']} golden(s), content hash {header['hash']}")
    return EXIT_OK

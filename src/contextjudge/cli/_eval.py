"""``contextjudge eval``: run the goldens through the user's own app with capture attached, score, store, report
and gate. The app is loaded from ``module:object`` and run by the app adapter an integration registers under the
entry-point group ``contextjudge.apps``; which golden a captured case belongs to is ``cases.identity``'s to say.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from ..errors import ContextJudgeError, UsageError
from ._shared import (
    _REPEATS_HELP,
    EXIT_GATE,
    _bar,
    _build_metrics,
    _common,
    _entry_points,
    _info,
    _judge,
    _metric_gates,
    _metric_keys,
    _not_gated,
    _print_summary,
    _progress,
    _repeats_arg,
    _short,
    _store,
    _store_arg,
    _store_judge,
    _thresholds,
    _verdict,
    _write,
)

if TYPE_CHECKING:
    from ..store import RunReads

__all__ = ["add_eval_command", "cmd_eval", "load_object"]


# the integrations that ship app adapters: (module, distribution, top-level packages of the objects they run, what)
KNOWN_INTEGRATIONS = (
    ("contextjudge_langchain", "contextjudge-langchain", ("langchain", "langchain_core", "langgraph"),
     "LangChain Runnables, agents and LangGraph graphs"),
    ("contextjudge_llama_index", "contextjudge-llama-index", ("llama_index",),
     "LlamaIndex query engines, chat engines, retrievers, agents and workflows"),
)


def _adapters() -> list[tuple[str, Any]]:
    found = []
    for ep in _entry_points("contextjudge.apps"):
        try:
            obj = ep.load()
            found.append((ep.name, obj() if isinstance(obj, type) else obj))  # an instance, or its class
        except Exception as exc:  # noqa: BLE001
            logging.getLogger("contextjudge").warning("contextjudge: the app adapter %r (%s) could not be loaded: %s",
                                                      ep.name, ep.value, exc)
    return found


def load_object(spec: str, *, own_only: bool = False) -> Any:
    """Import ``module:object`` (``object`` may be dotted; ``module:factory()`` calls a no-argument factory).
    ``own_only`` (what ``contextjudge mcp --allow-app`` runs): ``object`` is one name, and a factory is called only
    when the module (or a module of its package) defines it, never a function it imported from elsewhere."""
    if ":" not in spec or spec.startswith(":") or spec.endswith(":"):
        raise UsageError(f"--app {spec!r} is not module:object; write it like myapp.chain:rag_chain.")
    mod_name, _, attr = spec.partition(":")
    call = attr.endswith("()")
    if call:
        attr = attr[:-2]
    if own_only and not attr.isidentifier():
        raise UsageError(f"--app {spec!r}: only one name the module defines may be run here, not a dotted path.")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the app usually lives in the current directory
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and mod_name.startswith(exc.name):
            raise UsageError(f"cannot import module {mod_name!r} for --app: no module named {exc.name!r}. Run from "
                             "the folder that contains it, or add that folder to PYTHONPATH.") from exc
        raise UsageError(f"importing {mod_name!r} for --app failed: it needs the module {exc.name!r}, which is not "
                         "installed. Install the app's dependencies.") from exc
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        raise UsageError(f"importing {mod_name!r} for --app raised {type(exc).__name__}: {exc}. Fix the module "
                         "(rerun with --debug for the traceback).") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(_no_attribute_message(mod_name, attr, obj, part))
        obj = getattr(obj, part)
    if call:
        home = getattr(obj, "__module__", None)
        if own_only and not (isinstance(home, str) and (home == mod_name or home.startswith(mod_name + "."))):
            raise UsageError(f"--app {spec!r}: {attr} is defined in {home or 'another module'}, not in {mod_name}; "
                             f"only a factory {mod_name} defines may be called here.")
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"calling {spec} raised {type(exc).__name__}: {exc}.") from exc
    return obj


def _no_attribute_message(mod_name: str, attr: str, owner: Any, part: str) -> str:
    """A missing ``--app`` attribute: the closest names first ("did you mean"), then the app-like objects."""
    import difflib  # noqa: PLC0415

    names = [n for n in dir(owner) if not n.startswith("_")]
    close = difflib.get_close_matches(part, names, n=3, cutoff=0.6) or \
        difflib.get_close_matches(part.lower(), [n.lower() for n in names], n=3, cutoff=0.6)
    close = [next(n for n in names if n.lower() == c.lower()) for c in close]
    own = getattr(owner, "__name__", None) if isinstance(owner, type(sys)) else None
    def its_own(value: Any) -> bool:  # not a module, nor a class or function imported from elsewhere
        if isinstance(value, (type(sys), str, bytes, int, float)) or type(value).__name__ == "_Feature":
            return False  # a module, a constant, a __future__ import
        if getattr(value, "__module__", None) in ("typing", "typing_extensions"):
            return False
        if own is not None and (isinstance(value, type) or callable(value) and hasattr(value, "__code__")):
            return getattr(value, "__module__", own) == own
        return True

    apps = [n for n in names if its_own(getattr(owner, n, None))]
    msg = f"module {mod_name!r} has no attribute {attr!r} for --app."
    if close:
        prefix = attr.rpartition(".")[0]
        msg += " Did you mean " + " or ".join(f"{mod_name}:{prefix + '.' if prefix else ''}{c}" for c in close) + "?"
    if apps:
        msg += f" Its own names: {', '.join(sorted(apps)[:12])}" + (" ..." if len(apps) > 12 else "") + "."
    return msg


def _goldens(path: str) -> Any:
    from ..cases.goldens import load_goldens  # noqa: PLC0415

    if not os.path.exists(path):
        raise UsageError(f"goldens file {path!r} does not exist: check the --goldens path.")
    try:
        goldens = load_goldens(path)
    except ContextJudgeError as exc:
        raise UsageError(str(exc)) from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: cannot read it as a JSONL or CSV goldens file ({exc}).") from exc
    if not len(goldens):
        raise UsageError(f"goldens file {path!r} holds no goldens: add one JSON object per line with an 'input'.")
    return goldens


def _code_fingerprint(obj: Any) -> dict[str, Any]:
    """Where the app's code lives and a hash of its module file, so runs of different code can be told apart."""
    mod = sys.modules.get(getattr(obj, "__module__", "") or "")
    out: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    path = getattr(mod, "__file__", None)
    if path and os.path.exists(path):
        with open(path, "rb") as fh:
            out["module_sha256"] = hashlib.sha256(fh.read()).hexdigest()[:16]
        out["module_file"] = os.path.relpath(path) if not os.path.isabs(os.path.relpath(path)) else path
    return out


def cmd_eval(args: argparse.Namespace) -> int:
    goldens = _goldens(args.goldens)
    from ..metrics import default_metrics_for  # noqa: PLC0415

    keys = _metric_keys(args.metrics, default_metrics_for(goldens.items))
    threshold, per = _thresholds(args.threshold, "--threshold")
    pass_default, pass_per = _thresholds(args.min_pass_rate, "--min-pass-rate")
    store = _store(args.store)
    app = load_object(args.app, own_only=getattr(args, "app_own_only", False))
    adapters = _adapters()
    adapter = next(((n, a) for n, a in adapters if _safe_matches(a, app)), None)
    if adapter is None:
        raise UsageError(_no_adapter_message(args.app, app, adapters))
    judge = _store_judge(store, _judge(args.model, args.quiet), args.quiet)
    metrics = _build_metrics(keys, judge, threshold, per)
    loose = _not_gated(metrics, judge, per)
    baseline = _baseline_run(store, args.baseline)
    if baseline:  # refused before the app runs: a baseline made on other goldens compares other questions
        from ._runs import same_goldens_or_refuse  # noqa: PLC0415

        same_goldens_or_refuse(store.run_info(baseline).goldens, goldens.fingerprint(),
                               getattr(args, "allow_different_goldens", False))
    gate_pass = {k: v for k in keys if (v := pass_per.get(k, pass_default)) is not None}

    _info(f"running {len(goldens)} golden(s) through {args.app} with the {adapter[0]} adapter ...", args.quiet)
    t0 = time.perf_counter()
    items = _collect(adapter[1], app, goldens, args)
    from ..capture import golden_cases  # noqa: PLC0415

    got = golden_cases(goldens, items)
    test_cases, failed, missing = got.cases, got.failed, got.missing
    captured = len(test_cases) - len(failed)
    _info(f"captured {captured} test case(s) in {time.perf_counter() - t0:.1f}s"
          + (f"; {len(failed)} golden(s) failed in the app (error cases)" if failed else "") + "; scoring ...",
          args.quiet)
    for f in failed[:3]:
        _info(f"  golden {f.golden.id or f.index + 1} ({_short(f.golden.input, 60)!r}): the app raised "
              f"{type(f.error).__name__}: {_short(str(f.error), 160)}", args.quiet)
    note = _input_note(adapter[1], app, args) if failed else None
    if note:
        _info(f"  {note}", args.quiet)
    if missing:
        shown = ", ".join(repr(_short(g.input, 50)) for g in missing[:3]) + (" ..." if len(missing) > 3 else "")
        _info(f"note: {len(missing)} golden(s) gave no captured retrieval (the app answered without retrieving, "
              f"or its retriever is not captured): {shown}", args.quiet)
    if not test_cases:
        raise UsageError(f"running the goldens through {args.app} captured no retrieval: check that the app "
                         "retrieves, and that the adapter supports it.")

    from ..engine import evaluate  # noqa: PLC0415

    result = evaluate(test_cases, metrics, store=store, run_id=args.run_id,
                      run_name=args.name or default_run_name(args.app, test_cases),
                      max_concurrency=args.concurrency * 4, show_progress=_progress(args), repeats=args.repeats,
                      run_config={"app": args.app, "goldens": os.path.abspath(args.goldens), "adapter": adapter[0],
                                  "code": _code_fingerprint(app), "golden_failures": len(failed),
                                  "goldens_fingerprint": goldens.fingerprint(), "not_gated": loose})
    gates = _metric_gates(result, metrics, gate_pass, loose)
    _print_summary(result, gates, judge)
    regressed = _against_baseline(store, result.run_id, baseline) if baseline else None
    if args.report:
        from ..report import render_report  # noqa: PLC0415

        _write(args.report, render_report(store=store, run=result.run_id))
        print(f"report: {args.report}")
    else:
        print(f"report: contextjudge report {result.run_id} --store {store.target} -o report.html")
    code = _verdict(result, gates, args.allow_errors)
    if regressed and code == 0:
        print("FAILED: regression against the baseline: " + regressed)
        return EXIT_GATE
    return code


def _baseline_run(store: RunReads, ref: str | None) -> str | None:
    """The run ``--baseline`` names, checked before the app runs (an unknown run is an error, not a skipped gate)."""
    if not ref:
        return None
    from ..errors import StoreError  # noqa: PLC0415

    try:
        return str(store.resolve_run(ref))
    except StoreError as exc:
        raise UsageError(f"--baseline {ref}: {exc}") from exc


def _against_baseline(store: RunReads, run_id: Any, baseline: str) -> str | None:
    """Print what regressed against the baseline run, named per golden; the one-line verdict when it did."""
    from ._runs import _run_label, regression_of, regression_verdict  # noqa: PLC0415

    reg = regression_of(store, run_id, store.load_run(run_id, verdicts=False),
                        store.load_run(baseline, verdicts=False))
    print(f"\ncompared with the baseline {_run_label(store, baseline)}: {reg.pairs} golden(s) paired")
    lines = reg.lines()
    for line in lines:
        print(line)
    if not lines:
        print("no golden lost its answer document, and no gated metric dropped (exact sign test)")
    return regression_verdict(reg) if reg.failed else None


def _git_commit(folder: str) -> str | None:
    """The short commit of the git checkout ``folder`` is in, with "+changes" when its tracked files differ from
    it; None outside a checkout or without git."""
    import subprocess  # noqa: PLC0415

    def git(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *cmd], cwd=folder, capture_output=True, text=True, timeout=10, check=False)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        dirty = git("diff", "--quiet", "HEAD", "--").returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty else "")


def default_run_name(app: str, test_cases: list[Any]) -> str:
    """A run's name when ``--name`` is not given: the app, the git commit of the current folder's checkout (when
    there is one) and the retriever(s) its cases went through, so two runs of one app are told apart (the run's id
    and the store keep when it ran): ``examples.hr_app:chain @ 1a2b3c4 · VectorStoreRetriever``."""
    from ..capture import retriever_names  # noqa: PLC0415

    parts = [app]
    commit = _git_commit(os.getcwd())
    if commit:
        parts[0] += f" @ {commit}"
    names = retriever_names(test_cases)
    if names:
        parts.append(names)
    return " · ".join(parts)


def _safe_matches(adapter: Any, app: Any) -> bool:
    try:
        return bool(adapter.matches(app))
    except Exception:  # noqa: BLE001
        return False


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _no_adapter_message(spec: str, app: Any, adapters: list[tuple[str, Any]]) -> str:
    """What the object is, what each installed adapter runs, and what to install only when it is not installed."""
    from importlib.util import find_spec  # noqa: PLC0415

    what = _type_name(app)
    parts = [f"--app {spec} is a {what}, which no installed app adapter runs."]
    if adapters:
        parts.append("Installed adapters run: " + "; ".join(
            f"{name}: {getattr(a, 'accepts', None) or 'apps (it does not say which)'}" for name, a in adapters) + ".")
    else:
        parts.append("No app adapter is installed.")
    loaded = {type(a).__module__.split(".")[0] for _, a in adapters}
    top = type(app).__module__.split(".")[0]
    for module, dist, packages, runs in KNOWN_INTEGRATIONS:
        try:
            present = find_spec(module) is not None
        except (ImportError, ValueError):
            present = False
        if not present:
            lead = "This is one of its objects: " if top in packages else "For "
            parts.append(f"{lead}{runs}: pip install {dist}.")
        elif module not in loaded:
            parts.append(f"{dist} is installed but its app adapter did not load (see the warning above, or rerun "
                         "with --debug).")
    parts.append("Point --app at an object one of them runs (or a no-argument factory: module:build_app()), or "
                 "register an AppAdapter under the entry-point group contextjudge.apps.")
    return " ".join(parts)


def _input_note(adapter: Any, app: Any, args: argparse.Namespace) -> str | None:
    """The adapter's words on how a golden's question reached the app (which key) and how to choose another."""
    note = getattr(adapter, "input_note", None)
    if note is None:
        return None
    try:
        return str(note(app, getattr(args, "input_key", None)))
    except Exception:  # noqa: BLE001 - a hint, never a second failure
        return None


def _takes(fn: Any, name: str) -> bool:
    import inspect  # noqa: PLC0415

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _collect(adapter: Any, app: Any, goldens: Any, args: argparse.Namespace) -> list[Any]:
    """Run the goldens through the app with a progress bar (when the adapter reports progress)."""
    kwargs: dict[str, Any] = {"concurrency": args.concurrency}
    for flag in ("input_key", "answer_key"):
        value = getattr(args, flag, None)
        if value is None:
            continue
        if not _takes(adapter.collect, flag):
            raise UsageError(f"--{flag.replace('_', '-')} is for apps whose input is a dict of named keys (LangChain "
                             f"Runnables and LangGraph graphs); the {getattr(adapter, 'name', 'app')} adapter gives "
                             "the question as it is. Leave the option out.")
        kwargs[flag] = value
    bar = _bar(len(goldens), "running the app", "golden", _progress(args))
    if _takes(adapter.collect, "progress") and bar is not None:
        kwargs["progress"] = lambda: bar.update(1)
    try:
        return list(adapter.collect(app, goldens, **kwargs))
    finally:
        if bar is not None:
            bar.close()


def add_eval_command(sub: argparse._SubParsersAction) -> None:
    """Register ``eval``."""
    p = sub.add_parser("eval", help="run your goldens through your app, score, store, report; gate CI",
                       description="Load an existing app without changing its code (a LangChain Runnable, agent or "
                                   "LangGraph graph; a LlamaIndex query engine, chat engine, retriever, agent or "
                                   "workflow), run every golden through it with capture attached, score the "
                                   "captured retrievals, store them, print a summary and write the report. "
                                   "The gate: each gated metric's mean must reach its threshold (the metric's "
                                   "default, 0.5, or --threshold), and its pass rate --min-pass-rate when given; "
                                   "relevancy, utilization and faithfulness gate only with a judge trusted for them "
                                   "(an LLM judge, or the embedded judge calibrated on your labels) or a "
                                   "--threshold NAME=X of their own, else they are shown and said not gated. With "
                                   "--baseline RUN, a golden that lost its answer document or a gated metric that "
                                   "dropped (exact sign test) fails too. Exit codes: "
                                   "0 every gate passed; 1 a metric's mean is below its threshold or its pass "
                                   "rate below --min-pass-rate, or a regression against --baseline; 2 an error (bad arguments, app or goldens); 3 some "
                                   "test cases have an error (a golden whose app call raised, a metric that could "
                                   "not run on a case, such as precision without an expected_output) and "
                                   "--allow-errors was not given (3 wins over 1: the means are then incomplete).")
    p.add_argument("--app", required=True, metavar="MODULE:OBJECT",
                   help="the app object, e.g. myapp.chain:rag_chain or myapp.engine:build_engine() (a factory)")
    p.add_argument("--app-own-only", action="store_true", help=argparse.SUPPRESS)  # what `mcp --allow-app` runs
    p.add_argument("--goldens", required=True, metavar="FILE",
                   help="JSONL or CSV goldens: one {\"input\": ..., \"expected_output\": ...} per line/row")
    p.add_argument("--metrics", nargs="+", metavar="METRIC",
                   help="metrics to score, space or comma separated (default, from what the goldens carry: "
                        "hit_rate mrr recall_at_k ndcg with expected_context_ids or expected texts; "
                        "contextual_precision contextual_recall with an expected_output; contextual_relevancy "
                        "context_utilization faithfulness always, shown but gated only when the judge is trusted "
                        "for them: an LLM judge, or the embedded judge calibrated on your labels)")
    p.add_argument("--model", help="judge: local (offline embedded judge), an OpenAI model name, provider:model, "
                                   "or fake (scripted test double); default: $CONTEXTJUDGE_MODEL, else OpenAI with "
                                   "OPENAI_API_KEY, else local")
    _store_arg(p)
    p.add_argument("--threshold", action="append", metavar="[METRIC=]VALUE",
                   help="a metric's threshold: a case passes at score >= it, and the run at mean >= it; for every "
                        "metric (0.7) or one (contextual_recall=0.8); repeatable (default: each metric's own, 0.5)")
    p.add_argument("--min-pass-rate", action="append", metavar="[METRIC=]VALUE",
                   help="also require this share of cases to pass, for every metric or one; repeatable")
    p.add_argument("--allow-errors", action="store_true",
                   help="do not fail (exit 3) on test cases with an error; gate on the scored cases only")
    p.add_argument("--report", metavar="FILE", help="write the HTML report here")
    p.add_argument("--run-id", help="run id in the store; an existing id resumes that run")
    p.add_argument("--baseline", metavar="RUN",
                   help="a stored run to compare with (id or name): print the goldens that lost their answer "
                        "document and the gated metrics that dropped (exact sign test on per-golden wins and "
                        "losses), and exit 1 when any did, as `compare --fail-on-regression` does")
    p.add_argument("--allow-different-goldens", action="store_true",
                   help="with --baseline: compare with a run made on a different golden set (refused by default: a "
                        "difference could come from the changed questions, not from the app)")
    p.add_argument("--input-key", metavar="KEY",
                   help="the key of the app's input that takes each golden's question (default: read from the "
                        "app's input schema: question, input, query, user_input, q, messages, or its only key)")
    p.add_argument("--answer-key", metavar="KEY",
                   help="the key of the app's output that holds its answer (default: answer, output, result, "
                        "response, text, or a graph's last AI message)")
    p.add_argument("--name", help="a name for the run (default: the --app value, the git commit of the current "
                                  "folder's checkout and the retriever, e.g. 'app:chain @ 1a2b3c4 · MyRetriever')")
    p.add_argument("--concurrency", type=int, default=4, help="goldens run through the app at once (default 4)")
    p.add_argument("--repeats", type=_repeats_arg, metavar="K", help=_REPEATS_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(func=cmd_eval)

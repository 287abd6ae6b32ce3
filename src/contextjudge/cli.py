"""The ``contextjudge`` command: evaluate an existing app, score deferred captures, report, compare and export.

Every failure the user can fix prints one line that says what to do (no traceback unless ``--debug``). Exit codes:
0 success, 1 a quality gate failed (a metric's mean below its threshold, a pass rate below ``--min-pass-rate``, or a
regression in ``compare``), 2 an error (usage, configuration), 3 some test cases errored (a golden whose app call
raised, a metric that could not run on a case) and ``--allow-errors`` was not given.
Integrations add subcommands through the entry-point group ``contextjudge.commands`` (a ``main(argv) -> int``)
and app runners through ``contextjudge.apps`` (an ``AppAdapter`` instance).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import json
import logging
import os
import sys
import time
from importlib import metadata as importlib_metadata
from typing import Any, Callable, NamedTuple, Sequence

from .errors import ContextJudgeError, UsageError

__all__ = ["main"]

EXIT_OK, EXIT_GATE, EXIT_ERROR, EXIT_CASE_ERRORS = 0, 1, 2, 3

# who ships the well-known subcommands, so a missing one can say what to install
KNOWN_COMMANDS = {"demo": ("contextjudge-langchain", "the offline end-to-end tour on a LangChain RAG chain")}
PLUGIN_HELP = {"recommend": "which metrics fit your app, from a few questions about it"}
# the integrations that ship app adapters: (module, distribution, top-level packages of the objects they run, what)
KNOWN_INTEGRATIONS = (
    ("contextjudge_langchain", "contextjudge-langchain", ("langchain", "langchain_core", "langgraph"),
     "LangChain Runnables, agents and LangGraph graphs"),
    ("contextjudge_llama_index", "contextjudge-llama-index", ("llama_index",),
     "LlamaIndex query engines, chat engines, retrievers, agents and workflows"),
)
LOCAL_JUDGE = "contextjudge-local"
METRIC_ALIASES = {"precision": "contextual_precision", "recall": "contextual_recall",
                  "relevancy": "contextual_relevancy", "utilization": "context_utilization",
                  "turn_precision": "turn_contextual_precision", "turn_recall": "turn_contextual_recall",
                  "turn_relevancy": "turn_contextual_relevancy", "rubric_recall": "rubric_context_recall"}
DEFAULT_EVAL_METRICS = ("contextual_precision", "contextual_recall", "contextual_relevancy", "context_utilization")


def _err(msg: str) -> None:
    print(f"contextjudge: error: {msg}", file=sys.stderr)


def _info(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(msg, file=sys.stderr)


# ------------------------------------------------------------------------------------------------ entry points
def _entry_points(group: str) -> list[Any]:
    try:
        return list(importlib_metadata.entry_points(group=group))
    except Exception:  # noqa: BLE001 - a broken installed distribution must not break the CLI
        return []


def _plugin_commands() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ep in _entry_points("contextjudge.commands"):
        out.setdefault(ep.name, ep)
    return out


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


# ------------------------------------------------------------------------------------------------ loading inputs
def load_object(spec: str) -> Any:
    """Import ``module:object`` (``object`` may be dotted; ``module:factory()`` calls a no-argument factory)."""
    if ":" not in spec or spec.startswith(":") or spec.endswith(":"):
        raise UsageError(f"--app {spec!r} is not module:object; write it like myapp.chain:rag_chain.")
    mod_name, _, attr = spec.partition(":")
    call = attr.endswith("()")
    if call:
        attr = attr[:-2]
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
            names = sorted(n for n in dir(module) if not n.startswith("_"))[:12]
            raise UsageError(f"module {mod_name!r} has no attribute {attr!r} for --app. It has: {', '.join(names)}")
        obj = getattr(obj, part)
    if call:
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"calling {spec} raised {type(exc).__name__}: {exc}.") from exc
    return obj


def _goldens(path: str) -> Any:
    from .cases.goldens import load_goldens  # noqa: PLC0415

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


def _metric_keys(values: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    from .metrics import BY_KEY  # noqa: PLC0415

    by_class = {cls.__name__.lower(): key for key, cls in BY_KEY.items()}
    by_name = {cls.name.lower(): key for key, cls in BY_KEY.items()}
    raw = [p.strip() for v in (values or []) for p in v.split(",") if p.strip()] or list(default)
    keys = []
    for item in raw:
        low = item.lower().replace("-", "_")
        key = (low if low in BY_KEY else METRIC_ALIASES.get(low) or by_class.get(low) or by_name.get(item.lower()))
        if key is None:
            raise UsageError(f"unknown metric {item!r}. Choose from: {', '.join(sorted(BY_KEY))} "
                             f"(or {', '.join(sorted(METRIC_ALIASES))}).")
        if key not in keys:
            keys.append(key)
    return keys


def _thresholds(values: Sequence[str] | None, what: str) -> tuple[float | None, dict[str, float]]:
    """``0.7`` (every metric) and ``contextual_precision=0.8`` (one metric) -> (default, per metric key)."""
    default: float | None = None
    per: dict[str, float] = {}
    for v in values or []:
        name, sep, num = v.rpartition("=")
        try:
            x = float(num)
        except ValueError:
            raise UsageError(f"{what} {v!r}: expected a number between 0 and 1, or metric=number.") from None
        if not 0.0 <= x <= 1.0:
            raise UsageError(f"{what} {v!r}: must be between 0 and 1.")
        if sep:
            per[_metric_keys([name], [])[0]] = x
        else:
            default = x
    return default, per


def _positive_int(text: str, what: str = "") -> int:
    """argparse type of --workers (and, with ``what``, --repeats): a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1{f' ({what})' if what else ''}, got {text!r}")
    return n


def _repeats_arg(text: str) -> int:
    """argparse type of --repeats: a whole number >= 1."""
    return _positive_int(text, "times the judge is asked")


_REPEATS_HELP = ("ask a sampling judge (temperature above zero) each question K times: the verdict is the majority, "
                 "the judge's disagreement with itself is printed and widens the intervals; repeats bypass the "
                 "verdict cache. A deterministic judge (local, fake) says so and is asked once (default 1)")


def _judge(model: str | None, quiet: bool = False) -> Any:
    """The judge for ``--model``, and one line on stderr saying which judge that is (and why, for the default)."""
    from .errors import JudgeUnavailableError  # noqa: PLC0415
    from .judges.models import judge_name, resolve_model  # noqa: PLC0415

    if model and model.strip().lower() == "fake":
        from .testing import FakeJudge  # noqa: PLC0415

        _info("judge: FakeJudge, the scripted test double (scores show the plumbing, not quality)", quiet)
        return FakeJudge()
    try:
        judge = resolve_model(model)
    except JudgeUnavailableError as exc:
        raise UsageError(f"--model {model or '(default)'}: {exc}") from exc
    name = judge_name(judge)
    if name.startswith(LOCAL_JUDGE):
        what = "the embedded offline judge (free, no API calls)"
    else:
        what = "an LLM judge (billed by its provider)"
    why = "" if model else (" (no --model: $CONTEXTJUDGE_MODEL" if os.environ.get("CONTEXTJUDGE_MODEL") else
                            " (no --model or $CONTEXTJUDGE_MODEL: OPENAI_API_KEY is set" if
                            os.environ.get("OPENAI_API_KEY") else
                            " (no --model, $CONTEXTJUDGE_MODEL or OPENAI_API_KEY") + "; pass --model to choose)"
    _info(f"judge: {name}, {what}{why}", quiet)
    return judge


def _build_metrics(keys: list[str], judge: Any, threshold: float | None, per: dict[str, float]) -> list[Any]:
    from .metrics import BY_KEY  # noqa: PLC0415

    out = []
    for key in keys:
        t = per.get(key, threshold)
        out.append(BY_KEY[key](model=judge) if t is None else BY_KEY[key](model=judge, threshold=t))
    return out


def _store(target: str | None) -> Any:
    from .errors import StoreError  # noqa: PLC0415
    from .store import DEFAULT_STORE_PATH, open_store  # noqa: PLC0415

    target = target or os.environ.get("CONTEXTJUDGE_STORE") or DEFAULT_STORE_PATH
    try:
        return open_store(target)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


def _existing_store(target: str | None, *, write: bool = False) -> Any:
    """A store that must already exist (for commands that only read). A SQLite file this process may not write (a
    CI artifact, a file in a read-only folder) is opened read-only, and so is a store whose writes fail."""
    from .errors import StoreError  # noqa: PLC0415
    from .store import DEFAULT_STORE_PATH, open_store  # noqa: PLC0415

    target = target or os.environ.get("CONTEXTJUDGE_STORE") or DEFAULT_STORE_PATH
    if "://" not in target and not os.path.exists(target):
        raise UsageError(f"no store at {target!r}: pass --store PATH (a results file written by `contextjudge eval` "
                         "or evaluate(..., store=...)) or a database URL.")
    if write:
        return _store(target)
    if "://" not in target and not (os.access(target, os.W_OK)
                                    and os.access(os.path.dirname(os.path.abspath(target)), os.W_OK)):
        try:
            return open_store(target, read_only=True)
        except StoreError as exc:
            raise UsageError(str(exc)) from exc
    try:
        return open_store(target)
    except StoreError as exc:
        if "readonly" in str(exc).lower() or "read-only" in str(exc).lower():
            try:
                return open_store(target, read_only=True)
            except StoreError:
                pass
        raise UsageError(str(exc)) from exc


def _resolve(store: Any, ref: str | None) -> str:
    from .errors import StoreError  # noqa: PLC0415

    try:
        return store.resolve_run(ref)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


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


# ------------------------------------------------------------------------------------------------ output
class _Gate(NamedTuple):
    summary: dict[str, Any]  # the metric's row of result.summary()
    threshold: float | None  # what its mean must reach
    fails: list[str]  # what failed ("mean 0.233 < 0.50"); empty: it passed


def _metric_gates(result: Any, metrics: list[Any] | None, pass_min: dict[str, float] | None = None
                  ) -> dict[str, _Gate]:
    """Per metric name, its gate: its summary, its threshold and what failed ("mean 0.233 < 0.50"; empty: it passed).

    The one rule: a metric's mean must reach its threshold (the metric's own, ``--threshold`` when given), and its
    pass rate ``--min-pass-rate`` when given. A metric no case could score fails: there is nothing to pass.
    """
    by_name = {m.name: m for m in metrics or []}
    out: dict[str, _Gate] = {}
    for name, s in result.summary().items():
        m = by_name.get(name)
        key = getattr(m, "key", None)
        need_mean = getattr(m, "threshold", None) if m is not None else _result_threshold(result, name)
        fails = []
        if s["mean"] is None:
            fails.append("no case scored")
        elif need_mean is not None and s["mean"] < need_mean:
            fails.append(f"mean {s['mean']:.3f} < {_t(need_mean)}")
        need_pass = (pass_min or {}).get(key) if key else None
        if need_pass is not None and s["mean"] is not None and (s["pass_rate"] is None or s["pass_rate"] < need_pass):
            fails.append(f"pass rate {_f(s['pass_rate'])} < {_t(need_pass)}")
        out[name] = _Gate(s, need_mean, fails)
    return out


def _result_threshold(result: Any, name: str) -> float | None:
    """The threshold the results of ``name`` were scored with (the highest, if they differ)."""
    ts = [m.threshold for tr in result.test_results for m in tr.metrics_data if m.name == name]
    return max(ts) if ts else None


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _t(x: float) -> str:
    """A threshold: two decimals, three when it has them (0.50, 0.75, 0.166)."""
    text = f"{x:.3f}"
    return text.removesuffix("0")


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line.rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).rjust(w) if 0 < i < len(r) - 1 else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def _errored_cases(result: Any) -> list[Any]:
    """The test results with an error: the case could not be scored, or one of its metrics could not run."""
    return [tr for tr in result.test_results if tr.error or any(m.error for m in tr.metrics_data)]


def _usage_line(result: Any) -> str:
    """Judge calls and tokens. Tokens of the embedded judge are not billed by anyone, so they are not shown as such."""
    u = result.usage
    judges = result.judges()
    local = [j for j in judges if j.startswith(LOCAL_JUDGE)]
    if judges and len(local) == len(judges):
        tokens = "tokens: none billable (embedded judge, free)"
    elif local:
        billable = sum(m.usage.input_tokens + m.usage.output_tokens for tr in result.test_results
                       for m in tr.metrics_data if m.evaluation_model and not m.evaluation_model.startswith(LOCAL_JUDGE))
        tokens = f"billable tokens {billable} (the embedded judge's are free)"
    else:
        tokens = f"tokens {u.input_tokens + u.output_tokens}"
    who = f"judge {', '.join(judges)}; " if judges else ""
    return f"{who}judge calls {u.calls}, cache hits {u.cache_hits}, {tokens}"


def _ci(iv: Any) -> str:
    return "n/a" if iv.low is None else f"[{iv.low:.3f}, {iv.high:.3f}]"


def _corrected_lines(result: Any, names: Sequence[str]) -> list[str]:
    """Per metric with labelled cases: the bias-corrected mean (prediction-powered), the judge's measured bias and
    what the labelled cases alone say."""
    lines = []
    for name in names:
        est = result.corrected(name)
        if est is None:
            continue
        c, b, lab = est.corrected, est.bias, est.labelled
        lines.append(f"{name}: bias-corrected mean {c.estimate:.3f} {_ci(c)} from {est.n_labelled} labelled and "
                     f"{est.n_unlabelled} unlabelled case(s); judge bias {b.estimate:+.3f} "
                     f"[{b.low:+.3f}, {b.high:+.3f}] (judge's mean minus gold on the labelled cases); labelled "
                     f"cases alone {lab.estimate:.3f} {_ci(lab)}")
    return lines


def _tier_line(result: Any) -> str | None:
    """Items and cost per judge tier, for a tiered judge (``result.tiers``)."""
    tiers = getattr(result, "tiers", None)
    if not tiers:
        return None
    parts = []
    for tier, t in tiers.items():
        tokens = int(t.get("input_tokens", 0) or 0) + int(t.get("output_tokens", 0) or 0)
        extra = "".join(f", {t[k]} {what}" for k, what in (("final", "final"), ("errors", "error(s)")) if t.get(k))
        parts.append(f"{tier} {t.get('items', 0)} item(s){extra}, {t.get('calls', 0)} call(s), {tokens} token(s), "
                     f"{float(t.get('seconds', 0) or 0):.1f}s")
    return "judge tiers: " + "; ".join(parts)


def _repeats_line(result: Any) -> str | None:
    """The judge's disagreement with itself across repeats (``result.repeats``), folded into the intervals above."""
    rep = getattr(result, "repeats", None)
    if not rep:
        return None
    parts = [f"{name} disagreed with itself on {j.get('not_unanimous', 0)} of {j.get('items', 0)} item(s)"
             for name, j in (rep.get("judges") or {}).items() if isinstance(j, dict)]
    once = rep.get("deterministic") or []
    if once:
        parts.append(f"asked once (deterministic): {', '.join(map(str, once))}")
    return f"judge repeats (k={rep.get('k')}): " + "; ".join(parts) if parts else None


def _print_summary(result: Any, gates: dict[str, _Gate]) -> None:
    rows = []
    for name, (s, t, fails) in gates.items():
        iv, pr = result.interval(name), result.pass_rate_interval(name)
        gate = "FAIL: " + "; ".join(fails) if fails else f"pass: mean >= {_t(t)}" if t is not None else "pass"
        rows.append([name, _f(s["mean"]), _ci(iv), _f(s["pass_rate"]), _ci(pr), str(s["scored"]), str(s["errors"]),
                     "-" if t is None else _t(t), gate])
    if not rows:
        print("no metric results")
        return
    _print_table(["metric", "mean", "95% CI", "pass rate", "95% CI", "scored", "errors", "threshold", "gate"], rows)
    corrected = _corrected_lines(result, list(gates))
    if corrected:
        print("\nbias-corrected with your gold labels (prediction-powered inference, 95% intervals):")
        for line in corrected:
            print("  " + line)
    tiers = _tier_line(result)
    errored = _errored_cases(result)
    print(f"\n{len(result)} case(s), {len(errored)} with an error; {_usage_line(result)}; run {result.run_id}")
    if tiers:
        print(tiers)
    repeats = _repeats_line(result)
    if repeats:
        print(repeats)
    for tr in errored[:3]:
        what = tr.name or getattr(tr.test_case, "input", None) or f"case {tr.index}"
        first = tr.error or next(f"{m.name}: {m.error}" for m in tr.metrics_data if m.error)
        print(f"  error on {_short(str(what), 60)!r}: {_short(first, 240)}")
    if len(errored) > 3:
        print(f"  ... and {len(errored) - 3} more case(s) with an error (the report lists them)")


def _short(text: str, n: int) -> str:
    from ._text import shorten  # noqa: PLC0415 - it puts the text on one line itself

    return shorten(text, n)


def _verdict(result: Any, gates: dict[str, _Gate], allow_errors: bool) -> int:
    """The exit code of a scored run, with one line saying why when it is not 0."""
    failures = [f"{name}: {'; '.join(g.fails)}" for name, g in gates.items() if g.fails]
    errored = _errored_cases(result)
    if failures:
        print("FAILED: " + "; ".join(failures))
    if errored and not allow_errors:
        print(f"ERRORS: {len(errored)} of {len(result)} case(s) have an error (counted per metric in the 'errors' "
              "column); fix them, or pass --allow-errors to gate on the scored cases only")
        return EXIT_CASE_ERRORS
    return EXIT_GATE if failures else EXIT_OK


# ------------------------------------------------------------------------------------------------ commands
def cmd_eval(args: argparse.Namespace) -> int:
    goldens = _goldens(args.goldens)
    keys = _metric_keys(args.metrics, DEFAULT_EVAL_METRICS)
    threshold, per = _thresholds(args.threshold, "--threshold")
    pass_default, pass_per = _thresholds(args.min_pass_rate, "--min-pass-rate")
    store = _store(args.store)
    app = load_object(args.app)
    adapters = _adapters()
    adapter = next(((n, a) for n, a in adapters if _safe_matches(a, app)), None)
    if adapter is None:
        raise UsageError(_no_adapter_message(args.app, app, adapters))
    judge = _judge(args.model, args.quiet)
    metrics = _build_metrics(keys, judge, threshold, per)
    gate_pass = {k: pass_per.get(k, pass_default) for k in keys if pass_per.get(k, pass_default) is not None}

    _info(f"running {len(goldens)} golden(s) through {args.app} with the {adapter[0]} adapter ...", args.quiet)
    t0 = time.perf_counter()
    items = _collect(adapter[1], app, goldens, args)
    test_cases, failed = _cases_of(items)
    captured = len(test_cases) - len(failed)
    _info(f"captured {captured} test case(s) in {time.perf_counter() - t0:.1f}s"
          + (f"; {len(failed)} golden(s) failed in the app (error cases)" if failed else "") + "; scoring ...",
          args.quiet)
    for f in failed[:3]:
        _info(f"  golden {f.golden.id or f.index + 1} ({_short(f.golden.input, 60)!r}): the app raised "
              f"{type(f.error).__name__}: {_short(str(f.error), 160)}", args.quiet)
    missing = _goldens_without_case(goldens, items)
    if missing:
        shown = ", ".join(repr(_short(g.input, 50)) for g in missing[:3]) + (" ..." if len(missing) > 3 else "")
        _info(f"note: {len(missing)} golden(s) gave no captured retrieval (the app answered without retrieving, "
              f"or its retriever is not captured): {shown}", args.quiet)
    if not test_cases:
        raise UsageError(f"running the goldens through {args.app} captured no retrieval: check that the app "
                         "retrieves, and that the adapter supports it.")

    from .engine.evaluate import evaluate  # noqa: PLC0415

    result = evaluate(test_cases, metrics, store=store, run_id=args.run_id, run_name=args.name or args.app,
                      max_concurrency=args.concurrency * 4, show_progress=_progress(args), repeats=args.repeats,
                      run_config={"app": args.app, "goldens": os.path.abspath(args.goldens), "adapter": adapter[0],
                                  "code": _code_fingerprint(app), "golden_failures": len(failed)})
    gates = _metric_gates(result, metrics, gate_pass)
    _print_summary(result, gates)
    if args.report:
        from .report import render_report  # noqa: PLC0415

        _write(args.report, render_report(store=store, run=result.run_id))
        print(f"report: {args.report}")
    else:
        print(f"report: contextjudge report {result.run_id} --store {store.target} -o report.html")
    return _verdict(result, gates, args.allow_errors)


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


def _collect(adapter: Any, app: Any, goldens: Any, args: argparse.Namespace) -> list[Any]:
    """Run the goldens through the app with a progress bar (when the adapter reports progress)."""
    import inspect  # noqa: PLC0415

    kwargs: dict[str, Any] = {"concurrency": args.concurrency}
    bar = _bar(len(goldens), "running the app", "golden", _progress(args))
    try:
        params = inspect.signature(adapter.collect).parameters
        takes = "progress" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        takes = False
    if takes and bar is not None:
        kwargs["progress"] = lambda: bar.update(1)
    try:
        return list(adapter.collect(app, goldens, **kwargs))
    finally:
        if bar is not None:
            bar.close()


def _bar(total: int, desc: str, unit: str, enabled: bool | None) -> Any:
    """A tqdm bar on stderr (by default only when stderr is a terminal), or None."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415

        return tqdm(total=total, desc=desc, unit=unit, leave=True, file=sys.stderr)
    except Exception:  # noqa: BLE001 - a progress bar is never worth failing a run
        return None


def _cases_of(items: list[Any]) -> tuple[list[Any], list[Any]]:
    """The test cases to score, in the goldens' order (a golden whose app call raised becomes an error case), and
    the golden failures among them. Cases are keyed by their golden's id when that is unique, so runs of different
    app versions pair up."""
    from .capture import GoldenFailure  # noqa: PLC0415
    from .cases.identity import golden_id_of, is_generated_id  # noqa: PLC0415

    failed = [x for x in items if isinstance(x, GoldenFailure)]
    gids = [x.golden.id if isinstance(x, GoldenFailure) else golden_id_of(x) for x in items]
    out = []
    for item, g in zip(items, gids):
        if isinstance(item, GoldenFailure):
            tc = item.test_case()
            if tc.id and gids.count(g) > 1:
                tc.id = None  # one golden id, several cases: keyed by position like the others
            out.append(tc)
            continue
        tc = item.test_case
        own = getattr(tc, "id", None)
        generated = own is None or own in (item.case_id, item.root_run_id) or is_generated_id(own)
        if g and generated and gids.count(g) == 1:
            tc.id = f"golden-{g}"
        out.append(tc)
    return out, failed


def _with_golden_ids(captured: list[Any]) -> list[Any]:
    """The test cases of ``captured`` (captured cases, golden failures), keyed by golden id where it is unique."""
    return _cases_of(captured)[0]


def _goldens_without_case(goldens: Any, items: list[Any]) -> list[Any]:
    """The goldens that gave neither a captured case nor a failure (matched by id, then by input)."""
    from .capture import GoldenFailure  # noqa: PLC0415
    from .cases.identity import golden_id_of  # noqa: PLC0415
    from .cases.provenance import match_inputs_of  # noqa: PLC0415

    seen: set[int] = set()
    for item in items:
        if isinstance(item, GoldenFailure):
            seen.add(id(item.golden))
            continue
        tc = getattr(item, "test_case", None)
        texts = [getattr(tc, "input", None), *(match_inputs_of(tc) if tc is not None else [])]
        turns = getattr(tc, "turns", None) or []
        texts += [t.content for t in turns if getattr(t, "role", None) == "user"]
        gid = golden_id_of(item)
        hits = [goldens.match(None, gid)] if gid else []
        hits += [goldens.match(t) for t in texts if isinstance(t, str)]
        seen.update(id(g) for g in hits if g is not None)
    return [g for g in goldens if id(g) not in seen]


def _progress(args: argparse.Namespace) -> bool | None:
    if args.quiet or args.no_progress:
        return False
    return None


def cmd_score(args: argparse.Namespace) -> int:
    ray_engine = getattr(args, "engine", "local") == "ray"
    if not ray_engine and (getattr(args, "address", None) or getattr(args, "workers", None)):
        raise UsageError("--address and --workers are for --engine ray (scoring on a Ray cluster).")
    if ray_engine:
        from .engine.ray_engine import require_ray  # noqa: PLC0415
        from .errors import ConfigurationError  # noqa: PLC0415

        try:
            require_ray()
        except ConfigurationError as exc:
            raise UsageError(f"--engine ray: {exc}") from exc
    store = _existing_store(args.store, write=True)
    run_id = _resolve(store, args.run)
    info = store.run_info(run_id)
    rescore = bool(getattr(args, "rescore", False))
    todo = store.load_cases(run_id) if rescore else store.unscored_cases(run_id)
    if not todo:
        print(f"run {run_id}: nothing to " + ("re-score (it has no cases)." if rescore else
                                             "score (every case already has results)."))
        return EXIT_OK
    from .engine.worker import DEFAULT_METRIC_KEYS  # noqa: PLC0415 - the worker scores a stored run the same way

    default_keys = _config_metric_keys(info.config) or list(DEFAULT_METRIC_KEYS)
    keys = _metric_keys(args.metrics, default_keys)
    threshold, per = _thresholds(args.threshold, "--threshold")
    if ray_engine:
        return _score_on_ray(args, store, run_id, info, todo, keys, threshold, per, rescore)
    metrics = _build_metrics(keys, _judge(args.model, args.quiet), threshold, per)
    from .engine.evaluate import evaluate  # noqa: PLC0415

    if rescore:  # a new run of the old run's cases (same keys), scored with this judge and these metrics
        _info(f"re-scoring the {len(todo)} case(s) of run {run_id} into a new run with "
              f"{', '.join(m.name for m in metrics)} ...", args.quiet)
        result = evaluate([c.test_case for c in todo], metrics, store=store, show_progress=_progress(args),
                          repeats=args.repeats, run_name=f"{info.name or run_id} rescore",
                          run_config={"rescore_of": run_id}, case_keys=[c.case_key for c in todo])
        print(f"rescore: run {result.run_id} (of run {run_id})")
    else:
        _info(f"scoring {len(todo)} deferred case(s) of run {run_id} with {', '.join(m.name for m in metrics)} ...",
              args.quiet)
        result = evaluate([c.test_case for c in todo], metrics, store=store, run_id=run_id,
                          show_progress=_progress(args), repeats=args.repeats,
                          case_keys=[c.case_key for c in todo])  # results go to the stored cases, under their keys
    gates = _metric_gates(result, metrics)
    _print_summary(result, gates)
    _budget_skipped_line(result)
    return _verdict(result, gates, args.allow_errors)


def _budget_skipped_line(result: Any) -> None:
    """Say how many cases a spent budget skipped, and how to judge them."""
    skipped = sum(1 for tr in result.test_results
                  if any(m.error_type == "BudgetExhaustedError" for m in tr.metrics_data or []))
    if skipped:
        print(f"{skipped} case(s) were skipped by the judge budget and have no score: run `contextjudge score --run "
              f"{result.run_id}` again when the budget's next window opens (it judges only what has no result yet), "
              "or raise the budget's limits.")


def _score_on_ray(args: argparse.Namespace, store: Any, run_id: str, info: Any, todo: list[Any], keys: list[str],
                  threshold: float | None, per: dict[str, float], rescore: bool) -> int:
    """`contextjudge score --engine ray`: queue the run's unscored cases (or, with --rescore, copy every case into a
    new run), score them on Ray actors that claim them from the store's queue, and gate like the local engine."""
    from ._version import __version__  # noqa: PLC0415
    from .engine.ray_engine import RayEngine, copy_run, finish_run  # noqa: PLC0415
    from .engine.run import metric_config  # noqa: PLC0415
    from .errors import ConfigurationError  # noqa: PLC0415
    from .judges.options import JudgeOptions  # noqa: PLC0415

    metrics = _build_metrics(keys, None, threshold, per)
    spec = args.model  # built on each Ray worker, once: "local", "openai:...", "fake", "@calibration.json" or None
    _info(f"judge: {spec or 'the default judge ($CONTEXTJUDGE_MODEL, else OpenAI with OPENAI_API_KEY, else local)'}"
          ", built once on each Ray worker", args.quiet)
    if rescore:
        config = {"metrics": [metric_config(m) for m in metrics], "judges": [{"name": spec or "default"}],
                  "contextjudge": __version__, "cases": len(todo), "engine": "ray"}
        old = run_id
        run_id = copy_run(store, old, config)
        _info(f"rescore: run {run_id} holds the {len(todo)} case(s) of run {old}", args.quiet)
    else:
        store.enqueue(run_id, only_unscored=True)
    _info(f"scoring {len(todo)} case(s) of run {run_id} on Ray with {', '.join(m.name for m in metrics)} ...",
          args.quiet)
    options = JudgeOptions(repeats=args.repeats) if args.repeats else None

    def say(text: str) -> None:
        _info(text, args.quiet)

    engine = RayEngine(store, model=spec, metrics=metrics, address=args.address, workers=args.workers,
                       judge_options=options, log=say)
    try:
        report = engine.score(run_id)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    say(report.line())
    if not report.complete:
        say(f"ray: stopped before every case was scored ({report.stopped_because or report.queue}); run the same "
            "command again to finish")
    result = finish_run(store, run_id, report, [c.case_key for c in todo], seconds=report.seconds)
    if rescore:
        print(f"rescore: run {run_id} (of run {info.run_id})")
    gates = _metric_gates(result, metrics)
    _print_summary(result, gates)
    return _verdict(result, gates, args.allow_errors)


def _config_metric_keys(config: dict[str, Any]) -> list[str]:
    from .engine.run import metric_specs  # noqa: PLC0415

    return [key for key, _ in metric_specs(config)]


def _write(path: str, text: str) -> None:
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}. Pass a writable output path.") from exc


def cmd_report(args: argparse.Namespace) -> int:
    from .report import render_report  # noqa: PLC0415

    store = _existing_store(args.store)
    run_id = _resolve(store, args.run)
    other = _resolve(store, args.compare) if args.compare else None
    _info(f"rendering run {run_id}" + (f" against {other}" if other else "") + " ...", args.quiet)
    _write(args.output, render_report(store=store, run=run_id, compare=other, title=args.title))
    print(f"report: {args.output}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    """Paired differences per metric over the cases both runs scored; with --fail-on-regression, exit 1 only when a
    metric is significantly worse (its whole 95% paired-t interval below zero). A metric without shared cases is
    said so and never fails the gate."""
    from .report import compare_runs  # noqa: PLC0415

    store = _existing_store(args.store)
    base = _resolve(store, args.baseline)
    cur = _resolve(store, args.run)
    changes = compare_runs(store.load_run(cur), store.load_run(base))
    rows, worse, unpaired = [], [], []
    for c in changes:
        iv = c.difference
        ci = "n/a" if iv.low is None else f"[{iv.low:+.3f}, {iv.high:+.3f}]"
        diff = "n/a" if iv.estimate is None else f"{iv.estimate:+.3f}"
        rows.append([c.metric, _f(c.baseline_mean), _f(c.current_mean), diff, ci, str(iv.n), c.reading])
        if c.significantly_worse:
            worse.append(c.metric)
        if iv.n == 0:
            unpaired.append(c)
    print(f"{_run_label(store, cur)} compared with {_run_label(store, base)} (paired by test case id, else input; "
          "difference = this run - baseline, 95% paired-t intervals)")
    _print_table(["metric", "baseline", "this run", "difference", "95% CI", "pairs", "reading"], rows)
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
        from .report import render_report  # noqa: PLC0415

        _write(args.output, render_report(store=store, run=cur, compare=base))
        print(f"report: {args.output}")
    if args.fail_on_regression and worse:
        print("FAILED: worse on " + ", ".join(worse)
              + " (significantly: the whole 95% interval of the paired difference is below zero)")
        return EXIT_GATE
    return EXIT_OK


def _run_label(store: Any, run_id: str) -> str:
    """A run as people know it: its name, with its id ("nightly (run 20261124-2017-ab12)")."""
    try:
        name = store.run_info(run_id).name
    except Exception:  # noqa: BLE001 - the label is a nicety; the id is enough
        name = None
    return f"{name} (run {run_id})" if name and name != run_id else f"run {run_id}"


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
            res = store.load_run(run_id)
            for tr in res.test_results:
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


# ------------------------------------------------------------------------------------------------ parser
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks and debug logs")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="print only results")


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH_OR_URL",
                   help="results store: a SQLite file path or a SQLAlchemy URL such as postgresql+psycopg://u@h/db "
                        "(default: $CONTEXTJUDGE_STORE, else .contextjudge/results.db)")


def build_parser(plugins: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    from . import __version__  # noqa: PLC0415

    plugins = _plugin_commands() if plugins is None else plugins
    parser = argparse.ArgumentParser(
        prog="contextjudge", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Score the retrieval half of RAG apps: contextual precision, recall, relevancy and utilization.\n"
                    "\n"
                    "Start here:\n"
                    "  contextjudge demo            an offline tour: a bundled RAG app scored, stored and reported\n"
                    "  contextjudge eval --app myapp.chain:rag_chain --goldens goldens.jsonl --report report.html\n"
                    "                               run your goldens through your own app, score, store, report;\n"
                    "                               its exit code gates CI\n"
                    "Then: `contextjudge report` (HTML report of the latest run), `contextjudge compare BASELINE`\n"
                    "(did a change help?), `contextjudge runs` (what the store holds).",
        epilog="Exit codes: 0 ok, 1 a quality gate failed, 2 an error, 3 some test cases errored (see "
               "`contextjudge eval --help`).\n`contextjudge COMMAND --help` for details.")
    parser.add_argument("--version", action="version", version=f"contextjudge {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only results")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("eval", help="run your goldens through your app, score, store, report; gate CI",
                       description="Load an existing app without changing its code (a LangChain Runnable, agent or "
                                   "LangGraph graph; a LlamaIndex query engine, chat engine, retriever, agent or "
                                   "workflow), run every golden through it with capture attached, score the "
                                   "captured retrievals, store them, print a summary and write the report. "
                                   "The gate: each metric's mean must reach its threshold (the metric's default, "
                                   "0.5, or --threshold), and its pass rate --min-pass-rate when given. Exit codes: "
                                   "0 every metric passed; 1 a metric's mean is below its threshold or its pass "
                                   "rate below --min-pass-rate; 2 an error (bad arguments, app or goldens); 3 some "
                                   "test cases have an error (a golden whose app call raised, a metric that could "
                                   "not run on a case, such as precision without an expected_output) and "
                                   "--allow-errors was not given (3 wins over 1: the means are then incomplete).")
    p.add_argument("--app", required=True, metavar="MODULE:OBJECT",
                   help="the app object, e.g. myapp.chain:rag_chain or myapp.engine:build_engine() (a factory)")
    p.add_argument("--goldens", required=True, metavar="FILE",
                   help="JSONL or CSV goldens: one {\"input\": ..., \"expected_output\": ...} per line/row")
    p.add_argument("--metrics", nargs="+", metavar="METRIC",
                   help="metrics to score, space or comma separated (default: contextual_precision "
                        "contextual_recall contextual_relevancy context_utilization)")
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
    p.add_argument("--name", help="a name for the run (default: the --app value)")
    p.add_argument("--concurrency", type=int, default=4, help="goldens run through the app at once (default 4)")
    p.add_argument("--repeats", type=_repeats_arg, metavar="K", help=_REPEATS_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("score", help="score the cases a capture kept for later (mode='deferred')",
                       description="Score the cases of a stored run that have no results yet (captured with "
                                   "mode='deferred'), and write the results into the same run. Gates and exits "
                                   "like `contextjudge eval` (0 ok, 1 a metric's mean below its threshold, 2 an "
                                   "error, 3 cases with an error unless --allow-errors).")
    _store_arg(p)
    p.add_argument("--run", help="run id or name (default: the latest run)")
    p.add_argument("--metrics", nargs="+", metavar="METRIC", help="metrics (default: those the capture was given)")
    p.add_argument("--model", help="judge (see `contextjudge eval --help`)")
    p.add_argument("--threshold", action="append", metavar="[METRIC=]VALUE",
                   help="a metric's threshold, as in `contextjudge eval` (cases pass at score >= it, the run at "
                        "mean >= it)")
    p.add_argument("--allow-errors", action="store_true", help="do not fail (exit 3) on test cases with an error")
    p.add_argument("--repeats", type=_repeats_arg, metavar="K", help=_REPEATS_HELP)
    p.add_argument("--rescore", action="store_true",
                   help="score every case of --run again, into a NEW run (e.g. with another --model or template); "
                        "the old run is left as it is")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: in this process (default). ray: on Ray actors that each build the judge once and "
                        "claim cases from the store's queue (pip install \"contextjudge[ray]\"); a killed worker's "
                        "cases are claimed again and nothing is written twice")
    p.add_argument("--address", metavar="ADDR",
                   help="with --engine ray: the Ray cluster to join (e.g. ray://head:10001, or head:6379 on a node "
                        "of it); default: start a local Ray instance. Clusters need a PostgreSQL --store")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help="with --engine ray: scoring actors, one CPU each (default: every CPU of the local instance "
                        "or the cluster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("report", help="write the HTML report of a run (optionally compared with another)",
                       description="Write one self-contained HTML file: per metric the score distribution, the mean "
                                   "and the pass rate, each with a 95% interval; per case the ranked nodes "
                                   "coloured by verdict with the judge's reasons. With --compare, the paired "
                                   "difference per metric and the cases that changed most.")
    p.add_argument("run", nargs="?", help="run id, name or unique id prefix (default: the latest run)")
    _store_arg(p)
    p.add_argument("--compare", metavar="OTHER_RUN", help="baseline run to compare with")
    p.add_argument("-o", "--output", default="report.html", help="output file (default: report.html)")
    p.add_argument("--title", help="page title")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="paired differences between two runs, with confidence intervals",
                       description="Print, per metric, the paired difference between RUN and BASELINE (RUN minus "
                                   "BASELINE, over the cases both runs scored, paired by test case id, else input) "
                                   "with its 95% paired-t interval, and the cases that changed most. With "
                                   "--fail-on-regression, exits 1 only when a metric is significantly worse: its "
                                   "whole interval is below zero. A metric with no shared cases never fails.")
    p.add_argument("baseline", help="baseline run id or name")
    p.add_argument("run", nargs="?", help="run to compare (default: the latest run)")
    _store_arg(p)
    p.add_argument("-o", "--output", metavar="FILE", help="also write the HTML compare report")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a metric is significantly worse (its whole 95%% interval below zero)")
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

    from ._cli_trust import add_trust_commands  # noqa: PLC0415 - calibrate and label live in their own module

    add_trust_commands(sub)
    from ._cli_estimate import add_estimate_command  # noqa: PLC0415 - production commands, each in its own module
    from ._cli_trend import add_trend_command  # noqa: PLC0415
    from ._cli_worker import add_worker_command  # noqa: PLC0415

    add_estimate_command(sub)
    add_worker_command(sub)
    add_trend_command(sub)

    for name, ep in sorted(plugins.items()):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        what = KNOWN_COMMANDS.get(name, ("", ""))[1] or PLUGIN_HELP.get(name, "")
        p = sub.add_parser(name, help=f"{what} (from {dist or ep.value})".strip(), add_help=False,
                           prefix_chars="\0")
        p.add_argument("argv", nargs=argparse.REMAINDER)
        p.set_defaults(func=None, plugin=ep)
    for name, (package, what) in KNOWN_COMMANDS.items():
        if name not in plugins:
            p = sub.add_parser(name, help=f"{what} (not installed: pip install {package})", add_help=False,
                               prefix_chars="\0")
            p.add_argument("argv", nargs=argparse.REMAINDER)
            p.set_defaults(func=None, plugin=None, missing=(name, package))
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so in-process callers that swap it keep working)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _configure_logging(debug: bool) -> tuple[logging.Logger, logging.Handler, int]:
    """Show the library's warnings (and debug logs with --debug) on stderr while the command runs."""
    log = logging.getLogger("contextjudge")
    handler = _StderrHandler()
    previous = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if debug else logging.WARNING)
    return log, handler, previous


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``contextjudge`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    log, handler, level = _configure_logging(debug)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False)) or debug
        args.quiet = bool(getattr(args, "quiet", False))
        if args.command is None:
            parser.print_help()
            return EXIT_OK
        if getattr(args, "missing", None):
            name, package = args.missing
            _err(f"`contextjudge {name}` is provided by {package}, which is not installed: pip install {package}")
            return EXIT_ERROR
        if getattr(args, "plugin", None) is not None:
            return _run_plugin(args.plugin, args.argv)
        rc = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return rc
    except BrokenPipeError:
        _quiet_stdout()  # `contextjudge export | head`: the reader has what it wanted
        return EXIT_OK
    except SystemExit as exc:  # argparse's own usage errors already printed one line
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except KeyboardInterrupt:
        _err("interrupted; a stored run can be resumed with the same --run-id.")
        return 130
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        _err(_explain(exc))
        return EXIT_ERROR
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _quiet_stdout() -> None:
    """Point stdout at the null device, so that Python's own flush at exit does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (an in-process caller's buffer)
        pass


def _explain(exc: BaseException) -> str:
    if isinstance(exc, ContextJudgeError):  # UsageError included: its message says what to fix
        return str(exc)
    return f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)"


def _run_plugin(ep: Any, argv: list[str]) -> int:
    try:
        func: Callable[[list[str]], int] = ep.load()
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"the command {ep.name!r} ({ep.value}) could not be loaded: {type(exc).__name__}: {exc}. "
                         "Reinstall the package that provides it.") from exc
    rc = func(list(argv))
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

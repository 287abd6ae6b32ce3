"""The helpers every command of the CLI shares: exit codes and messages, the shared arguments, stores, the judge
line, metric keys and thresholds, and the gate and summary of a scored run.

It imports no command module (the command modules and the parser import it), so the CLI has no import circle.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, Any

from .._text import shown
from ..engine import MetricGate as _Gate
from ..engine import errored_cases as _errored_cases
from ..engine import figure_text as _f
from ..engine import metric_gates as _metric_gates  # noqa: F401 - the commands read it here
from ..engine import threshold_text as _t
from ..errors import UsageError

if TYPE_CHECKING:
    from ..store import CalibrationStore, ResultsStore, RunReads

EXIT_OK, EXIT_GATE, EXIT_ERROR, EXIT_CASE_ERRORS = 0, 1, 2, 3


def _err(msg: str) -> None:
    print(shown(f"contextjudge: error: {msg}", keep="\n\t"), file=sys.stderr)


def _info(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(shown(msg, keep="\n\t"), file=sys.stderr)


class ShownStdout:
    """``sys.stdout`` while a command runs: what the stores hold (a case's input, a run's name, a judge's reason) is
    captured end-user text, so every character a terminal would obey reaches it shown (``_text.shown``), whichever
    command prints it. Line breaks and tabs, the commands' own layout, pass as they are; the one-line fields of a
    table are shown whole (``_print_table``). Everything else is the stream underneath."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(shown(text, keep="\n\t"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


# ------------------------------------------------------------------------------------------------ entry points
def _entry_points(group: str) -> list[Any]:
    try:
        return list(importlib_metadata.entry_points(group=group))
    except Exception:  # noqa: BLE001 - a broken installed distribution must not break the CLI
        return []


def _metric_keys(values: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    """``--metrics`` as registered keys (``metrics.metric_keys``); an unknown name is a usage error."""
    from ..errors import ConfigurationError  # noqa: PLC0415
    from ..metrics import metric_keys  # noqa: PLC0415

    try:
        return metric_keys(values, default)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


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
    """The judge for ``--model`` (``engine.choose_judge``), and its one line on stderr saying which judge that is
    (and why, for the default)."""
    from ..engine import choose_judge  # noqa: PLC0415
    from ..errors import JudgeUnavailableError  # noqa: PLC0415

    try:
        judge, line = choose_judge(model)
    except JudgeUnavailableError as exc:
        raise UsageError(f"--model {model or '(default)'}: {exc}") from exc
    _info(line, quiet)
    return judge


def _store_judge(store: CalibrationStore | None, judge: Any, quiet: bool = False) -> Any:
    """The judge a command on ``store`` uses (``engine.judge_on_store``), with its lines on stderr."""
    from ..engine import judge_on_store  # noqa: PLC0415

    got, lines = judge_on_store(store, judge)
    for line in lines:
        _info(line, quiet)
    return got


def _workspace_judge(workspace: Any, judge: Any) -> Any:
    """The judge a tool of ``contextjudge mcp`` uses: calibrated on the labels of the store it was started on, as
    the commands on a store do (``_store_judge``); as it is when there is no store yet."""
    try:
        store = workspace.store()
    except Exception:  # noqa: BLE001 - no store yet: nothing to calibrate on
        return judge
    return _store_judge(store, judge, quiet=True)


def _build_metrics(keys: list[str], judge: Any, threshold: float | None, per: dict[str, float]) -> list[Any]:
    """The metric objects for ``keys`` (already resolved by ``_metric_keys``), judged by ``judge``: ``--threshold``
    for every metric (``threshold``) or per metric key (``per``)."""
    from ..metrics import from_keys  # noqa: PLC0415

    return from_keys(keys, model=judge, thresholds={k: per.get(k, threshold) for k in keys})



def _store(target: str | None) -> ResultsStore:
    from ..errors import StoreError  # noqa: PLC0415
    from ..store import DEFAULT_STORE_PATH, open_store  # noqa: PLC0415

    target = target or os.environ.get("CONTEXTJUDGE_STORE") or DEFAULT_STORE_PATH
    try:
        return open_store(target)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


def _existing_store(target: str | None, *, write: bool = False) -> ResultsStore:
    """A store that must already exist (for commands that only read). A SQLite file this process may not write (a
    CI artifact, a file in a read-only folder) is opened read-only, and so is a store whose writes fail."""
    from ..errors import StoreError  # noqa: PLC0415
    from ..store import DEFAULT_STORE_PATH, open_store  # noqa: PLC0415

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


def _resolve(store: RunReads, ref: str | None) -> str:
    from ..errors import StoreError  # noqa: PLC0415

    try:
        return store.resolve_run(ref)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc



# ------------------------------------------------------------------------------------------------ output
def _not_gated(metrics: list[Any], judge: Any, per: dict[str, float]) -> dict[str, str]:
    """Per metric name, the verdict family of each metric shown but not gated (``metrics.not_gated``): a judged
    metric whose judge is not trusted for its family, unless ``--threshold NAME=X`` (``per``) names it."""
    from ..metrics import not_gated  # noqa: PLC0415

    by_key = {m.key if getattr(m, "k", None) is None else m.name: m for m in metrics}
    return {by_key[k].name: fam for k, fam in not_gated(list(by_key), judge, explicit=per).items()}


def _not_gated_line(not_gated: dict[str, str], judge: Any) -> str | None:
    """The summary's one line on the metrics shown but not gated: which, why, and how to gate them."""
    if not not_gated:
        return None
    from ..judges import judge_name  # noqa: PLC0415

    try:
        who = judge_name(judge) if judge is not None and not isinstance(judge, str) else str(judge or "the judge")
    except Exception:  # noqa: BLE001
        who = "the judge"
    names = ", ".join(not_gated)
    first = next(iter(not_gated))
    from ..metrics import metric_class  # noqa: PLC0415

    cls = metric_class(first)
    key = cls.key if cls is not None else first
    return (f"not gated: {names} (shown only: {who} is not trusted for their verdicts until calibrated on your "
            f"labels to a cross-validated kappa >= 0.6); to gate one, pass --threshold {key}=X, or run "
            "`contextjudge calibrate --labels FILE --model local` and eval with --model @contextjudge-calibration.json")


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    rows = [[shown(c) for c in r] for r in rows]  # one line each: a stored line break is shown too
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False))
    print(line.rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).rjust(w) if 0 < i < len(r) - 1 else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=False))).rstrip())


def _usage_line(result: Any) -> str:
    """Judge calls and tokens. Tokens of the embedded judge are not billed by anyone, so they are not shown as such
    (``EvaluationResult.token_words``, which the report's header says too)."""
    u = result.usage
    judges = result.judges()
    who = f"judge {', '.join(judges)}; " if judges else ""
    return f"{who}judge calls {u.calls}, cache hits {u.cache_hits}, {result.token_words()}"


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


def _print_summary(result: Any, gates: dict[str, _Gate], judge: Any = None) -> None:
    rows = []
    for name, (s, t, fails, loose) in gates.items():
        iv, pr = result.interval(name), result.pass_rate_interval(name)
        gate = "FAIL: " + "; ".join(fails) if fails else f"pass: mean >= {_t(t)}" if t is not None else "pass"
        if loose:
            gate = "not gated" + (f" (would fail: {'; '.join(fails)})" if fails else "")
        rows.append([name, _f(s["mean"]), _ci(iv), _f(s["pass_rate"]), _ci(pr), str(s["scored"]), str(s["errors"]),
                     "-" if t is None else _t(t), gate])
    if not rows:
        print("no metric results")
        return
    _print_table(["metric", "mean", "95% CI", "pass rate", "95% CI", "scored", "errors", "threshold", "gate"], rows)
    loose_line = _not_gated_line({n: g.not_gated for n, g in gates.items() if g.not_gated}, judge)
    if loose_line:
        print(loose_line)
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
    from .._text import shorten  # noqa: PLC0415 - it puts the text on one line itself

    return shorten(text, n)


def _verdict(result: Any, gates: dict[str, _Gate], allow_errors: bool) -> int:
    """The exit code of a scored run, with one line saying why when it is not 0."""
    failures = [f"{name}: {'; '.join(g.fails)}" for name, g in gates.items() if g.fails and not g.not_gated]
    errored = _errored_cases(result)
    if failures:
        print("FAILED: " + "; ".join(failures))
    if errored and not allow_errors:
        print(f"ERRORS: {len(errored)} of {len(result)} case(s) have an error (counted per metric in the 'errors' "
              "column); fix them, or pass --allow-errors to gate on the scored cases only")
        return EXIT_CASE_ERRORS
    return EXIT_GATE if failures else EXIT_OK



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


def _progress(args: argparse.Namespace) -> bool | None:
    if args.quiet or args.no_progress:
        return False
    return None


def _config_metric_keys(config: dict[str, Any]) -> list[str]:
    from ..engine import metric_specs  # noqa: PLC0415

    return [key for key, _ in metric_specs(config)]


def _write(path: str, text: str) -> None:
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}. Pass a writable output path.") from exc


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks and debug logs")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="print only results")


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="PATH_OR_URL",
                   help="results store: a SQLite file path or a SQLAlchemy URL such as postgresql+psycopg://u@h/db "
                        "(default: $CONTEXTJUDGE_STORE, else .contextjudge/results.db)")


def loopback_names(host: str, port: int) -> tuple[list[str], list[str]]:
    """The Host headers and Origins a page on this machine sends to a server on loopback ``host``:``port`` (the
    address it listens on, and 127.0.0.1, localhost and [::1], each with the port); any other Host is a DNS
    rebinding page, any other Origin another site's page."""
    names = []
    for h in (host, "127.0.0.1", "localhost", "::1"):
        shown = f"[{h.strip('[]')}]" if ":" in h else h
        if shown not in names:
            names.append(shown)
    hosts = [f"{h}:{port}" for h in names] + (names if port == 80 else [])
    return hosts, [f"http://{h}" for h in hosts]

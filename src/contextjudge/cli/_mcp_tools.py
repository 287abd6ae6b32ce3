"""The tools of ``contextjudge mcp``, as plain data, with no MCP import (``_mcp_server`` wraps these in the SDK): a
front door over the engine's workspace (``engine/_workspace.py``: what each tool computes, callable from Python).
Here: the store the server was started on, opened once; the folder paths must lie in and the one module
``evaluate_app`` may run (security checks); metric names and judges resolved as the CLI resolves them; and every
answer bounded: a list is cut at the answer's token budget with a ``next_cursor`` to ask for the rest. A bad
argument raises ``ToolArgumentError``, whose message says what to pass.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..engine import StoreWorkspace, ToolArgumentError, estimate_cost, judge_check, score_one
from ..errors import ContextJudgeError, UsageError

__all__ = ["DEFAULT_MAX_TOKENS", "ToolArgumentError", "Tools", "Workspace"]

DEFAULT_MAX_TOKENS = 4000  # an answer's budget, in tokens (estimated as characters / 4)
MIN_MAX_TOKENS = 200
TEXT_CHARS = 300  # a text in an answer cut to fit (the workspace shortens its own texts as it lists them)


def _short(text: Any, n: int) -> str | None:
    if text is None:
        return None
    from .._text import shorten  # noqa: PLC0415

    return shorten(str(text), n)


def _tokens(obj: Any) -> int:
    """A rough token count of ``obj`` as JSON (4 characters a token), the unit of the answer's budget."""
    return math.ceil(len(json.dumps(obj, default=str)) / 4)


# ------------------------------------------------------------------------------------------------ the cursor
def _args_key(tool: str, args: dict[str, Any]) -> str:
    text = json.dumps({"tool": tool, **{k: v for k, v in args.items() if k not in ("cursor", "max_tokens")}},
                      sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _encode_cursor(tool: str, args: dict[str, Any], offset: int) -> str:
    raw = json.dumps({"t": tool, "k": _args_key(tool, args), "o": offset}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(tool: str, args: dict[str, Any], cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        offset = int(data["o"])
        same = data["t"] == tool and data["k"] == _args_key(tool, args) and offset >= 0
    except (ValueError, KeyError, TypeError):
        same = False
    if not same:
        raise ToolArgumentError(f"cursor {_short(cursor, 40)!r} is not one {tool} gave for these arguments: pass "
                                f"the next_cursor of the previous {tool} answer, with the same other arguments, or "
                                "leave cursor out to start from the first item.")
    return offset


def _page(tool: str, args: dict[str, Any], items: Sequence[dict[str, Any]], budget: int, head: dict[str, Any],
          key: str) -> dict[str, Any]:
    """``head`` plus ``items[offset:]`` under ``key``, as many as the budget holds (always one), and
    ``next_cursor`` (None when nothing is left) and ``total``."""
    offset = _decode_cursor(tool, args, args.get("cursor"))
    if offset > len(items):
        raise ToolArgumentError(f"cursor points past the end ({offset} of {len(items)} items): the data changed "
                                "since; leave cursor out to start again.")
    spent = _tokens(head) + 40
    page: list[dict[str, Any]] = []
    for item in items[offset:]:
        cost = _tokens(item)
        if page and spent + cost > budget:
            break
        if not page and spent + cost > budget:  # the first item alone is too big: shorten it to fit
            item = _shrunk(item, budget - spent)
            cost = _tokens(item)
        page.append(item)
        spent += cost
    end = offset + len(page)
    return {**head, key: page, "total": len(items), "offset": offset,
            "next_cursor": _encode_cursor(tool, args, end) if end < len(items) else None}


# ------------------------------------------------------------------------------------------------ the tools
class Workspace:
    """What every tool of one server shares: the store it was started on (``store``: a path or URL; never
    another), opened once for reading, the folder it was started in (paths must lie inside), ``allow_app`` (the one
    module ``evaluate_app`` may run, or None: refused) and the answer budget's ceiling."""

    def __init__(self, store: str, *, allow_app: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 root: str | None = None) -> None:
        self.target = store
        self.allow_app = allow_app
        self.max_tokens = max(MIN_MAX_TOKENS, int(max_tokens))
        self.root = os.path.abspath(root or os.getcwd())
        self._lock = threading.Lock()
        self._store: Any = None

    # ---- plumbing
    def budget(self, max_tokens: int | None) -> int:
        if max_tokens is None:
            return self.max_tokens
        if max_tokens < MIN_MAX_TOKENS:
            raise ToolArgumentError(f"max_tokens={max_tokens}: pass {MIN_MAX_TOKENS} or more (at most "
                                    f"{self.max_tokens}, this server's ceiling), or leave it out.")
        return min(int(max_tokens), self.max_tokens)

    def store(self) -> Any:
        """The store the server was started on, opened for reading on first use (a missing store is an error that
        says how to make one; it is looked for again on the next call)."""
        with self._lock:
            if self._store is None:
                from ._shared import _existing_store  # noqa: PLC0415

                try:
                    self._store = _existing_store(self.target)
                except UsageError as exc:
                    raise ToolArgumentError(f"{exc} This server reads only the store it was started on "
                                            f"({self.target}); run `evaluate_app` (or `contextjudge eval --store "
                                            f"{self.target}`) to write a run into it first.") from exc
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def run_id(self, ref: str | None) -> str:
        from ..errors import StoreError  # noqa: PLC0415

        store = self.store()
        try:
            return str(store.resolve_run(ref))
        except StoreError as exc:
            raise ToolArgumentError(f"{exc} Call `runs` for the run ids and names this store holds.") from exc

    def inside(self, path: str, what: str, *, must_exist: bool) -> str:
        """``path`` (relative to the server's folder) resolved, symbolic links followed: refused when where it leads
        is outside the folder (``../x``, an absolute path, or a link to elsewhere), or, with ``must_exist``, is not
        an existing file."""
        root = os.path.realpath(self.root)
        given = os.path.abspath(os.path.join(root, path))
        full = os.path.realpath(given)
        if os.path.commonpath([full, root]) != root:
            how = " through a symbolic link" if os.path.commonpath([given, root]) == root else ""
            raise ToolArgumentError(f"{what} {path!r} leads outside the folder this server was started in ({root})"
                                    f"{how}: pass a path inside it.")
        if must_exist and not os.path.isfile(full):
            raise ToolArgumentError(f"{what} {path!r} does not exist (looked for {full}): pass the path of an "
                                    "existing file, relative to the folder the server was started in.")
        return full

    def report_target(self, path: str) -> str:
        """Where ``evaluate_app`` may write its HTML report: inside the folder (``inside``), named ``.html``, and
        either new or a report contextjudge wrote before: never the app's own source or any other file."""
        full = self.inside(path, "report", must_exist=False)
        if not full.lower().endswith((".html", ".htm")):
            raise ToolArgumentError(f"report {path!r} is not an .html path: pass a new file name ending in .html "
                                    "(e.g. .contextjudge/report.html), or leave report out.")
        from ..report import is_report_file  # noqa: PLC0415

        if os.path.lexists(full) and not is_report_file(full):
            raise ToolArgumentError(f"report {path!r} is an existing file that is not a contextjudge report "
                                    f"({full}): evaluate_app never overwrites other files; pass a new file name, or "
                                    "leave report out.")
        return full

    @staticmethod
    def keys(metrics: list[str] | None, default: Sequence[str]) -> list[str]:
        """The metric keys a tool's ``metrics`` names (``metrics.metric_keys``, as the CLI's ``--metrics``)."""
        from ..errors import ConfigurationError  # noqa: PLC0415
        from ..metrics import metric_keys  # noqa: PLC0415

        try:
            return metric_keys(metrics, default)
        except ConfigurationError as exc:
            raise ToolArgumentError(str(exc)) from exc

    # ---- score

class StoreReads:
    """The tools that read the store: runs, run_summary, worst_cases, compare_runs, trend and estimate (what they
    compute is ``engine.StoreWorkspace``'s)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws

    def _view(self) -> StoreWorkspace:
        return StoreWorkspace(self.ws.store(), Workspace.keys)

    def runs(self, *, cursor: str | None = None, max_tokens: int | None = None) -> dict[str, Any]:
        """The runs in the store, newest first (``store.runs()``)."""
        args = {"cursor": cursor}
        budget = self.ws.budget(max_tokens)
        return _page("runs", args, self._view().runs(), budget, {"store": str(self.ws.target)}, "runs")

    # ---- one run
    def run_summary(self, *, run: str | None = None) -> dict[str, Any]:
        """Per metric the mean and pass rate with their 95% intervals, as the summary and the report compute them
        (``EvaluationResult.interval``/``pass_rate_interval``), with the gate each metric's threshold sets."""
        run_id = self.ws.run_id(run)
        return self._view().run_summary(run_id)

    def worst_cases(self, *, run: str | None = None, metric: str | None = None, cursor: str | None = None,
                    max_tokens: int | None = None) -> dict[str, Any]:
        """The run's lowest-scoring (case, metric) results, lowest first (errors before scores), each with the
        judge's reason, the case's input, output and expected output, and its ranked nodes with their verdicts,
        shortened."""
        budget = self.ws.budget(max_tokens)
        run_id = self.ws.run_id(run)
        names, items = self._view().worst_cases(run_id, metric)
        args = {"run": run_id, "metric": metric, "cursor": cursor}
        return _page("worst_cases", args, items, budget, {"run_id": run_id, "metrics": names}, "cases")

    # ---- two runs
    def compare_runs(self, *, baseline: str, run: str | None = None, top: int = 5,
                     allow_different_goldens: bool = False) -> dict[str, Any]:
        """Per metric the paired difference (run - baseline) with its 95% paired-t interval and the reading, as
        the report and ``contextjudge compare`` compute them (``report.compare_runs``), and the cases that
        changed most. Runs made on different golden sets are refused unless ``allow_different_goldens`` (the rule
        of ``contextjudge compare``)."""
        from ._runs import different_goldens_note, same_goldens_or_refuse  # noqa: PLC0415

        if not 0 <= top <= 20:
            raise ToolArgumentError(f"top={top}: pass 0 to 20 (the changed cases shown per metric).")
        base = self.ws.run_id(baseline)
        cur = self.ws.run_id(run)
        store = self.ws.store()
        before, after = store.run_info(base).goldens, store.run_info(cur).goldens
        different = same_goldens_or_refuse(before, after, allow_different_goldens,
                                           override="allow_different_goldens=true", error=ToolArgumentError)
        out = self._view().compare_runs(base, cur, top)
        out["goldens"] = {"baseline": before, "run": after}
        out["note"] = (different_goldens_note(before, after).removeprefix("NOTE: ")
                       if different and before and after else None)
        return out

    # ---- the store over time
    def trend(self, *, by: str = "day", since: str | None = None, until: str | None = None,
              metric: list[str] | None = None, where: dict[str, str] | None = None, min_cases: int = 10,
              check_drop: bool = False, baseline: str = "previous", cursor: str | None = None,
              max_tokens: int | None = None) -> dict[str, Any]:
        """``store.trend()`` per window and metric (``contextjudge trend``), newest window first; with
        ``check_drop``, the drop check of ``trend --fail-on-drop`` (``store.find_drops``)."""
        budget = self.ws.budget(max_tokens)
        if by not in ("hour", "day", "week"):
            raise ToolArgumentError(f"by={by!r}: pass 'hour', 'day' or 'week'.")
        if min_cases < 2:
            raise ToolArgumentError(f"min_cases={min_cases}: pass 2 or more (a window needs two cases for an "
                                    "interval).")
        head, windows, drop = self._view().trend(by=by, since=since, until=until, metric=metric, where=where,
                                                 min_cases=min_cases, check_drop=check_drop, baseline=baseline)
        if check_drop:
            head["drop_check"] = _bounded(drop, budget // 2)
        args = {"by": by, "since": since, "until": until, "metric": metric, "where": where, "min_cases": min_cases,
                "check_drop": check_drop, "baseline": baseline, "cursor": cursor}
        return _page("trend", args, windows, budget, head, "windows")

    # ---- cost before running
    def estimate(self, *, model: str, goldens: str | None = None, run: str | None = None,
                 metrics: list[str] | None = None, sample_rate: float = 1.0,
                 requests_per_day: float | None = None) -> dict[str, Any]:
        """Judge calls, tokens and dollars before anything is judged (``engine.estimate``), for a goldens file or a
        stored run's cases."""
        from ..metrics import default_metrics_for  # noqa: PLC0415

        if (goldens is None) == (run is None):
            raise ToolArgumentError("estimate needs the cases: pass goldens (a goldens file's path) or run (a stored "
                                    "run's id or name), one of them.")
        if not 0.0 <= sample_rate <= 1.0:
            raise ToolArgumentError(f"sample_rate={sample_rate}: pass a share from 0 to 1.")
        if requests_per_day is not None and requests_per_day < 0:
            raise ToolArgumentError(f"requests_per_day={requests_per_day}: pass a number >= 0, or leave it out.")
        default: list[str] = []
        observed = None
        source: Any
        if goldens is not None:
            from ..goldens import load_goldens  # noqa: PLC0415

            try:
                source = load_goldens(self.ws.inside(goldens, "goldens", must_exist=True))
            except ContextJudgeError as exc:
                raise ToolArgumentError(f"goldens {goldens!r}: {exc}") from exc
            if not len(source):
                raise ToolArgumentError(f"goldens {goldens!r} holds no goldens: one JSON object per line with an "
                                        "'input'.")
            default = default_metrics_for(source.items)
        else:
            run_id = self.ws.run_id(run)
            source, default, observed = self._view().run_cases(run_id, model)
            if not source:
                raise ToolArgumentError(f"the run {run_id} holds no cases to estimate: pass another run.")
        keys = self.ws.keys(metrics, default)
        # one row per metric: small whatever the cases
        return estimate_cost(source, keys, model=model, sample_rate=sample_rate, requests_per_day=requests_per_day,
                             observed=observed)


class Judging:
    """The tools that ask a judge and write nothing: score (one case) and judge_check (the built-in labels); what
    they compute is ``engine.score_one`` and ``engine.judge_check``."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws

    def score(self, *, input: str, nodes: list[str], output: str | None = None,  # noqa: A002 - the case's field
              expected_output: str | None = None, metrics: list[str] | None = None, judge: str = "local",
              threshold: float | None = None) -> dict[str, Any]:
        """One test case scored (no store write): per metric the score, pass or fail, the reason, and the
        per-node verdicts."""
        from ..metrics import default_metric_keys  # noqa: PLC0415
        from ._shared import _build_metrics, _judge, _workspace_judge  # noqa: PLC0415

        if not isinstance(input, str) or not input.strip():
            raise ToolArgumentError("input: pass the user's question as a non-empty string.")
        if not nodes or not all(isinstance(n, str) for n in nodes):
            raise ToolArgumentError("nodes: pass the retrieved texts as a non-empty list of strings, best-ranked "
                                    "first.")
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ToolArgumentError(f"threshold={threshold}: pass a number from 0 to 1, or leave it out.")
        default = default_metric_keys(expected_output=expected_output is not None, actual_output=output is not None)
        keys = self.ws.keys(metrics, default)
        try:
            judge_model = _judge(judge, quiet=True)
        except UsageError as exc:
            raise ToolArgumentError(f"judge: {exc} Pass 'local' (the embedded offline judge) or a model you have a "
                                    "key for.") from exc
        built = _build_metrics(keys, _workspace_judge(self.ws, judge_model), threshold, {})
        return score_one(input=input, nodes=nodes, output=output, expected_output=expected_output, metrics=built,
                         judge=judge)

    # ---- runs
    def judge_check(self, *, judge: str = "local", limit: int | None = None, show: int = 3) -> dict[str, Any]:
        """``contextjudge calibrate --builtin``: the judge's agreement (accuracy, Cohen's kappa, TPR, TNR, with 95%
        intervals) with the labelled set that ships with contextjudge, per verdict family; ``limit``: N labelled
        cases drawn across the families and both labels (``stratified``; quicker, wider intervals)."""
        from ._shared import _judge  # noqa: PLC0415

        if limit is not None and limit < 1:
            raise ToolArgumentError(f"limit={limit}: pass a number of labelled cases >= 1, or leave it out for all.")
        if not 0 <= show <= 20:
            raise ToolArgumentError(f"show={show}: pass 0 to 20 (disagreements listed per family).")
        try:
            judge_model = _judge(judge, quiet=True)
        except UsageError as exc:
            raise ToolArgumentError(f"judge: {exc}") from exc
        spec = judge if judge.strip().lower() != "fake" else None
        return judge_check(judge_model, judge_spec=spec, limit=limit, show=show)


class AppRuns:
    """evaluate_app: the user's app run on goldens in a fresh process, into the server's store, then read back."""

    def __init__(self, ws: Workspace, reads: StoreReads) -> None:
        self.ws = ws
        self.reads = reads

    def evaluate_app(self, *, goldens: str, app: str | None = None, metrics: list[str] | None = None,
                     judge: str = "local", threshold: float | None = None, min_pass_rate: float | None = None,
                     allow_errors: bool = False, report: str | None = None, timeout_s: float = 900.0,
                     run_command: Callable[..., Any] | None = None) -> dict[str, Any]:
        """``contextjudge eval --app`` on a goldens file, in a fresh process (so an edited app is the app run, and
        nothing it prints or raises reaches this server), into this server's store; then the run read back: the
        summary, the gate's verdict and the report's path."""
        spec = self._allowed_app(app)
        goldens_path = self.ws.inside(goldens, "goldens", must_exist=True)
        keys = self.ws.keys(metrics, ()) if metrics else None
        for name, x in (("threshold", threshold), ("min_pass_rate", min_pass_rate)):
            if x is not None and not 0.0 <= x <= 1.0:
                raise ToolArgumentError(f"{name}={x}: pass a number from 0 to 1, or leave it out.")
        run_id = "mcp-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()
        report_path = self.ws.report_target(report or os.path.join(".contextjudge", f"report-{run_id}.html"))
        try:
            os.makedirs(os.path.dirname(report_path), exist_ok=True)
            # the app writes its report to a new file beside the target, moved over it once checked again: a link
            # or a file put at the target meanwhile is replaced, never written through
            fd, written = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=os.path.dirname(report_path))
            os.close(fd)
        except OSError as exc:
            raise ToolArgumentError(f"report {report!r}: cannot write beside {report_path} ({exc.strerror or exc}): "
                                    "pass a writable path inside the folder, or leave report out.") from exc
        try:
            return self._run_app(spec, goldens_path, run_id, report_path, written, keys, judge, threshold,
                                 min_pass_rate, allow_errors, timeout_s, run_command)
        finally:
            if os.path.lexists(written):
                os.unlink(written)

    def _run_app(self, spec: str, goldens_path: str, run_id: str, report_path: str, written: str,
                 keys: list[str] | None, judge: str, threshold: float | None, min_pass_rate: float | None,
                 allow_errors: bool, timeout_s: float, run_command: Callable[..., Any] | None) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "contextjudge", "eval", "--app", spec, "--app-own-only", "--goldens",
               goldens_path, "--store", str(self.ws.target), "--run-id", run_id, "--report", written,
               f"--model={judge}", "--no-progress"]
        if keys:
            cmd += ["--metrics", *keys]
        if threshold is not None:
            cmd += ["--threshold", str(threshold)]
        if min_pass_rate is not None:
            cmd += ["--min-pass-rate", str(min_pass_rate)]
        if allow_errors:
            cmd.append("--allow-errors")
        runner = run_command or subprocess.run
        try:
            done = runner(cmd, cwd=self.ws.root, capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ToolArgumentError(f"the app did not finish its goldens in {timeout_s:.0f}s: pass a larger "
                                    "timeout_s, or fewer goldens.") from exc
        if done.returncode == 2:
            lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
            why = next((ln.split("error: ", 1)[1] for ln in reversed(lines) if "contextjudge: error: " in ln),
                       lines[-1] if lines else "no message")
            raise ToolArgumentError(f"contextjudge eval --app {spec} failed: {why}")
        if os.path.getsize(written):
            self.ws.report_target(report_path)  # still a new path or a report
            os.replace(written, report_path)
        self.ws.close()  # the run was written by another process: read the store afresh
        try:
            summary = self.reads.run_summary(run=run_id)
        except ToolArgumentError as exc:
            tail = _short((done.stderr or "").strip()[-600:], 600)
            raise ToolArgumentError(f"contextjudge eval --app {spec} exited {done.returncode} without a stored run "
                                    f"({exc}); its last words: {tail}") from exc
        verdict = {0: "pass", 1: "gate failed", 3: "case errors"}.get(done.returncode, f"exit {done.returncode}")
        return {"app": spec, "goldens": goldens_path, "run_id": run_id, "exit_code": done.returncode,
                "verdict": verdict, "gate_passed": done.returncode == 0, "report": report_path,
                "summary": summary,
                "next": f"worst_cases(run={run_id!r}) for the cases to explain; compare_runs(baseline=..., "
                        f"run={run_id!r}) against an earlier run"}

    def _allowed_app(self, app: str | None) -> str:
        if not self.ws.allow_app:
            raise ToolArgumentError("evaluate_app runs your app's code, so this server refuses it unless started "
                                    "with --allow-app: restart it as `contextjudge mcp --allow-app MODULE` (e.g. "
                                    "--allow-app myapp.chain or --allow-app myapp.chain:rag_chain); only that module "
                                    "is run.")
        allowed_module, _, allowed_obj = self.ws.allow_app.partition(":")
        spec = app or (self.ws.allow_app if allowed_obj else None)
        if not spec:
            raise ToolArgumentError(f"app: pass the app object as MODULE:OBJECT inside {allowed_module} (e.g. "
                                    f"{allowed_module}:rag_chain).")
        module, sep, obj = spec.partition(":")
        if not sep or not obj:
            if module == allowed_module and allowed_obj:
                return self.ws.allow_app
            raise ToolArgumentError(f"app {spec!r} is not MODULE:OBJECT: pass e.g. {allowed_module}:rag_chain.")
        if module != allowed_module or (allowed_obj and obj != allowed_obj):
            raise ToolArgumentError(f"app {spec!r} is refused: this server runs only "
                                    + (f"{self.ws.allow_app}" if allowed_obj else f"the module {allowed_module!r}")
                                    + f" (--allow-app {self.ws.allow_app}); pass "
                                    + (f"app={self.ws.allow_app!r} or leave app out." if allowed_obj
                                       else "an object of that module."))
        if not allowed_obj and not _OWN_NAME.fullmatch(obj):
            # a dotted path reaches through the module to what it imported (myapp.rag:os.getpid()): refused here,
            # before anything is imported; the app process then refuses a factory defined elsewhere
            raise ToolArgumentError(f"app {spec!r} is refused: pass one name the module {allowed_module!r} defines "
                                    f"(e.g. {allowed_module}:rag_chain, or {allowed_module}:build_app() for a "
                                    "factory), not a dotted path into what it imports; or restart the server with "
                                    f"--allow-app naming that exact object.")
        return spec


_OWN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\(\))?")


class Tools:
    """The tools of one server (what ``_mcp_server`` registers), on a ``Workspace``: ``Tools(store, allow_app=...,
    max_tokens=...)``."""

    def __init__(self, store: str, *, allow_app: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 root: str | None = None) -> None:
        self.ws = Workspace(store, allow_app=allow_app, max_tokens=max_tokens, root=root)
        reads, judging = StoreReads(self.ws), Judging(self.ws)
        self.runs, self.run_summary, self.worst_cases = reads.runs, reads.run_summary, reads.worst_cases
        self.compare_runs, self.trend, self.estimate = reads.compare_runs, reads.trend, reads.estimate
        self.score, self.judge_check = judging.score, judging.judge_check
        self.evaluate_app = AppRuns(self.ws, reads).evaluate_app

    def close(self) -> None:
        self.ws.close()

def _shrunk(item: Any, budget: int) -> Any:
    """``item`` with shorter texts and lists (down to 40 characters and one element) until it fits ``budget``."""
    out = item
    for chars, keep in ((150, 3), (80, 2), (40, 1)):
        out = _cut(item, chars, keep)
        if _tokens(out) <= budget:
            break
    return out


def _cut(x: Any, chars: int, keep: int) -> Any:
    if isinstance(x, dict):
        return {k: _cut(v, chars, keep) for k, v in x.items()}
    if isinstance(x, list):
        return [_cut(v, chars, keep) for v in x[:keep]]
    if isinstance(x, str) and len(x) > chars:
        return _short(x, chars)
    return x


def _bounded(obj: Any, budget: int) -> Any:
    """``obj`` with its lists cut (each list keeps a head and says how many were left out) until it fits."""
    if obj is None or _tokens(obj) <= budget:
        return obj

    def cut(x: Any, n: int) -> Any:
        if isinstance(x, dict):
            return {k: cut(v, n) for k, v in x.items()}
        if isinstance(x, list):
            head = [cut(v, n) for v in x[:n]]
            return head + ([{"left_out": len(x) - n}] if len(x) > n else [])
        if isinstance(x, str):
            return _short(x, TEXT_CHARS)
        return x

    for n in (20, 10, 5, 2, 1):
        out = cut(obj, n)
        if _tokens(out) <= budget:
            return out
    return out


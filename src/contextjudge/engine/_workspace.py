"""What the MCP server's tools compute (issue 49: out of the CLI, callable from Python): one store's runs, a run's
summary with its gate, its worst cases, two runs compared, the trend, a cost estimate, one case scored and a judge
checked against the labels that ship with contextjudge; as plain data (texts shortened, figures rounded to four
places), with no MCP import and no printed text read back.

The door (``cli/_mcp_tools.py``) opens the store, checks paths and what ``evaluate_app`` may run, resolves metric
keys and judges as the CLI does, and cuts answers at a token budget with a cursor; what it hands here is already
checked. A bad argument raises ``ToolArgumentError``, whose message says what to pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ContextJudgeError

if TYPE_CHECKING:
    from ..store import ResultsStore

__all__ = ["NODES_SHOWN", "TEXT_CHARS", "StoreWorkspace", "ToolArgumentError", "builtin_check_path", "embedded_beside",
           "estimate_cost",
           "judge_check", "score_one", "stratified"]

TEXT_CHARS = 300  # an input, output or reason in an answer
NODE_CHARS = 200  # one retrieved node's text
NODES_SHOWN = 5  # nodes shown per case
VERDICT_REASON_CHARS = 160


class ToolArgumentError(ContextJudgeError):
    """A tool was called with an argument it cannot use; the message says what to pass instead."""


def short(text: Any, n: int) -> str | None:
    """``text`` shortened to ``n`` characters (None stays None)."""
    if text is None:
        return None
    from .._text import shorten  # noqa: PLC0415

    return shorten(str(text), n)


def iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def num(x: Any) -> float | None:
    return None if x is None else round(float(x), 4)


def ci(iv: Any) -> list[float] | None:
    return None if iv is None or iv.low is None else [round(iv.low, 4), round(iv.high, 4)]


KeysOf = Callable[[list[str] | None, Sequence[str]], list[str]]


class StoreWorkspace:
    """The reads of one store (``store``: an open store), as the MCP tools answer them. ``keys_of(names, default)``
    resolves metric names to keys (the CLI's aliases; ToolArgumentError on an unknown one)."""

    def __init__(self, store: ResultsStore, keys_of: KeysOf | None = None) -> None:
        self.store = store
        self.keys_of = keys_of

    # ---- the store
    def runs(self) -> list[dict[str, Any]]:
        """The runs in the store, newest first (``store.runs()``)."""
        return [{"run_id": r["run_id"], "name": r["name"], "status": r["status"],
                 "created_at": iso(r["created_at"]), "finished_at": iso(r["finished_at"]),
                 "cases": r["cases"], "results": r["results"], "judges": list(r["judges"] or [])}
                for r in self.store.runs()]

    # ---- one run
    def load(self, run_id: str) -> Any:
        """The run read back, with the gold scores its cases' labels imply."""
        from ..metrics import fill_gold_scores  # noqa: PLC0415

        return fill_gold_scores(self.store.load_run(run_id))

    def run_summary(self, run_id: str) -> dict[str, Any]:
        """Per metric the mean and pass rate with their 95% intervals, as the summary and the report compute them
        (``EvaluationResult.interval``/``pass_rate_interval``), with the gate each metric's threshold sets."""
        from ._gates import errored_cases, metric_gates  # noqa: PLC0415

        info = self.store.run_info(run_id)
        result = self.load(run_id)
        loose = (info.config or {}).get("not_gated") if isinstance(info.config, dict) else None
        gates = metric_gates(result, None, None, loose if isinstance(loose, dict) else None)
        metrics = []
        for name, g in gates.items():
            iv, pr = result.interval(name), result.pass_rate_interval(name)
            metrics.append({"metric": name, "mean": num(g.summary["mean"]), "mean_ci": ci(iv),
                            "pass_rate": num(g.summary["pass_rate"]), "pass_rate_ci": ci(pr),
                            "scored": g.summary["scored"], "errors": g.summary["errors"],
                            "threshold": num(g.threshold),
                            "gate": ("not gated (the judge is not trusted for it)" if g.not_gated else
                                     "fail: " + "; ".join(g.fails) if g.fails else "pass"),
                            "corrected": g.summary.get("corrected")})
        u = result.usage
        return {"run_id": run_id, "name": info.name, "status": info.status, "created_at": iso(info.created_at),
                "cases": len(result), "cases_with_errors": len(errored_cases(result)),
                "judges": result.judges(), "metrics": metrics,
                "usage": {"calls": u.calls, "cache_hits": u.cache_hits, "input_tokens": u.input_tokens,
                          "output_tokens": u.output_tokens}}

    def worst_cases(self, run_id: str, metric: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
        """The run's metric names (only ``metric``'s when given) and its lowest-scoring (case, metric) results,
        lowest first (errors before scores), each with the judge's reason, the case's input, output and expected
        output, and its ranked nodes with their verdicts, shortened."""
        result = self.load(run_id)
        names = result.metric_names()
        if metric is not None:
            names = [self.metric_name(metric, names)]
        rows: list[tuple[float, int, str, Any, Any]] = []
        for tr in result.test_results:
            for m in tr.metrics_data:
                if m.name in names:
                    rank = -1.0 if m.score is None else float(m.score)
                    rows.append((rank, tr.index, m.name, tr, m))
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        return names, [case_item(tr, m) for _, _, _, tr, m in rows]

    def metric_name(self, metric: str, names: list[str]) -> str:
        """The name in ``names`` that ``metric`` (a name, key or alias) means."""
        from ..metrics import BY_KEY  # noqa: PLC0415

        if metric in names:
            return metric
        low = metric.lower().replace("-", "_").replace(" ", "_")
        for n in names:
            if n.lower().replace(" ", "_") == low:
                return n
        if self.keys_of is not None:
            try:
                key = self.keys_of([metric], [])[0]
                cls_name = str(BY_KEY[key].name)
                if cls_name in names:
                    return cls_name
            except ToolArgumentError:
                pass
        raise ToolArgumentError(f"metric {metric!r} has no result in this run: pass one of {', '.join(names)}.")

    # ---- two runs
    def compare_runs(self, base: str, cur: str, top: int = 5) -> dict[str, Any]:
        """Per metric the paired difference (run - baseline) with its 95% paired-t interval and the reading, as
        the report and ``contextjudge compare`` compute them (``report.compare_runs``), and the cases that
        changed most."""
        from ..report import compare_runs  # noqa: PLC0415

        changes = compare_runs(self.store.load_run(cur), self.store.load_run(base), top=top)
        metrics = []
        for c in changes:
            iv = c.difference
            metrics.append({"metric": c.metric, "baseline_mean": num(c.baseline_mean),
                            "current_mean": num(c.current_mean), "difference": num(iv.estimate),
                            "ci": ci(iv), "pairs": iv.n, "reading": c.reading,
                            "significantly_worse": bool(c.significantly_worse),
                            "changed_cases": [{"case_key": cc.key, "index": cc.index,
                                               "input": short(cc.text, 120), "baseline": num(cc.baseline),
                                               "current": num(cc.current), "change": num(cc.difference)}
                                              for cc in c.top_cases]})
        worse = [m["metric"] for m in metrics if m["significantly_worse"]]
        return {"run_id": cur, "baseline_id": base, "paired_by": "test case id, else input",
                "level": 0.95, "metrics": metrics, "worse_on": worse, "regression": bool(worse)}

    # ---- the store over time
    def trend(self, *, by: str = "day", since: str | None = None, until: str | None = None,
              metric: list[str] | None = None, where: dict[str, str] | None = None, min_cases: int = 10,
              check_drop: bool = False, baseline: str = "previous"
              ) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
        """``store.trend()`` per window and metric (``contextjudge trend``): (its head, its windows newest first,
        with ``check_drop`` the drop check of ``trend --fail-on-drop``, ``store.find_drops``, else None)."""
        from ..errors import ConfigurationError, StoreError  # noqa: PLC0415
        from ..store import find_drops  # noqa: PLC0415

        filters = {str(k): [str(v)] for k, v in (where or {}).items()}
        try:
            tr = self.store.trend(metric=metric or None, by=by, since=since, until=until, where=filters,
                                  min_cases=min_cases)
            drop: dict[str, Any] | None = None
            if check_drop and tr.windows:
                drops, info = find_drops(self.store, tr, baseline=baseline, min_drop=0.0, where=filters)
                drop = {**(info or {}), "drops": [d.to_dict() for d in drops],
                        "dropped": [d.metric for d in drops if d.status == "drop"]}
        except (ConfigurationError, StoreError) as exc:
            raise ToolArgumentError(f"{exc} (since/until: an ISO date such as 2026-11-20, or a span back from now "
                                    "such as 14d; where: retriever, tag, run or a metadata key.)") from exc
        data = tr.to_dict()
        windows = list(reversed(data.pop("windows", [])))
        head = {k: v for k, v in data.items()}
        head["judge_changes"] = head.get("judge_changes", [])[:20]
        return head, windows, drop

    # ---- cost before running
    def run_cases(self, run_id: str, model: str) -> tuple[list[Any], list[str], Any]:
        """A stored run's cases for ``estimate``: (the cases, the run's metric keys else the default set for them,
        the answer lengths ``model`` gave in this store)."""
        from ..metrics import default_metrics_for  # noqa: PLC0415
        from ._run import metric_specs  # noqa: PLC0415

        source = [c.test_case for c in self.store.load_cases(run_id)]
        default = [key for key, _ in metric_specs(self.store.run_info(run_id).config)] or \
            default_metrics_for(source)
        return source, default, self.store.answer_lengths(model)


def estimate_cost(source: Any, keys: list[str], *, model: str, sample_rate: float = 1.0,
                  requests_per_day: float | None = None, observed: Any = None) -> dict[str, Any]:
    """Judge calls, tokens and dollars before anything is judged (``engine.estimate``), one row per metric."""
    from ._estimate import estimate  # noqa: PLC0415

    try:
        est = estimate(source, keys, model=model, sample_rate=sample_rate, per_day=requests_per_day,
                       observed_output=observed)
    except ContextJudgeError as exc:
        raise ToolArgumentError(f"{exc}") from exc
    return dict(est.to_dict())


def case_item(tr: Any, m: Any) -> dict[str, Any]:
    """One (case, metric) result as the worst cases list it, shortened."""
    by_rank = {v.get("rank"): v for v in (m.verdicts or []) if isinstance(v, dict) and v.get("rank")}
    nodes = list(tr.retrieval_context or [])
    shown = []
    for i, text in enumerate(nodes[:NODES_SHOWN], start=1):
        v = by_rank.get(i) or {}
        shown.append({"rank": i, "text": short(text, NODE_CHARS), "verdict": v.get("verdict"),
                      "reason": short(v.get("reason"), VERDICT_REASON_CHARS)})
    return {"case_key": getattr(tr.test_case, "id", None), "index": tr.index, "metric": m.name,
            "score": num(m.score), "threshold": num(m.threshold), "success": bool(m.success),
            "reason": short(m.reason, TEXT_CHARS), "error": short(m.error or tr.error, TEXT_CHARS),
            "input": short(tr.input, TEXT_CHARS), "actual_output": short(tr.actual_output, TEXT_CHARS),
            "expected_output": short(tr.expected_output, TEXT_CHARS), "nodes": shown,
            "nodes_total": len(nodes)}


def metric_row(m: Any, *, verdicts: bool = False) -> dict[str, Any]:
    """One metric's result as ``score`` answers it."""
    row: dict[str, Any] = {"metric": m.name, "score": num(m.score), "threshold": num(m.threshold),
                           "success": bool(m.success), "reason": short(m.reason, TEXT_CHARS),
                           "error": short(m.error, TEXT_CHARS)}
    if verdicts:
        row["verdicts"] = [{"rank": v.get("rank"), "verdict": v.get("verdict"),
                            "reason": short(v.get("reason"), VERDICT_REASON_CHARS)}
                           for v in (m.verdicts or [])[:10] if isinstance(v, dict)]
    return row


def score_one(*, input: str, nodes: list[str], output: str | None, expected_output: str | None,  # noqa: A002
              metrics: list[Any], judge: str) -> dict[str, Any]:
    """One test case scored with ``metrics`` (built, with their judge), nothing written: per metric the score,
    pass or fail, the reason, and the per-node verdicts. ``judge``: its name as asked, shown when the run names
    none."""
    from ..cases.testcase import LLMTestCase  # noqa: PLC0415
    from ._evaluate import evaluate  # noqa: PLC0415

    try:
        case = LLMTestCase(input=input, actual_output=output, expected_output=expected_output,
                           retrieval_context=list(nodes))
    except (ContextJudgeError, TypeError, ValueError) as exc:
        raise ToolArgumentError(f"the test case is not valid: {exc}") from exc
    result = evaluate([case], metrics, show_progress=False)
    tr = result.test_results[0]
    return {"judge": ", ".join(result.judges()) or judge,
            "scores": [metric_row(m, verdicts=True) for m in tr.metrics_data],
            "error": short(tr.error, TEXT_CHARS)}


def builtin_check_path() -> str:
    """The labelled set that ships with the package (training/judge_check.py builds it)."""
    from importlib.resources import files  # noqa: PLC0415

    return str(files("contextjudge") / "data" / "judge_check.jsonl")


def embedded_beside(cases: Sequence[Any], judge: Any) -> dict[str, Any] | None:
    """The embedded judge's calibration report on the same labelled ``cases`` (``acalibrate``), to set beside
    ``judge``'s (``calibrate --builtin``); None when ``judge`` is the embedded judge itself (its stacked form,
    local-cross, is compared with it). Raises ``JudgeUnavailableError`` when the embedded judge cannot be built."""
    from .._aio import run_sync  # noqa: PLC0415
    from .._result import LOCAL_CROSS_JUDGE, is_embedded_judge  # noqa: PLC0415
    from ..judges import judge_name, resolve_model  # noqa: PLC0415
    from ._calibrate import acalibrate  # noqa: PLC0415

    name = judge_name(judge)
    if is_embedded_judge(name) and not name.startswith(LOCAL_CROSS_JUDGE):
        return None
    return run_sync(acalibrate(cases, resolve_model("local"), judge_spec="local"))


def judge_check(judge_model: Any, *, judge_spec: str | None, limit: int | None = None, show: int = 3
                ) -> dict[str, Any]:
    """``contextjudge calibrate --builtin``: the judge's agreement (accuracy, Cohen's kappa, TPR, TNR, with 95%
    intervals) with the labelled set that ships with contextjudge, per verdict family; ``limit``: N labelled
    cases drawn across the families and both labels (``stratified``; quicker, wider intervals); ``show``: the
    disagreements listed per family."""
    from .._aio import run_sync  # noqa: PLC0415
    from ..judges import FAMILIES  # noqa: PLC0415
    from ..stats import one_class  # noqa: PLC0415
    from ._calibrate import acalibrate, read_labels_file  # noqa: PLC0415

    cases = read_labels_file(builtin_check_path())
    total = len(cases)
    if limit is not None:
        cases = stratified(cases, limit)
    report = run_sync(acalibrate(cases, judge_model, judge_spec=judge_spec))
    families = {}
    for f in FAMILIES:
        if f not in report:
            continue
        r = report[f]
        families[f] = {k: r.get(k) for k in ("cases", "items", "base_rate", "accuracy", "accuracy_ci", "kappa",
                                             "kappa_ci", "tpr", "tpr_ci", "tnr", "tnr_ci", "confusion")}
        conf = r.get("confusion") or {}
        single = one_class(*(int(conf[k]) for k in ("tp", "fp", "fn", "tn"))) \
            if all(k in conf for k in ("tp", "fp", "fn", "tn")) else None
        if single:  # kappa is 0 or 1 by arithmetic on one class: not a figure to read
            families[f]["kappa"], families[f]["kappa_ci"] = None, None
            families[f]["kappa_note"] = f"n/a ({single})"
        families[f]["disagreements"] = [{"case": d.get("case"), "item": d.get("item"), "label": d.get("label"),
                                         "verdict": d.get("verdict"), "text": short(d.get("text"), 120)}
                                        for d in (r.get("disagreements") or [])[:show]]
        families[f]["disagreements_total"] = len(r.get("disagreements") or [])
    return {"judge": report.get("judge"), "labelled_cases": len(cases), "of": total, "families": families,
            "errors": len(report.get("errors") or []), "level": 0.95}


def stratified(cases: list[Any], limit: int) -> list[Any]:
    """``limit`` of the labelled ``cases``, drawn in turn from each stratum (the label fields a case carries, and
    whether its labels hold a yes, a no or both), in file order within each: a sample of every family and of both
    labels, where the first N of a file grouped by family would be one family's positives (kappa then means
    nothing)."""
    from ..cases.labels import LABEL_FIELDS, labels_of  # noqa: PLC0415

    strata: dict[tuple[Any, ...], list[Any]] = {}
    for tc in cases:
        labels = labels_of(tc) or {}
        fields = tuple(f for f in LABEL_FIELDS if labels.get(f))
        values = [bool(v) for f in fields for v in labels[f] if v is not None]
        strata.setdefault((fields, any(values), not all(values)), []).append(tc)
    queues = [list(reversed(q)) for q in strata.values()]
    out: list[Any] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop())
    return out

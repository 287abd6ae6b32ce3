"""The MCP server of ``contextjudge mcp``, on the official ``mcp`` SDK (``MCPServer``): each tool of ``_mcp_tools``
with its input schema (from the signature), its output schema (a pydantic model), its annotations (read-only,
destructive, idempotent, open world), run on a worker thread so a slow tool never stalls the session. A bad argument
is a tool error (``isError``, the protocol's way to let the model correct its call) whose text says what to pass;
nothing a tool raises ends the server. Imported only by ``contextjudge mcp``, so the CLI never needs the SDK."""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from ..errors import ContextJudgeError
from ._mcp_tools import Tools

__all__ = ["build_server"]

log = logging.getLogger("contextjudge.mcp")

INSTRUCTIONS = (
    "contextjudge scores the retrieval half of a RAG app (contextual precision, recall, relevancy, utilization) and "
    "keeps runs in a results store. To check whether a change made retrieval worse: `runs` (find the baseline), "
    "`evaluate_app` (run the goldens through the app, when allowed), `compare_runs` (paired differences with 95% "
    "intervals; 'worse' only when the whole interval is below zero), then `worst_cases` to read the judge's "
    "reasons. Never change the app's retriever just to please the judge: explain the worst cases to the user.")

_CURSOR = "pass the next_cursor of the previous answer to get the next items; leave out to start"
_BUDGET = "the answer's size in tokens (about 4 characters each); default and ceiling: the server's --max-tokens"


# ------------------------------------------------------------------------------------------------ output schemas
class Page(BaseModel):
    total: int = Field(description="items in all")
    offset: int = Field(description="index of the first item in this answer")
    next_cursor: str | None = Field(description="pass as cursor for the next items; null when none are left")


class MetricScore(BaseModel):
    metric: str
    score: float | None
    threshold: float | None
    success: bool
    reason: str | None
    error: str | None
    verdicts: list[dict[str, Any]] = Field(default_factory=list, description="per node: rank, verdict, reason")


class ScoreOut(BaseModel):
    judge: str
    scores: list[MetricScore]
    error: str | None


class RunsOut(Page):
    store: str
    runs: list[dict[str, Any]] = Field(description="run_id, name, status, created_at, finished_at, cases, results, "
                                                   "judges; newest first")


class MetricSummary(BaseModel):
    metric: str
    mean: float | None
    mean_ci: list[float] | None = Field(description="95% interval of the mean (Student t over cases)")
    pass_rate: float | None
    pass_rate_ci: list[float] | None = Field(description="95% Wilson interval of the pass rate")
    scored: int
    errors: int
    threshold: float | None
    gate: str = Field(description="'pass', or 'fail: ' and why")
    corrected: dict[str, Any] | None = Field(default=None, description="the bias-corrected mean from the cases with "
                                                                       "gold labels, when some have them")


class RunSummaryOut(BaseModel):
    run_id: str
    name: str | None
    status: str
    created_at: str | None
    cases: int
    cases_with_errors: int
    judges: list[str]
    metrics: list[MetricSummary]
    usage: dict[str, int]


class WorstCasesOut(Page):
    run_id: str
    metrics: list[str]
    cases: list[dict[str, Any]] = Field(description="lowest score first (errors first): case_key, index, metric, "
                                                    "score, threshold, success, reason, error, input, "
                                                    "actual_output, expected_output, nodes (rank, text, verdict, "
                                                    "reason; shortened), nodes_total")


class MetricDelta(BaseModel):
    metric: str
    baseline_mean: float | None
    current_mean: float | None
    difference: float | None = Field(description="mean of (run - baseline) over the paired cases")
    ci: list[float] | None = Field(description="95% paired-t interval of the difference")
    pairs: int
    reading: str = Field(description="better, worse, no clear change, or no shared cases")
    significantly_worse: bool
    changed_cases: list[dict[str, Any]]


class CompareOut(BaseModel):
    run_id: str
    baseline_id: str
    paired_by: str
    level: float
    metrics: list[MetricDelta]
    worse_on: list[str]
    regression: bool
    goldens: dict[str, dict[str, Any] | None] = Field(
        description="the golden set each run ran ({name, hash}; null where a run recorded none)")
    note: str | None = Field(default=None, description="said when runs on different golden sets were compared "
                                                         "(allow_different_goldens)")


class TrendOut(Page):
    by: str
    at: str
    min_cases: int
    metrics: list[str]
    judge_changes: list[dict[str, Any]] = Field(description="where the judge changed: scores across are not "
                                                            "comparable")
    windows: list[dict[str, Any]] = Field(description="newest first: label, start, end, and per metric n, mean, "
                                                      "pass_rate (with intervals), errors, judges")
    drop_check: dict[str, Any] | None = None


class EstimateOut(BaseModel):
    model: str
    cases: int
    sample_rate: float
    metrics: list[str]
    calls: float = Field(description="judge calls for the cases at the sample rate")
    input_tokens: float
    output_tokens: float
    total_tokens: float
    dollars: float | None = Field(description="null when the judge's price is not known (see why)")
    why: str | None = None
    per_case: dict[str, Any] = Field(default_factory=dict)
    per_metric: dict[str, Any] = Field(default_factory=dict)
    per_day: dict[str, Any] | None = None
    assumptions: list[Any] = Field(default_factory=list)


class JudgeCheckOut(BaseModel):
    judge: str | None
    labelled_cases: int
    of: int
    families: dict[str, dict[str, Any]] = Field(description="per verdict family: accuracy, kappa, tpr, tnr with "
                                                            "95% intervals, confusion, a few disagreements")
    errors: int
    level: float


class EvaluateAppOut(BaseModel):
    app: str
    goldens: str
    run_id: str
    exit_code: int = Field(description="as `contextjudge eval`: 0 pass, 1 gate failed, 3 case errors")
    verdict: str
    gate_passed: bool
    report: str = Field(description="path of the HTML report")
    summary: RunSummaryOut
    next: str


# ------------------------------------------------------------------------------------------------ the server
def _annotations(title: str, *, read_only: bool = True, destructive: bool = False, idempotent: bool = True,
                 open_world: bool = False) -> ToolAnnotations:
    return ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                           idempotent_hint=idempotent, open_world_hint=open_world)


async def _call(fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)`` on a worker thread; its argument errors become tool errors that say what to pass, and any
    other failure a tool error naming it (the server goes on)."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs))
    except ContextJudgeError as exc:
        raise ToolError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - one tool's failure never ends the server
        log.exception("contextjudge mcp: %s failed", getattr(fn, "__name__", fn))
        raise ToolError(f"{type(exc).__name__}: {exc} (the server's stderr has the traceback)") from exc


def build_server(tools: Tools) -> MCPServer:
    """The MCP server whose tools are ``tools``'."""
    from .. import __version__  # noqa: PLC0415

    server: MCPServer = MCPServer("contextjudge", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    ro = _annotations

    @server.tool(annotations=ro("Score one test case", open_world=True))  # a hosted judge when one is named
    async def score(
        input: Annotated[str, Field(description="the user's question")],  # noqa: A002
        nodes: Annotated[list[str], Field(description="the retrieved texts, best-ranked first")],
        output: Annotated[str | None, Field(description="the app's answer (for context_utilization)")] = None,
        expected_output: Annotated[str | None, Field(description="the reference answer (for precision, recall)")]
        = None,
        metrics: Annotated[list[str] | None, Field(description="metric keys, e.g. contextual_precision, recall, "
                                                               "relevancy, utilization; default: those the given "
                                                               "fields allow")] = None,
        judge: Annotated[str, Field(description="'local' (embedded offline judge, default), 'fake', or a model "
                                                "name/provider:model (billed)")] = "local",
        threshold: Annotated[float | None, Field(description="pass mark 0-1 for every metric")] = None,
    ) -> ScoreOut:
        """Score one RAG test case (question, retrieved nodes, answer, expected answer): per metric the score,
        pass/fail, the judge's reason and per-node verdicts. Writes nothing."""
        return ScoreOut(**await _call(tools.score, input=input, nodes=nodes, output=output,
                                      expected_output=expected_output, metrics=metrics, judge=judge,
                                      threshold=threshold))

    @server.tool(annotations=ro("List runs"))
    async def runs(cursor: Annotated[str | None, Field(description=_CURSOR)] = None,
                   max_tokens: Annotated[int | None, Field(description=_BUDGET)] = None) -> RunsOut:
        """The runs in this server's results store, newest first (id, name, status, cases, results, judges)."""
        return RunsOut(**await _call(tools.runs, cursor=cursor, max_tokens=max_tokens))

    @server.tool(annotations=ro("Summary of a run"))
    async def run_summary(run: Annotated[str | None, Field(description="run id, name or id prefix; default: "
                                                                       "the latest")] = None) -> RunSummaryOut:
        """Per metric of a stored run: mean and pass rate with 95% intervals, errors, threshold and gate."""
        return RunSummaryOut(**await _call(tools.run_summary, run=run))

    @server.tool(annotations=ro("Worst cases of a run"))
    async def worst_cases(
        run: Annotated[str | None, Field(description="run id, name or id prefix; default: the latest")] = None,
        metric: Annotated[str | None, Field(description="only this metric (name or key); default: all")] = None,
        cursor: Annotated[str | None, Field(description=_CURSOR)] = None,
        max_tokens: Annotated[int | None, Field(description=_BUDGET)] = None,
    ) -> WorstCasesOut:
        """The lowest-scoring (case, metric) results of a run, lowest first, with the judge's reason, the case's
        question, answer and expected answer, and its ranked nodes with verdicts (texts shortened)."""
        return WorstCasesOut(**await _call(tools.worst_cases, run=run, metric=metric, cursor=cursor,
                                           max_tokens=max_tokens))

    @server.tool(annotations=ro("Compare two runs"))
    async def compare_runs(
        baseline: Annotated[str, Field(description="the run before the change: id, name or id prefix")],
        run: Annotated[str | None, Field(description="the run after it; default: the latest")] = None,
        top: Annotated[int, Field(description="changed cases listed per metric (0-20)")] = 5,
        allow_different_goldens: Annotated[bool, Field(
            description="compare runs made on different golden sets (refused by default: a difference could come "
                        "from the changed questions, not from the app)")] = False,
    ) -> CompareOut:
        """Did a change make retrieval worse? Per metric the paired difference (run - baseline) with its 95%
        paired-t interval and a reading ('worse' only when the whole interval is below zero), and the cases that
        changed most. Runs made on different golden sets are refused unless allow_different_goldens."""
        return CompareOut(**await _call(tools.compare_runs, baseline=baseline, run=run, top=top,
                                        allow_different_goldens=allow_different_goldens))

    @server.tool(annotations=ro("Scores over time"))
    async def trend(
        by: Annotated[str, Field(description="'hour', 'day' or 'week'")] = "day",
        since: Annotated[str | None, Field(description="ISO date/time or a span back such as 14d")] = None,
        until: Annotated[str | None, Field(description="same forms; default now")] = None,
        metric: Annotated[list[str] | None, Field(description="only these metric names")] = None,
        where: Annotated[dict[str, str] | None, Field(description="filters: retriever, tag, run, or a metadata "
                                                                  "key")] = None,
        min_cases: Annotated[int, Field(description="judged cases a window needs for a mean")] = 10,
        check_drop: Annotated[bool, Field(description="also test the latest window against the baseline")] = False,
        baseline: Annotated[str, Field(description="previous, last-week, or 'window N'")] = "previous",
        cursor: Annotated[str | None, Field(description=_CURSOR)] = None,
        max_tokens: Annotated[int | None, Field(description=_BUDGET)] = None,
    ) -> TrendOut:
        """Per hour/day/week window (newest first) and metric, across every run of the store: mean and pass rate
        with 95% intervals; with check_drop, whether the latest window dropped significantly."""
        return TrendOut(**await _call(tools.trend, by=by, since=since, until=until, metric=metric, where=where,
                                      min_cases=min_cases, check_drop=check_drop, baseline=baseline, cursor=cursor,
                                      max_tokens=max_tokens))

    @server.tool(annotations=ro("Estimate judging cost"))
    async def estimate(
        model: Annotated[str, Field(description="the judge to price, e.g. gpt-4o-mini or local (never called)")],
        goldens: Annotated[str | None, Field(description="a goldens file, relative to the server's folder")] = None,
        run: Annotated[str | None, Field(description="or a stored run's id or name")] = None,
        metrics: Annotated[list[str] | None, Field(description="metric keys; default the four retrieval "
                                                               "metrics")] = None,
        sample_rate: Annotated[float, Field(description="share of cases judged, 0-1")] = 1.0,
        requests_per_day: Annotated[float | None, Field(description="traffic, for the cost per day")] = None,
    ) -> EstimateOut:
        """Judge calls, input/output tokens and dollars that judging would cost, before anything is judged."""
        return EstimateOut(**await _call(tools.estimate, model=model, goldens=goldens, run=run, metrics=metrics,
                                sample_rate=sample_rate, requests_per_day=requests_per_day))

    @server.tool(annotations=ro("Check a judge against labels", open_world=True))
    async def judge_check(
        judge: Annotated[str, Field(description="'local' (default) or a model name (billed per call)")] = "local",
        limit: Annotated[int | None, Field(description="only the first N labelled cases (quicker)")] = None,
        show: Annotated[int, Field(description="disagreements listed per family (0-20)")] = 3,
    ) -> JudgeCheckOut:
        """How far a judge agrees with the labelled set that ships with contextjudge (accuracy, Cohen's kappa,
        TPR, TNR with 95% intervals, per verdict family): `contextjudge calibrate --builtin`."""
        return JudgeCheckOut(**await _call(tools.judge_check, judge=judge, limit=limit, show=show))

    @server.tool(annotations=_annotations("Evaluate the app on goldens", read_only=False, destructive=False,
                                          idempotent=False, open_world=True))
    async def evaluate_app(
        goldens: Annotated[str, Field(description="JSONL/CSV goldens file, relative to the server's folder")],
        app: Annotated[str | None, Field(description="MODULE:OBJECT inside the module the server allows; default: "
                                                     "the --allow-app value")] = None,
        metrics: Annotated[list[str] | None, Field(description="metric keys; default the four")] = None,
        judge: Annotated[str, Field(description="'local' (default), 'fake', or a model (billed)")] = "local",
        threshold: Annotated[float | None, Field(description="pass mark 0-1 for every metric")] = None,
        min_pass_rate: Annotated[float | None, Field(description="also require this share of cases to pass")]
        = None,
        allow_errors: Annotated[bool, Field(description="gate on scored cases only")] = False,
        report: Annotated[str | None, Field(description="HTML report path inside the server's folder")] = None,
        timeout_s: Annotated[float, Field(description="seconds the run may take")] = 900.0,
    ) -> EvaluateAppOut:
        """Run `contextjudge eval --app` on a goldens file (runs the user's app code, in a fresh process: only when
        the server was started with --allow-app MODULE, and only that module): the run's summary, the gate's
        verdict and the report's path. The run is stored in this server's store."""
        return EvaluateAppOut(**await _call(tools.evaluate_app, goldens=goldens, app=app, metrics=metrics,
                                            judge=judge, threshold=threshold, min_pass_rate=min_pass_rate,
                                            allow_errors=allow_errors, report=report, timeout_s=timeout_s))

    return server

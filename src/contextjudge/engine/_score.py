"""``score_case``: one test case, scored with a set of metrics inside a run. The one place a case is scored.

It picks the metrics that apply to the case's kind, runs their ``a_score`` concurrently, turns a case the metric
cannot score into a result with its error (or skips it, when asked), turns any other failure into a result with
its error (one bad metric never aborts the rest), reuses results the run already has in its store, sets each
result's ``gold_score`` when the case carries gold labels for its metric (``cases/labels.py``), and writes every
new result to the run's store. A metric refused by the run's judge budget (``BudgetExhaustedError``) gives an error
result that says when judging resumes, or, with ``budget="raise"`` (capture and the worker, which skip and count
such cases), makes the case raise once its other metrics have finished. ``score_within_budget`` is the one budget-skip
policy of the drivers that skip and count such cases (capture and the worker). ``fill_gold_scores`` does the last for
results read back from a store, whose cases were labelled after they were scored (``contextjudge label``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._aio import in_store_thread
from .._result import MetricResult
from ..cases.provenance import app_error_of, no_retrieval_of, short
from ..cases.testcase import ConversationalTestCase
from ..errors import BudgetExhaustedError, InvalidTestCaseError, MissingTestCaseParamsError
from ..metrics import fill_gold_scores, gold_score_of  # re-exported: they lived here until 0.3
from ._run import Run

__all__ = ["BudgetMode", "BudgetSkip", "MissingParams", "applicable", "fill_gold_scores", "gold_score_of",
           "missing_message", "score_case", "score_within_budget"]

logger = logging.getLogger("contextjudge")

MissingParams = Literal["record", "skip", "skip-noted"]
BudgetMode = Literal["record", "raise"]
BUDGET_ERROR = "BudgetExhaustedError"


NO_METRIC_APPLIES = ("no metric applies to this test case (single-turn metrics need LLMTestCase, Turn* metrics need "
                     "ConversationalTestCase)")
"""A test case's error when none of the run's metrics scores its kind (``applicable`` found none)."""


def applicable(metrics: Sequence[Any], test_case: Any) -> list[Any]:
    """The metrics that score this kind of case: single-turn ones for LLMTestCase, Turn* ones for conversations."""
    conv = isinstance(test_case, ConversationalTestCase)
    return [m for m in metrics if bool(getattr(m, "conversational", False)) == conv]


def _error_result(metric: Any, exc: BaseException, message: str | None = None) -> MetricResult:
    return MetricResult(name=metric.name, score=None, threshold=getattr(metric, "threshold", 0.5), success=False,
                        strict_mode=bool(getattr(metric, "strict_mode", False)),
                        error=message if message is not None else str(exc), error_type=type(exc).__name__)


def missing_message(metric: Any, exc: MissingTestCaseParamsError, test_case: Any) -> str:
    """What a metric that cannot run on ``test_case`` says: which field is missing, why, and what to do."""
    fields = list(getattr(exc, "fields", []) or [])
    name = getattr(metric, "name", type(metric).__name__)
    said = []
    for f in fields:
        if f == "expected_output":
            said.append(f"{name} needs an expected_output, and no golden matched this input "
                        f"({short(getattr(test_case, 'input', ''), 60)!r}): pass goldens whose input matches it, "
                        "or set golden_id in the call's metadata, or set expected_output on the test case")
        elif f in ("retrieval_context", "turns[].retrieval_context") and no_retrieval_of(test_case):
            said.append(f"{name} needs the retrieved nodes: {no_retrieval_of(test_case)}")
        elif f in ("retrieval_context", "turns[].retrieval_context"):
            said.append(f"{name} needs the retrieved nodes, and this case has none (retrieval_context is None): "
                        "check that the app's retriever ran and was captured")
        elif f == "expected_outcome":
            said.append(f"{name} needs an expected_outcome for this conversation: pass goldens with "
                        "expected_outcome and set golden_id, or set expected_outcome on the test case")
        elif f == "actual_output":
            said.append(f"{name} needs the app's answer (actual_output), and this case has none: capture the "
                        "whole chain or engine, not only its retriever")
    if not said:
        return str(exc)
    return "; ".join(said) + "."


def _check_budget(run: Run, metrics: Sequence[Any]) -> None:
    """Refuse a dollar budget on a judge with no known price and no token limit before anything is judged."""
    ctx = run.context
    if ctx.options.budget is None:
        return
    judges = []
    for m in metrics:
        if getattr(m, "needs_judge", True) is False:
            continue
        try:
            judges.append(ctx.judge_for(m))
        except Exception:  # noqa: BLE001 - a judge that cannot load says so when its metric runs
            continue
    ctx.check_budget(judges)


async def score_case(run: Run, key: str, test_case: Any, metrics: Sequence[Any], *,
                     missing: MissingParams = "record", raise_exceptions: bool = False,
                     budget: BudgetMode = "record") -> list[MetricResult] | None:
    """Score ``test_case`` (known in ``run`` as ``key``) with every metric of ``metrics`` that applies to it.

    Returns the results in the order of ``metrics``, or None when no metric applies to the case's kind. A metric
    the case lacks a field for gives a result with an error that says what to do (``missing="record"``, the default
    everywhere contextjudge runs cases), or nothing (``"skip"``, DeepEval's ``skip_on_missing_params``; with
    ``"skip-noted"`` the skip is logged once per metric and field in the run). A case whose golden made the app
    raise (``provenance.APP_ERROR_KEY``) gives an error result for every metric. ``raise_exceptions`` lets a failure
    propagate instead of becoming a result.

    ``budget``: what a metric whose judge call the run's budget refused gives (``JudgeOptions.budget``): a result
    with error type ``BudgetExhaustedError`` whose message says when judging resumes (``"record"``), or nothing: the
    case raises ``BudgetExhaustedError`` once the other metrics have finished, and no result of the refused metrics is
    saved (``"raise"``, for callers that skip and count such cases). A dollar budget on a judge with no known price
    and no token limit raises ``ConfigurationError`` before anything is judged.
    """
    todo = applicable(metrics, test_case)
    if not todo:
        return None
    _check_budget(run, todo)
    app_error = app_error_of(test_case)
    refused: list[str] = []

    async def one(metric: Any) -> MetricResult | None:
        prior = run.completed.get((key, metric.name))
        if prior is not None:
            return prior
        if app_error is not None:
            result = MetricResult(
                name=metric.name, score=None, threshold=getattr(metric, "threshold", 0.5), success=False,
                strict_mode=bool(getattr(metric, "strict_mode", False)), error_type="AppError",
                error=f"the app raised {app_error.get('type')} on this golden: {app_error.get('message')}. "
                      "Fix the app (or the golden) and run again.")
            await run.asave_result(key, result)
            return result
        try:
            result = await metric.a_score(test_case)
        except MissingTestCaseParamsError as exc:
            if raise_exceptions:
                raise
            if missing == "record":
                result = _error_result(metric, exc, missing_message(metric, exc, test_case))
                await run.asave_result(key, result)
                return result
            if missing == "skip-noted":
                noted = (metric.name, ",".join(exc.fields))
                if noted not in run.noted_skips:
                    run.noted_skips.add(noted)
                    logger.info("contextjudge: %s skipped on cases that lack %s (pass goldens to fill "
                                "expected_output).", metric.name, ", ".join(exc.fields))
            return None
        except InvalidTestCaseError as exc:
            if raise_exceptions:
                raise
            result = _error_result(metric, exc)
        except BudgetExhaustedError as exc:
            result = _error_result(metric, exc)
        except Exception as exc:  # noqa: BLE001 - one bad metric never aborts a run
            if raise_exceptions:
                raise
            logger.exception("contextjudge: %s failed on case %s", metric.name, key)
            result = _error_result(metric, exc, f"{type(exc).__name__}: {exc}")
        if result.error_type == BUDGET_ERROR and budget == "raise":
            refused.append(result.error or "the judge budget is spent")
            return None
        if result.score is not None and result.gold_score is None:
            result.gold_score = gold_score_of(metric.name, test_case, bool(result.strict_mode))
        await run.asave_result(key, result)
        return result

    results = await asyncio.gather(*(one(m) for m in todo))
    if refused:
        spent = run.context.options.budget
        raise BudgetExhaustedError(refused[0], scope=f"budget:{spent.name}" if spent is not None else None,
                                   resumes_at=run.context.budget_blocked())
    return [r for r in results if r is not None]


@dataclass(frozen=True)
class BudgetSkip:
    """A case the judge budget set aside, unjudged: when judging resumes (None: not known), the budget's scope
    (``"budget:NAME"``), and whether a judge call of the case was refused (``refused``: the budget's ledger has
    warned already) rather than the window being found spent before the case began."""

    resumes_at: float | None
    scope: str | None = None
    refused: bool = False


async def score_within_budget(run: Run, key: str, test_case: Any, metrics: Sequence[Any], *,
                              before: Callable[[], Any] | None = None, missing: MissingParams = "record",
                              ) -> list[MetricResult] | BudgetSkip | None:
    """Score a case unless the run's judge budget is spent: the one budget-skip policy of the drivers that set such
    cases aside and count them (capture, the worker), where ``evaluate`` records an error result instead.

    A case is not begun while the budget's window is spent (no store write, no judge call): a ``BudgetSkip`` saying
    when judging resumes. Else ``before`` runs (a function or coroutine function: the driver's own store write) and
    the case is scored (``score_case(budget="raise")``); a judge call the budget refuses meanwhile sets the whole case
    aside (``BudgetSkip(refused=True)``), with no result of the refused metrics saved. Otherwise the results, as
    ``score_case`` gives them (None: no metric applies).
    """
    # a budget's windows may be rows of the store: read in the store's threads, never on the loop (with no budget
    # nothing is read)
    ctx = run.context
    resumes = await in_store_thread(ctx.budget_blocked) if ctx.options.budget is not None else ctx.budget_blocked()
    if resumes is not None:
        return BudgetSkip(resumes)
    if before is not None:
        out = before()
        if inspect.isawaitable(out):
            await out
    try:
        return await score_case(run, key, test_case, metrics, missing=missing, budget="raise")
    except BudgetExhaustedError as exc:
        return BudgetSkip(exc.resumes_at, exc.scope, refused=True)

"""``score_case``: one test case, scored with a set of metrics inside a run. The one place a case is scored.

It picks the metrics that apply to the case's kind, runs their ``a_score`` concurrently, turns a case the metric
cannot score into a result with its error (or skips it, when asked), turns any other failure into a result with
its error (one bad metric never aborts the rest), reuses results the run already has in its store, sets each
result's ``gold_score`` when the case carries gold labels for its metric (``cases/labels.py``), and writes every
new result to the run's store. A metric refused by the run's judge budget (``BudgetExhaustedError``) gives an error
result that says when judging resumes, or, with ``budget="raise"`` (capture and the worker, which skip and count
such cases), makes the case raise once its other metrics have finished. ``fill_gold_scores`` does the last for results read back from a store, whose cases
were labelled after they were scored (``contextjudge label``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal, Sequence

from .._result import MetricResult
from ..cases.labels import labels_of
from ..cases.provenance import app_error_of, no_retrieval_of, short
from ..cases.testcase import ConversationalTestCase
from ..errors import BudgetExhaustedError, InvalidTestCaseError, MissingTestCaseParamsError
from .run import Run

__all__ = ["BudgetMode", "MissingParams", "applicable", "fill_gold_scores", "gold_score_of", "missing_message", "score_case"]

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


def gold_score_of(metric_name: str, test_case: Any, strict_mode: bool = False) -> float | None:
    """The score ``test_case``'s gold labels give for ``metric_name``, or None (no labels for it, or labels that do
    not fit the case: the calibrate command reports those; a run only leaves the case out of the correction).

    ``strict_mode``: the metric's strict mode, which scores 1 or 0; the gold score is made 1 or 0 the same way, so
    the bias-corrected mean and the judge's bias compare like with like (a 0/1 judged score against a fractional
    gold one would count the strictness as the judge's bias)."""
    try:
        labels = labels_of(test_case)
    except Exception:  # noqa: BLE001 - a malformed label must not fail a run: the case simply counts as unlabelled
        logger.warning("contextjudge: the gold labels of case %r cannot be read; it counts as unlabelled.",
                       short(getattr(test_case, "input", "") or "", 60))
        return None
    if not labels:
        return None
    try:
        from ..metrics.gold import gold_score  # noqa: PLC0415 - metrics/gold.py holds the metrics' own formulas
    except ImportError:  # pragma: no cover - only before metrics/gold.py exists
        return None
    try:
        value = gold_score(metric_name, test_case, labels)
    except Exception as exc:  # noqa: BLE001 - e.g. a labels count that is not the nodes count
        logger.warning("contextjudge: %s: the case's gold labels give no score (%s); it counts as unlabelled.",
                       metric_name, exc)
        return None
    if value is None:
        return None
    return (1.0 if value >= 1.0 - 1e-9 else 0.0) if strict_mode else float(value)


def fill_gold_scores(result: Any) -> Any:
    """Set ``gold_score`` on every scored result of ``result`` (an EvaluationResult with its per-case results) whose
    case carries gold labels for that metric and that has none yet; returns ``result``."""
    for tr in getattr(result, "test_results", None) or []:
        if _labels_or_none(tr.test_case) is None:
            continue
        for m in tr.metrics_data:
            if m.score is not None and m.gold_score is None:
                m.gold_score = gold_score_of(m.name, tr.test_case, bool(m.strict_mode))
    return result


def _labels_or_none(test_case: Any) -> dict[str, Any] | None:
    try:
        return labels_of(test_case)
    except Exception:  # noqa: BLE001
        return None


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

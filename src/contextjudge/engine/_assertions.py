"""``assert_test``: fail a test when a retrieval metric scores below its threshold.

    from contextjudge import assert_test
    from contextjudge.metrics import ContextualPrecisionMetric

    def test_refund_question():
        assert_test(LLMTestCase(...), [ContextualPrecisionMetric(threshold=0.7)])

Inside pytest with the contextjudge plugin options (``--contextjudge-model``, ``--contextjudge-store``), metrics
built without a model use the configured judge and results are written to the configured store.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._result import EvaluationResult, MetricResult
from ..cases.testcase import ConversationalTestCase, LLMTestCase
from ..errors import ConfigurationError
from ._evaluate import evaluate

if TYPE_CHECKING:
    import os

    from ..store import RunWrites

__all__ = ["assert_test", "format_failures"]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def format_failures(failures: Sequence[MetricResult]) -> str:
    """One line per failing metric: its score against its threshold, and why."""
    __tracebackhide__ = True
    lines = []
    for m in failures:
        if m.error:
            lines.append(f"  - {m.name}: error (threshold {_fmt(m.threshold)}): {m.error}")
        else:
            op = "!=" if m.strict_mode else "<"
            lines.append(f"  - {m.name}: score {_fmt(m.score)} {op} threshold {_fmt(m.threshold)}"
                         + (f": {m.reason}" if m.reason else ""))
    return "\n".join(lines)


def assert_test(
    test_case: LLMTestCase | ConversationalTestCase,
    metrics: Sequence[Any],
    *,
    store: RunWrites | str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    model: Any = None,
    **evaluate_kwargs: Any,
) -> EvaluationResult:
    """Score ``test_case`` with ``metrics`` and raise ``AssertionError`` unless every metric passes.

    The message lists each failing metric's score, threshold and reason (or its error). ``model`` is used by metrics
    built without one. ``store``/``run_id`` keep the results. Under pytest with the contextjudge plugin configured,
    ``model`` and ``store`` default to ``--contextjudge-model`` and ``--contextjudge-store``. Returns the
    ``EvaluationResult`` when everything passes. Its own frames are hidden from pytest's tracebacks: a failure
    points at the test that called it.
    """
    __tracebackhide__ = True
    if not metrics:
        raise ConfigurationError("assert_test() needs at least one metric, e.g. [ContextualPrecisionMetric()].")
    session = _pytest_session()
    if session is not None:
        if model is None:
            model = session.model_arg
        if store is None and run_id is None and session.store_target:
            evaluate_kwargs.setdefault("run", session.run)  # one run per pytest session, ended at its end
    evaluate_kwargs.setdefault("show_progress", False)
    result = evaluate([test_case], metrics, store=store, run_id=run_id, model=model, **evaluate_kwargs)
    if session is not None:
        session.record(result)
    tr = result.test_results[0]
    failures = [m for m in tr.metrics_data if not m.success]
    if session is not None and getattr(session, "gates_on_pass_rate", False):
        failures = [m for m in failures if m.error]  # below-threshold cases count in the session's pass-rate gate
    if tr.error and not tr.metrics_data:
        raise AssertionError(f"contextjudge: the test case could not be scored: {tr.error}")
    if failures:
        what = getattr(test_case, "name", None) or getattr(test_case, "input", None) or "conversation"
        shown = what if len(what) <= 80 else what[:77] + "..."
        raise AssertionError(f"{len(failures)} of {len(tr.metrics_data)} metrics failed for {shown!r}:\n"
                             + format_failures(failures))
    return result


def _pytest_session() -> Any:
    __tracebackhide__ = True
    plugin = sys.modules.get("contextjudge.pytest_plugin")  # loaded by pytest only; never imported from here
    return None if plugin is None else plugin.current_session()

"""DeepEval's spelling of the contextjudge API: ``from contextjudge.compat.deepeval import evaluate, ...``.

The submodules ``test_case``, ``metrics``, ``tracing`` and ``dataset`` mirror ``deepeval.test_case``,
``deepeval.metrics``, ``deepeval.tracing`` and ``deepeval.dataset``, so
``from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric`` works too. Test cases accept
DeepEval's extra fields (tools_called, chatbot_role, ...) and ignore them. ``evaluate`` accepts DeepEval's
config objects (async_config, display_config, ...) and maps what applies.
"""

from __future__ import annotations

from typing import Any

from ..._result import EvaluationResult
from ...engine.evaluate import evaluate as _evaluate
from .metrics import *  # noqa: F403
from .metrics import __all__ as _metric_names
from .dataset import Golden
from .test_case import ConversationalTestCase, LLMTestCase, LLMTestCaseParams, MLLMImage, MLLMTestCase, Turn
from .tracing import observe, update_current_span, update_current_trace

__all__ = sorted(["ConversationalTestCase", "Golden", "LLMTestCase", "LLMTestCaseParams", "MLLMImage", "MLLMTestCase",
                  "Turn", "assert_test", "evaluate", "observe", "update_current_span", "update_current_trace",
                  *_metric_names])


def evaluate(test_cases: list[Any] | None = None, metrics: list[Any] | None = None, *, async_config: Any = None,
             display_config: Any = None, error_config: Any = None, cache_config: Any = None, hyperparameters: Any = None,
             identifier: Any = None, **kwargs: Any) -> EvaluationResult:
    """DeepEval's ``evaluate(test_cases=, metrics=)``, or ``evaluate(observed_callback=app, goldens=[...])`` for
    component-level evaluation; its config objects are read where they apply."""
    if async_config is not None and getattr(async_config, "max_concurrent", None):
        kwargs.setdefault("max_concurrency", async_config.max_concurrent)
    if display_config is not None and getattr(display_config, "show_indicator", None) is False:
        kwargs.setdefault("show_progress", False)
    if error_config is not None:
        if getattr(error_config, "skip_on_missing_params", False):
            kwargs.setdefault("skip_on_missing_params", True)
    if identifier is not None:
        kwargs.setdefault("run_name", str(identifier))
    return _evaluate(test_cases=test_cases, metrics=metrics, **kwargs)


def assert_test(test_case: Any, metrics: list[Any], **kwargs: Any) -> None:
    """DeepEval's ``assert_test``: raises AssertionError listing each failing metric."""
    from ...engine.assertions import assert_test as _assert  # noqa: PLC0415 - lives with the pytest tooling

    _assert(test_case, metrics, **kwargs)

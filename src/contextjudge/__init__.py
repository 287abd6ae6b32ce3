"""contextjudge: score the retrieval half of RAG apps inside LangChain and LlamaIndex.

    from contextjudge import evaluate, LLMTestCase
    from contextjudge.metrics import ContextualPrecisionMetric

    case = LLMTestCase(input="...", actual_output="...", expected_output="...", retrieval_context=["...", "..."])
    result = evaluate([case], [ContextualPrecisionMetric(model="local")])

Names are loaded on first use, so ``import contextjudge`` (and the pytest plugin, which every pytest session of
an environment with contextjudge installed loads) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# public name -> the private module that defines it
_EXPORTS = {
    "JUDGE_TAG": ".judges.context",
    "RunContext": ".judges.context",
    "resolve_model": ".judges.models",
    "EvaluationResult": "._result",
    "MetricResult": "._result",
    "TestResult": "._result",
    "Usage": "._result",
    "JudgeOptions": ".judges.options",
    "Budget": ".judges.spend",
    "RateLimit": ".judges.spend",
    "register_prices": ".judges.spend",
    "estimate": ".engine.estimate",
    "BudgetExhaustedError": ".errors",
    "EvaluationOptions": ".engine.evaluate",
    "aevaluate": ".engine.evaluate",
    "evaluate": ".engine.evaluate",
    "ConversationalTestCase": ".cases.testcase",
    "LLMTestCase": ".cases.testcase",
    "RetrievedNode": ".cases.testcase",
    "Turn": ".cases.testcase",
    "CaptureError": ".errors",
    "ConfigurationError": ".errors",
    "ConfigurationTypeError": ".errors",
    "ContextJudgeError": ".errors",
    "InvalidTestCaseError": ".errors",
    "JudgeChoiceWarning": ".errors",
    "JudgeError": ".errors",
    "JudgeOutputError": ".errors",
    "JudgeResponseError": ".errors",
    "JudgeUnavailableError": ".errors",
    "MetricNotFoundError": ".errors",
    "MissingTestCaseParamsError": ".errors",
    "StoreError": ".errors",
    "SyncCallOnLoopError": ".errors",
    "UsageError": ".errors",
    "Golden": ".cases.goldens",
    "MLLMImage": ".cases.images",
    "assert_test": ".engine.assertions",
    "observe": ".tracing",
    "open_store": ".store",
    "update_current_span": ".tracing",
    "update_current_trace": ".tracing",
}

__all__ = sorted(_EXPORTS, key=lambda n: (not n.isupper(), not n[0].isupper(), n))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'contextjudge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .engine.assertions import assert_test
    from .judges.context import JUDGE_TAG, RunContext
    from .judges.models import resolve_model
    from ._result import EvaluationResult, MetricResult, TestResult, Usage
    from .judges.options import JudgeOptions
    from .judges.spend import Budget, RateLimit, register_prices
    from .engine.estimate import estimate
    from .engine.evaluate import EvaluationOptions, aevaluate, evaluate
    from .cases.testcase import ConversationalTestCase, LLMTestCase, RetrievedNode, Turn
    from .errors import (
        BudgetExhaustedError,
        CaptureError,
        ConfigurationError,
        ConfigurationTypeError,
        ContextJudgeError,
        InvalidTestCaseError,
        JudgeChoiceWarning,
        JudgeError,
        JudgeOutputError,
        JudgeResponseError,
        JudgeUnavailableError,
        MetricNotFoundError,
        MissingTestCaseParamsError,
        StoreError,
        SyncCallOnLoopError,
        UsageError,
    )
    from .cases.goldens import Golden
    from .cases.images import MLLMImage
    from .store import open_store
    from .tracing import observe, update_current_span, update_current_trace

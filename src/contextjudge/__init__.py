"""contextjudge: score the retrieval half of RAG apps inside LangChain and LlamaIndex.

    from contextjudge import evaluate, LLMTestCase
    from contextjudge.metrics import ContextualPrecisionMetric

    case = LLMTestCase(input="...", actual_output="...", expected_output="...", retrieval_context=["...", "..."])
    result = evaluate([case], [ContextualPrecisionMetric(model="local")])

Names are loaded on first use, so ``import contextjudge`` (and the pytest plugin, which every pytest session of
an environment with contextjudge installed loads) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_door
from ._version import __version__

# public name -> the module (or room door) that gives it
_EXPORTS = {
    "EvaluationResult": "._result",
    "MetricResult": "._result",
    "TestResult": "._result",
    "Usage": "._result",
    "JudgeOptions": ".judges",
    "Budget": ".judges",
    "RateLimit": ".judges",
    "register_prices": ".judges",
    "estimate": ".engine",
    "BudgetExhaustedError": ".errors",
    "EvaluationOptions": ".engine",
    "aevaluate": ".engine",
    "evaluate": ".engine",
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
    "assert_test": ".engine",
    "observe": "._tracing",
    "open_store": ".store",
    "update_current_span": "._tracing",
    "update_current_trace": "._tracing",
}

__all__ = [
    "Budget",
    "BudgetExhaustedError",
    "CaptureError",
    "ConfigurationError",
    "ConfigurationTypeError",
    "ContextJudgeError",
    "ConversationalTestCase",
    "EvaluationOptions",
    "EvaluationResult",
    "Golden",
    "InvalidTestCaseError",
    "JudgeChoiceWarning",
    "JudgeError",
    "JudgeOptions",
    "JudgeOutputError",
    "JudgeResponseError",
    "JudgeUnavailableError",
    "LLMTestCase",
    "MLLMImage",
    "MetricNotFoundError",
    "MetricResult",
    "MissingTestCaseParamsError",
    "RateLimit",
    "RetrievedNode",
    "StoreError",
    "SyncCallOnLoopError",
    "TestResult",
    "Turn",
    "Usage",
    "UsageError",
    "aevaluate",
    "assert_test",
    "estimate",
    "evaluate",
    "observe",
    "open_store",
    "register_prices",
    "update_current_span",
    "update_current_trace",
]


__getattr__, __dir__ = lazy_door(__name__, globals(), _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from ._result import EvaluationResult, MetricResult, TestResult, Usage
    from ._tracing import observe, update_current_span, update_current_trace
    from .cases.goldens import Golden
    from .cases.images import MLLMImage
    from .cases.testcase import ConversationalTestCase, LLMTestCase, RetrievedNode, Turn
    from .engine import EvaluationOptions, aevaluate, assert_test, estimate, evaluate
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
    from .judges import Budget, JudgeOptions, RateLimit, register_prices
    from .store import open_store

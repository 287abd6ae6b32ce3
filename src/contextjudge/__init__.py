"""contextjudge: score the retrieval half of RAG apps inside LangChain and LlamaIndex.

    from contextjudge import evaluate, LLMTestCase
    from contextjudge.metrics import ContextualPrecisionMetric

    case = LLMTestCase(input="...", actual_output="...", expected_output="...", retrieval_context=["...", "..."])
    result = evaluate([case], [ContextualPrecisionMetric(model="local")])
"""

from ._assert import assert_test
from ._judge import JUDGE_TAG, RunContext
from ._models import resolve_model
from ._result import EvaluationResult, MetricResult, TestResult, Usage
from ._retry import JudgeOptions
from ._runner import aevaluate, evaluate
from ._testcase import ConversationalTestCase, LLMTestCase, RetrievedNode, Turn
from .errors import (
    CaptureError,
    ContextJudgeError,
    InvalidTestCaseError,
    JudgeError,
    JudgeOutputError,
    JudgeUnavailableError,
    MissingTestCaseParamsError,
    StoreError,
)
from .goldens import Golden
from .multimodal import MLLMImage
from .tracing import observe, update_current_span, update_current_trace

__version__ = "0.1.0"

__all__ = [
    "JUDGE_TAG",
    "CaptureError",
    "ContextJudgeError",
    "ConversationalTestCase",
    "EvaluationResult",
    "Golden",
    "InvalidTestCaseError",
    "JudgeError",
    "JudgeOptions",
    "JudgeOutputError",
    "JudgeUnavailableError",
    "LLMTestCase",
    "MLLMImage",
    "MetricResult",
    "MissingTestCaseParamsError",
    "RetrievedNode",
    "RunContext",
    "StoreError",
    "TestResult",
    "Turn",
    "Usage",
    "aevaluate",
    "assert_test",
    "evaluate",
    "observe",
    "resolve_model",
    "update_current_span",
    "update_current_trace",
]

"""DeepEval's spelling of the contextjudge API: ``from contextjudge.compat.deepeval import evaluate, ...``.

The submodules mirror DeepEval's: ``test_case``, ``metrics`` (with ``metrics.contextual_precision`` ... and their
``Template`` classes), ``dataset``, ``tracing``, ``evaluate`` (the config objects) and ``errors``. Everything is a
thin face over contextjudge's metrics, test cases and ``evaluate``: the same judge calls, verdict cache and store.
See docs/coming-from-deepeval.md for what differs.
"""

from __future__ import annotations

from . import evaluate as _evaluate_module  # noqa: F401 - the submodule first, so the name below is the function
from ._evaluate import (
    AsyncConfig,
    CacheConfig,
    DisplayConfig,
    ErrorConfig,
    assert_test,
    evaluate,
    log_hyperparameters,
    on_test_run_end,
)
from .dataset import ConversationalGolden, EvaluationDataset, Golden
from .errors import MissingTestCaseParamsError
from .metrics import (
    BaseConversationalMetric,
    BaseMetric,
    ContextualPrecisionMetric,
    ContextualPrecisionTemplate,
    ContextualRecallMetric,
    ContextualRecallTemplate,
    ContextualRelevancyMetric,
    ContextualRelevancyTemplate,
    MultimodalContextualPrecisionMetric,
    MultimodalContextualRecallMetric,
    MultimodalContextualRelevancyMetric,
    TurnContextualPrecisionMetric,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallMetric,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyMetric,
    TurnContextualRelevancyTemplate,
)
from .test_case import (
    ConversationalTestCase,
    LLMTestCase,
    LLMTestCaseParams,
    MLLMImage,
    MLLMTestCase,
    MultiTurnParams,
    RetrievedContextData,
    SingleTurnParams,
    ToolCall,
    Turn,
    TurnParams,
)
from .tracing import observe, update_current_span, update_current_trace

__all__ = [
    "AsyncConfig",
    "BaseConversationalMetric",
    "BaseMetric",
    "CacheConfig",
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "ConversationalGolden",
    "ConversationalTestCase",
    "DisplayConfig",
    "ErrorConfig",
    "EvaluationDataset",
    "Golden",
    "LLMTestCase",
    "LLMTestCaseParams",
    "MLLMImage",
    "MLLMTestCase",
    "MissingTestCaseParamsError",
    "MultiTurnParams",
    "MultimodalContextualPrecisionMetric",
    "MultimodalContextualRecallMetric",
    "MultimodalContextualRelevancyMetric",
    "RetrievedContextData",
    "SingleTurnParams",
    "ToolCall",
    "Turn",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
    "TurnParams",
    "assert_test",
    "evaluate",
    "log_hyperparameters",
    "observe",
    "on_test_run_end",
    "update_current_span",
    "update_current_trace",
]

"""``deepeval.evaluate`` names: ``evaluate``, ``assert_test`` and the config objects."""

from .._evaluate import (
    AsyncConfig,
    CacheConfig,
    DisplayConfig,
    ErrorConfig,
    EvaluationResult,
    TestRunResultDisplay,
    assert_test,
    evaluate,
)

__all__ = ["AsyncConfig", "CacheConfig", "DisplayConfig", "ErrorConfig", "EvaluationResult", "TestRunResultDisplay",
           "assert_test", "evaluate"]

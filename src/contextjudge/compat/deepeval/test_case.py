"""``deepeval.test_case`` names: test cases that accept DeepEval's extra fields."""

from __future__ import annotations

from enum import Enum

from typing import Any

from pydantic import ConfigDict, field_validator

from ...cases import testcase as _testcase
from ...cases.images import MLLMImage

__all__ = ["ConversationalTestCase", "LLMTestCase", "LLMTestCaseParams", "MLLMImage", "MLLMTestCase", "Turn"]


class LLMTestCase(_testcase.LLMTestCase):
    """``LLMTestCase`` that also accepts DeepEval-only fields (tools_called, token_cost, ...)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


class MLLMTestCase(LLMTestCase):
    """DeepEval's older multimodal test case: text fields are lists of strings and ``MLLMImage`` objects.

    The lists are joined in order into one text with image tokens, so it is an ``LLMTestCase`` like any other.
    """

    @field_validator("input", "actual_output", "expected_output", mode="before")
    @classmethod
    def _join(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return " ".join(str(p) for p in v)
        return v


class Turn(_testcase.Turn):
    """``Turn`` that also accepts DeepEval-only fields (user_id, tools_called, ...)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


class ConversationalTestCase(_testcase.ConversationalTestCase):
    """``ConversationalTestCase`` that also accepts DeepEval-only fields (chatbot_role, user_description, ...)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


class LLMTestCaseParams(Enum):
    INPUT = "input"
    ACTUAL_OUTPUT = "actual_output"
    EXPECTED_OUTPUT = "expected_output"
    CONTEXT = "context"
    RETRIEVAL_CONTEXT = "retrieval_context"

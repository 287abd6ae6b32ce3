"""``deepeval.test_case`` names: test cases that accept DeepEval's extra fields."""

from __future__ import annotations

from enum import Enum

from pydantic import ConfigDict

from ... import _testcase
from ...multimodal import MLLMImage

__all__ = ["ConversationalTestCase", "LLMTestCase", "LLMTestCaseParams", "MLLMImage", "Turn"]


class LLMTestCase(_testcase.LLMTestCase):
    """``LLMTestCase`` that also accepts DeepEval-only fields (tools_called, token_cost, ...)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


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

"""``deepeval.test_case`` names: test cases that accept DeepEval's fields, its parameter enums and ``ToolCall``.

DeepEval-only fields (tools_called, token_cost, chatbot_role, ...) are kept on the case (``case.tools_called``) and
play no part in the context metrics. ``multimodal`` is worked out from the case, as DeepEval does: True when any
text of it holds an ``MLLMImage``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...cases import testcase as _testcase
from ...cases.images import MLLMImage

__all__ = ["ConversationalTestCase", "LLMTestCase", "LLMTestCaseParams", "MLLMImage", "MLLMTestCase",
           "MultiTurnParams", "RetrievedContextData", "SingleTurnParams", "ToolCall", "ToolCallParams", "Turn",
           "TurnParams"]

SOURCE_KEY = "deepeval_source"  # a node's metadata key for RetrievedContextData.source

_EXTRA = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)


def _has_images(case: Any) -> bool:
    from ...judges import judge_view  # noqa: PLC0415 - the one place that finds a case's images

    return bool(judge_view(case)[1])


class RetrievedContextData(BaseModel):
    """DeepEval's chunk with its source document. In ``retrieval_context`` it becomes a node whose metadata keeps the
    source; ``ContextualPrecisionMetric`` judges the chunks of one source as one node, at the rank of its first
    chunk, as DeepEval does (the other metrics judge each chunk)."""

    context: str
    source: str


def _chunks_to_nodes(v: Any) -> Any:
    from ...cases.testcase import RetrievedNode  # noqa: PLC0415

    if not isinstance(v, (list, tuple)) or not any(isinstance(x, RetrievedContextData) for x in v):
        return v
    return [RetrievedNode(text=x.context, metadata={SOURCE_KEY: x.source}) if isinstance(x, RetrievedContextData)
            else x for x in v]


class ToolCall(BaseModel):
    """DeepEval's record of a tool call; kept on the case, unused by the context metrics."""

    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    reasoning: str | None = None
    output: Any = None
    input_parameters: dict[str, Any] | None = None


class SingleTurnParams(Enum):
    """DeepEval's ``SingleTurnParams`` (alias ``LLMTestCaseParams``): the names of an ``LLMTestCase``'s fields."""

    INPUT = "input"
    ACTUAL_OUTPUT = "actual_output"
    EXPECTED_OUTPUT = "expected_output"
    CONTEXT = "context"
    RETRIEVAL_CONTEXT = "retrieval_context"
    METADATA = "metadata"
    TAGS = "tags"
    TOOLS_CALLED = "tools_called"
    EXPECTED_TOOLS = "expected_tools"
    MCP_SERVERS = "mcp_servers"
    MCP_TOOLS_CALLED = "mcp_tools_called"
    MCP_RESOURCES_CALLED = "mcp_resources_called"
    MCP_PROMPTS_CALLED = "mcp_prompts_called"


class MultiTurnParams(Enum):
    """DeepEval's ``MultiTurnParams`` (alias ``TurnParams``): the names of a turn's and a conversation's fields."""

    ROLE = "role"
    CONTENT = "content"
    METADATA = "metadata"
    TAGS = "tags"
    SCENARIO = "scenario"
    EXPECTED_OUTCOME = "expected_outcome"
    CONTEXT = "context"
    USER_DESCRIPTION = "user_description"
    RETRIEVAL_CONTEXT = "retrieval_context"
    CHATBOT_ROLE = "chatbot_role"
    TOOLS_CALLED = "tools_called"
    MCP_TOOLS = "mcp_tools_called"
    MCP_RESOURCES = "mcp_resources_called"
    MCP_PROMPTS = "mcp_prompts_called"
    PROVIDER_TRANSCRIPT = "provider_transcript"
    AUDIO = "audio"


class ToolCallParams(Enum):
    """DeepEval's ``ToolCallParams``: the names of a ``ToolCall``'s fields."""

    INPUT_PARAMETERS = "input_parameters"
    OUTPUT = "output"


# DeepEval 3.x names, still importable there (with a DeprecationWarning for the first two)
LLMTestCaseParams = SingleTurnParams
TurnParams = MultiTurnParams


class LLMTestCase(_testcase.LLMTestCase):
    """``LLMTestCase`` that also takes DeepEval-only fields (tools_called, token_cost, flaky, metadata, ...)."""

    model_config = _EXTRA

    multimodal: bool = Field(default=False)

    @field_validator("retrieval_context", mode="before")
    @classmethod
    def _peer_chunks(cls, v: Any) -> Any:
        return _chunks_to_nodes(v)

    @model_validator(mode="after")
    def _multimodal(self) -> LLMTestCase:
        if not self.multimodal and _has_images(self):
            object.__setattr__(self, "multimodal", True)
        return self


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
    """``Turn`` that also takes DeepEval-only fields (user_id, tools_called, metadata, ...)."""

    model_config = _EXTRA

    @field_validator("retrieval_context", mode="before")
    @classmethod
    def _peer_chunks(cls, v: Any) -> Any:
        return _chunks_to_nodes(v)


class ConversationalTestCase(_testcase.ConversationalTestCase):
    """``ConversationalTestCase`` with DeepEval's fields: scenario, context, user_description, chatbot_role,
    expected_outcome, metadata, comments, tags, flaky; ``multimodal`` is True when a turn holds an image."""

    model_config = _EXTRA

    context: list[str] | None = None
    user_description: str | None = None
    chatbot_role: str | None = None
    comments: str | None = None
    flaky: bool = False
    multimodal: bool = False

    @model_validator(mode="after")
    def _multimodal(self) -> ConversationalTestCase:
        if not self.multimodal and _has_images(self):
            object.__setattr__(self, "multimodal", True)
        return self


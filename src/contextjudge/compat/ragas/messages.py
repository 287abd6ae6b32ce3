"""``ragas.messages``: the messages of a ``MultiTurnSample``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["AIMessage", "HumanMessage", "Message", "ToolCall", "ToolMessage"]


class Message(BaseModel):
    """Ragas' message base: ``content`` and optional ``metadata``; extra fields are kept."""

    model_config = ConfigDict(extra="allow")

    content: str
    metadata: dict[str, Any] | None = None


class ToolCall(BaseModel):
    """Ragas' ``ToolCall``: a tool's ``name`` and its ``args``."""

    name: str
    args: dict[str, Any] = {}


class HumanMessage(Message):
    """Ragas' ``HumanMessage``: a user's turn in a ``MultiTurnSample``."""

    type: str = "human"


class AIMessage(Message):
    """Ragas' ``AIMessage``: the app's turn, with the tools it called."""

    type: str = "ai"
    tool_calls: list[ToolCall] | None = None


class ToolMessage(Message):
    """Ragas' ``ToolMessage``: a tool's output in a conversation."""

    type: str = "tool"

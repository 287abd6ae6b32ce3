"""``ragas.messages``: the messages of a ``MultiTurnSample``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["AIMessage", "HumanMessage", "Message", "ToolCall", "ToolMessage"]


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    content: str
    metadata: dict[str, Any] | None = None


class ToolCall(BaseModel):
    name: str
    args: dict[str, Any] = {}


class HumanMessage(Message):
    type: str = "human"


class AIMessage(Message):
    type: str = "ai"
    tool_calls: list[ToolCall] | None = None


class ToolMessage(Message):
    type: str = "tool"

"""Texts read from runs: a message's text, the user's question in a chain input, a chain's or an LLM's output, the
prompt an LLM was sent, and an agent's final answer."""

from __future__ import annotations

from typing import Any

_QUESTION_KEYS = ("question", "input", "query", "user_input", "q", "prompt")
_OUTPUT_KEYS = ("answer", "output", "result", "response", "text", "content")


def message_text(message: Any) -> str | None:
    content = getattr(message, "content", None)
    if content is None and isinstance(message, dict):
        content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, (str, dict))]
        return "".join(parts)
    return None


def question_of(inputs: Any) -> str | None:
    """The user's question in a chain input, when it is recognisable; None otherwise."""
    if isinstance(inputs, dict) and set(inputs) == {"input"}:
        inputs = inputs["input"]  # the tracer wraps non-dict inputs as {"input": x}
    if isinstance(inputs, str):
        return inputs if inputs.strip() else None
    if isinstance(inputs, dict):
        for key in _QUESTION_KEYS:
            value = inputs.get(key)
            if isinstance(value, str) and value.strip():
                return value
        messages = inputs.get("messages")
        if isinstance(messages, list):
            for m in reversed(messages):
                role = getattr(m, "type", None) or (m.get("role") if isinstance(m, dict) else None)
                if role in ("human", "user"):
                    return message_text(m)
    if isinstance(inputs, list) and inputs:
        for m in reversed(inputs):
            if getattr(m, "type", None) == "human":
                return message_text(m)
    return None


def text_of_output(outputs: Any) -> str | None:
    """The text of a chain output, when it is text (a string, a message, or a dict with an answer string)."""
    if isinstance(outputs, dict) and set(outputs) == {"output"}:
        outputs = outputs["output"]
    if isinstance(outputs, str):
        return outputs
    text = message_text(outputs) if hasattr(outputs, "content") else None
    if text is not None:
        return text
    if isinstance(outputs, dict):
        for key in _OUTPUT_KEYS:
            value = outputs.get(key)
            if isinstance(value, str):
                return value
            if hasattr(value, "content"):
                return message_text(value)
        messages = outputs.get("messages")
        if isinstance(messages, list) and messages:
            return message_text(messages[-1])
    return None


def llm_text(run: Any) -> str | None:
    outputs = run.outputs or {}
    gens = outputs.get("generations") or []
    for batch in gens:
        for g in batch or ():
            text = g.get("text") if isinstance(g, dict) else getattr(g, "text", None)
            if text:
                return text
    return None


def _prompt_text(run: Any) -> str:
    inputs = run.inputs or {}
    prompts = inputs.get("prompts")
    if hasattr(prompts, "render"):
        prompts = prompts.render()
    if isinstance(prompts, list):
        return "\n".join(p for p in prompts if isinstance(p, str))
    return str(inputs.get("messages", ""))


def _role(message: Any) -> str | None:
    role = getattr(message, "type", None)
    if role is None and isinstance(message, dict):
        role = message.get("role") or message.get("type")
    return {"user": "human", "assistant": "ai"}.get(role, role)


def _tool_calls(message: Any) -> list[Any]:
    calls = getattr(message, "tool_calls", None)
    if calls is None and isinstance(message, dict):
        calls = message.get("tool_calls")
    return list(calls or [])


def _messages(outputs: Any) -> list[Any] | None:
    messages = outputs.get("messages") if isinstance(outputs, dict) else None
    return messages if isinstance(messages, list) else None


def _this_turn(messages: list[Any]) -> list[Any]:
    """The messages after the last human one: a graph with a checkpointer returns the whole thread."""
    for i in range(len(messages) - 1, -1, -1):
        if _role(messages[i]) == "human":
            return messages[i + 1:]
    return messages


def final_answer(outputs: Any) -> str | None:
    """The agent's final answer in a root output: the last AI message of the turn that calls no tool; for other
    outputs, their text (``text_of_output``)."""
    messages = _messages(outputs)
    if messages is None:
        return text_of_output(outputs)
    for m in reversed(_this_turn(messages)):
        if _role(m) == "ai" and not _tool_calls(m):
            text = message_text(m)
            if text:
                return text
    rest = {k: v for k, v in outputs.items() if k != "messages"}  # a graph state's own answer field, if any
    return text_of_output(rest) if rest else None

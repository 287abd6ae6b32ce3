"""The agent step a retrieval ran in: a tool call (its input, its answer, its place among the turn's calls) or a
LangGraph node."""

from __future__ import annotations

import json
from typing import Any

from ._texts import _messages, _this_turn, _tool_calls, message_text, question_of
from ._tree import metadata_of


def _call_order(root: Any, tools: list[Any]) -> dict[int, int]:
    """Each top-level tool run's 1-based index among the turn's tool calls: the order the model asked for them in
    (tools may run in parallel), else the order they started in."""
    ids: list[str] = []
    for m in _this_turn(_messages(root.outputs) or []):
        for call in _tool_calls(m):
            cid = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
            if cid:
                ids.append(str(cid))
    pos = {cid: i for i, cid in enumerate(ids)}
    ordered = sorted(tools, key=lambda t: (pos.get(str(t.tool_call_id), len(pos)), t.start))
    return {t.id.int: i for i, t in enumerate(ordered, 1)}


def tool_input_of(tool: Any) -> str:
    """The query an agent gave a tool: its question-like argument, its only string argument, or all its arguments."""
    inputs = tool.inputs
    if isinstance(inputs, dict):
        question = question_of(inputs)
        if question:
            return question
        texts = [v for v in inputs.values() if isinstance(v, str)]
        if len(texts) == 1:
            return texts[0]
        try:
            return json.dumps(inputs, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(inputs)
    return "" if inputs is None else str(inputs)


def tool_output_of(tool: Any) -> str | None:
    """The tool's own answer (the content of its ToolMessage), or None when it failed."""
    if tool.error:
        return None
    out = (tool.outputs or {}).get("output") if isinstance(tool.outputs, dict) else tool.outputs
    if out is None:
        return None
    text = message_text(out) if hasattr(out, "content") else None
    return text if text is not None else str(out)


def _agent_context(run: Any, ancestors: tuple[Any, ...], root: Any) -> tuple[str, Any] | None:
    """("tool", the tool run) when the retrieval ran inside an agent's tool, ("node", its name) inside a LangGraph
    node, else None."""
    tool = next((a for a in reversed(ancestors) if a.run_type == "tool" and a is not root), None)
    if tool is not None:
        return "tool", tool
    node = metadata_of(run).get("langgraph_node")
    if isinstance(node, str) and node and not node.startswith("__"):
        return "node", node
    return None


def _agent_step(context: tuple[str, Any], root: Any, query: str, tools: list[Any], call_of: dict[int, int],
                node_names: list[str], thread_id: str | None) -> tuple[dict[str, Any], str, int]:
    """The agent step a retrieval ran in (a tool call, or a graph node: then ``node_names`` gets its name), its
    label, and which of the steps with that label it was (1 for the first)."""
    kind, where = context
    if kind == "tool":
        label, call = where.name, call_of.get(where.id.int, 1)
        agent = {"tool": where.name, "tool_input": tool_input_of(where), "tool_output": tool_output_of(where),
                 "call": call}
        nth = 1 + sum(1 for t in tools if t.name == label and call_of[t.id.int] < call)
    else:
        label, call = where, len(node_names) + 1
        agent = {"tool": None, "node": where, "tool_input": query, "tool_output": None, "call": call}
        nth = 1 + node_names.count(label)
        node_names.append(label)
    agent.update({"agent": root.name, "framework": "langchain"})
    if thread_id is not None:
        agent["thread_id"] = thread_id
    return agent, label, nth

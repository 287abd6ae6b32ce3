"""A tool's output as a retrieval (``retrieval_tools=``, the ``contextjudge:retrieval`` tag): its items as ranked
Documents under a retriever child of the tool run."""

from __future__ import annotations

from typing import Any

from contextjudge.capture import search_result, tool_output_items

from ._agents import tool_input_of
from ._texts import message_text
from ._tree import RunRecord, walk

RETRIEVAL_TOOL_TAG = "contextjudge:retrieval"
"""A tag (or ``metadata={"contextjudge": "retrieval"}``) that makes a tool's output a retrieval."""
_ITEM_TEXT_KEYS = ("page_content", "content", "text", "snippet", "body", "description", "result")


def is_retrieval_tool(run: Any, names: frozenset[str]) -> bool:
    """Whether a tool run's output is to be captured as a retrieval: named in ``retrieval_tools=``, tagged
    ``contextjudge:retrieval``, or with ``metadata={"contextjudge": "retrieval"}``."""
    return run.run_type == "tool" and (run.name in names or RETRIEVAL_TOOL_TAG in (run.tags or ())
                                       or (run.metadata or {}).get("contextjudge") == "retrieval")


def tool_items(output: Any) -> list[Any]:
    """A tool's output as ranked Documents: a ToolMessage's artifact when it has one (``content_and_artifact``),
    else its content; a list (or a JSON list in a string) split into items, anything else one item. A dict item
    (a search result) gives its text (``content``, ``snippet``...) and its id (``id``, ``url``...)."""
    from langchain_core.documents import Document  # noqa: PLC0415

    raw = output
    if hasattr(output, "content") and hasattr(output, "tool_call_id"):  # a ToolMessage
        raw = output.artifact if getattr(output, "artifact", None) is not None else output.content
    docs = []
    for item in tool_output_items(raw):
        if hasattr(item, "page_content"):
            docs.append(item)
        elif isinstance(item, dict):
            text, nid, meta = search_result(item, _ITEM_TEXT_KEYS)
            docs.append(Document(text, id=nid, metadata=meta))
        elif item is not None:
            text = message_text(item) if hasattr(item, "content") else None
            text = text if text is not None else (item if isinstance(item, str) else str(item))
            if text.strip():
                docs.append(Document(text))
    return docs


def add_tool_retrievals(root: Any, names: frozenset[str]) -> bool:
    """Give each retrieval tool run (``is_retrieval_tool``) that ran no retriever of its own a retriever child
    holding its output's items, so it is assembled as any retrieval inside a tool is; True when one was added."""
    added = False
    for run, _ in walk(root):
        if run.error or run.end is None or not is_retrieval_tool(run, names):
            continue
        if any(r.run_type == "retriever" for r, _ in walk(run)):
            continue
        output = run.outputs.get("output") if isinstance(run.outputs, dict) else run.outputs
        child = RunRecord(run.id, run.id, run.root_id, "retriever", run.name, {"query": tool_input_of(run)},
                          run.tags, {**(run.metadata or {}), "contextjudge_tool_output": True}, run.start + 0.25)
        child.id = _ToolRetrievalId(run.id)
        child.end = run.end - 0.25
        child.outputs = {"documents": tool_items(output)}
        run.child_runs.append(child)
        added = True
    return added


class _ToolRetrievalId:
    """The id of a tool's output seen as a retrieval: the tool run's own, as text and as a number."""

    __slots__ = ("int", "_s")

    def __init__(self, tool_id: Any) -> None:
        self.int = -tool_id.int
        self._s = f"{tool_id}:output"

    def __str__(self) -> str:
        return self._s

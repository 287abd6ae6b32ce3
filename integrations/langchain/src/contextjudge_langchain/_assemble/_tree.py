"""The run tree the handler keeps (``RunRecord``), walked in start order, and the thread its runs belong to."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

THREAD_KEYS = ("thread_id", "session_id", "conversation_id")


class RunRecord:
    """What the handler keeps of one LangChain run: enough to assemble test cases, and cheap to make."""

    __slots__ = ("id", "parent_run_id", "root_id", "run_type", "name", "inputs", "tags", "metadata", "start",
                 "end", "outputs", "error", "child_runs", "tool_call_id", "otel")

    def __init__(self, id: Any, parent_run_id: Any, root_id: Any, run_type: str, name: str, inputs: Any,
                 tags: list[str] | None, metadata: dict[str, Any] | None, start: int) -> None:
        self.id = id
        self.parent_run_id = parent_run_id
        self.root_id = root_id
        self.run_type = run_type
        self.name = name
        self.inputs = inputs
        self.tags = tags
        self.metadata = metadata or {}
        self.start = start
        self.end: int | None = None
        self.outputs: Any = None
        self.error: str | None = None
        self.child_runs: list[RunRecord] = []
        self.tool_call_id: str | None = None  # a tool run's id of the model's tool call, which orders the calls
        self.otel: dict[str, Any] | None = None  # the app's active OpenTelemetry span at a root's or retriever's start

    def __repr__(self) -> str:
        return f"RunRecord({self.run_type}:{self.name} {self.id})"


def walk(root: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """Every run of the tree with its ancestors, in start order (the tracer's dotted order)."""
    out: list[tuple[Any, tuple[Any, ...]]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        run, ancestors = stack.pop()
        out.append((run, ancestors))
        for child in getattr(run, "child_runs", None) or ():
            stack.append((child, ancestors + (run,)))
    out.sort(key=lambda pair: pair[0].start)
    return out


def metadata_of(run: Any) -> dict[str, Any]:
    return run.metadata or {}


def thread_id_of(runs: Iterable[Any]) -> str | None:
    for run in runs:
        meta = metadata_of(run)
        for key in THREAD_KEYS:
            value = meta.get(key)
            if isinstance(value, (str, int)) and str(value):
                return str(value)
    return None

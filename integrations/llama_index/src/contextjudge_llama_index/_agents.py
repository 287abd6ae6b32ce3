"""Agents and workflows: one ``AgentRun`` per run (``agent.run(user_msg=...)``), its tool calls, and the runs in flight.

Every span of a run (its steps, tools, LLM calls, nested workflows) maps to its ``AgentRun`` in ``AgentRuns``; the
records of the queries and retrievals its tools ran are held (``ToolSink``) until the run ends, then delivered with
the user's message as input and the agent's final answer as output. The capture router (``_capture``) owns one
``AgentRuns`` and hands it the spans that belong to a run.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from contextjudge import RetrievedNode
from contextjudge.cases.identity import golden_id_of
from contextjudge.otel import span_context_now

from ._kinds import INPUT_FIELDS as _INPUT_FIELDS
from ._kinds import method_of
from ._record import CONVERSATION_TAG, CONVERSATION_TAGS, GOLDEN_INDEX_TAG, Record, Sink
from ._snapshots import as_text, tool_snapshot

try:  # the instrumentation package split out of llama-index-core in 0.12
    from llama_index_instrumentation.dispatcher import active_instrument_tags
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.dispatcher import active_instrument_tags  # type: ignore[no-redef]

__all__ = ["AgentRun", "AgentRuns", "ToolCall", "ToolSink"]

logger = logging.getLogger("contextjudge")

_LLM_METHODS = frozenset({"chat", "achat", "complete", "acomplete", "stream_chat", "astream_chat", "stream_complete",
                          "astream_complete"})


def _user_message(start_event: Any) -> str | None:
    """The user's message in a workflow's start event: ``user_msg`` (agents), else the last user message of
    ``chat_history``, else a usual input field of a custom StartEvent (``query``, ``input``, ``question``...)."""
    get = getattr(start_event, "get", None)
    if not callable(get):
        return None
    for key in _INPUT_FIELDS:
        try:
            value = get(key, None)
        except Exception:  # noqa: BLE001 - an exotic event
            value = None
        if value is not None:
            return as_text(value)
    try:
        history = get("chat_history", None)
    except Exception:  # noqa: BLE001
        history = None
    for msg in reversed(list(history or ())):
        if str(getattr(getattr(msg, "role", None), "value", getattr(msg, "role", ""))) == "user":
            return as_text(msg)
    return None



@dataclass
class ToolCall:
    """One tool call of an agent's turn (or, in a plain workflow, one step that called an engine)."""

    tool: str
    tool_input: Any
    call: int
    agent: str | None = None
    span_id: str | None = None
    output: str | None = None
    records: list[tuple[Record, Sink]] = field(default_factory=list)

    @property
    def query(self) -> str | None:
        """The tool's input as text: the one argument's value when there is one argument."""
        value = self.tool_input
        if isinstance(value, dict):
            vals = [v for v in value.values() if v is not None]
            if len(vals) == 1:
                return as_text(vals[0])
            return ", ".join(f"{k}={v}" for k, v in value.items()) if value else None
        return as_text(value)


class ToolSink(Sink):
    """Holds a call's record until the agent's run ends (its final answer is the case's actual_output)."""

    __slots__ = ("call", "target")

    def __init__(self, call: ToolCall, target: Sink) -> None:
        self.call = call
        self.target = target

    def deliver(self, record: Record) -> None:
        self.call.records.append((record, self.target))


class AgentRun:
    """One run of an agent or workflow (``agent.run(user_msg=...)``): its user message, tool calls and answer.

    The records of the queries and retrievals its tools ran are held until the run ends, then delivered with the
    user's message as input and the agent's final answer as output. ``conversation`` is what makes several runs one
    conversation: the memory object passed as ``memory=`` (the same object for every run of the conversation), or
    the id given with the ``contextjudge.conversation_id`` instrument tag (``instrument_tags(conversation_id=...)``).
    A ``Context`` reused with ``ctx=`` is not seen by instrumentation (each run gets a copy of its state), so a
    conversation kept only in a ``Context`` needs the tag.
    """

    def __init__(self, span_id: str, workflow: Any, user_message: str | None, sink: Sink,
                 tags: dict[str, Any], conversation: Any) -> None:
        self.span_id = span_id
        self.workflow = type(workflow).__name__
        name = getattr(workflow, "name", None)
        self.agent = name if isinstance(name, str) and name else self.workflow
        self.current_agent: str | None = None
        self.user_message = user_message
        self.sink = sink
        self.golden_id = golden_id_of(tags) if tags else None
        idx = tags.get(GOLDEN_INDEX_TAG) if tags else None
        self.golden_index = idx if isinstance(idx, int) else None
        self.conversation = conversation
        self.calls: list[ToolCall] = []
        self.span_ids = [span_id]
        self.output: str | None = None
        self.done = False
        self.tags = tags
        self.otel: dict[str, Any] | None = None  # the app's OpenTelemetry span when the run began
        self.steps: list[str] = []  # the steps that ran (for the warning about runs that retrieve nothing)
        self.llm_calls = 0

    def what_ran(self) -> dict[str, Any]:
        """What the run ran, for ``CaptureSession.note_root``: the workflow, its steps, tools and LLM calls."""
        return {"workflows": [self.agent], "steps": list(self.steps), "tools": [c.tool for c in self.calls],
                "LLM calls": self.llm_calls}

    def new_call(self, tool: str, tool_input: Any, span_id: str | None) -> ToolCall:
        call = ToolCall(tool=tool, tool_input=tool_input, call=len(self.calls) + 1,
                        agent=self.current_agent or self.agent, span_id=span_id)
        self.calls.append(call)
        return call

    def records(self) -> list[Record]:
        return [r for c in self.calls for r, _ in c.records]

    def finish(self, output: str | None) -> list[tuple[Record, Sink]]:
        """Fill every held record with the run's user message, final answer and its tool call; return them."""
        from contextjudge.cases.provenance import short  # noqa: PLC0415

        self.output = output
        out: list[tuple[Record, Sink]] = []
        seen: dict[str, int] = {}
        for call in self.calls:
            seen[call.tool] = seen.get(call.tool, 0) + 1
            label = call.tool if seen[call.tool] == 1 else f"{call.tool} #{seen[call.tool]}"
            for n, (record, sink) in enumerate(call.records, 1):
                record.agent = {"tool": call.tool, "tool_input": call.query, "tool_output": call.output,
                                "call": call.call, "agent": call.agent, "framework": "llama_index"}
                if isinstance(self.conversation, str):
                    record.agent["thread_id"] = self.conversation
                record.user_message = self.user_message
                record.agent_output = output
                record.name = f"{label}: {short(self.user_message or record.input or '', 60)}"
                if n > 1:
                    record.name += f" (retrieval {n})"
                if record.golden_id is None:
                    record.golden_id = self.golden_id
                if record.golden_index is None:
                    record.golden_index = self.golden_index
                if self.otel is not None:  # the agent's run is the request; the tool's call led to the retrieval
                    record.retriever_otel = record.retriever_otel or record.otel
                    record.otel = self.otel
                if not record.tags and self.tags:
                    record.tags = dict(self.tags)
                if isinstance(self.conversation, str) and record.conversation_id is None:
                    record.tags = {**(record.tags or {}), CONVERSATION_TAG: self.conversation}
                out.append((record, sink))
        return out

    def turn_contexts(self) -> tuple[list[RetrievedNode] | None, dict[str, Any]]:
        """The nodes the turn's tools handed on (each retrieval's final list, in order, repeats dropped)."""
        nodes: list[RetrievedNode] | None = None
        seen: set[Any] = set()
        for record in self.records():
            got, _ = record.contexts()
            if got is None:
                continue
            nodes = nodes if nodes is not None else []
            for node in got:
                key = node.id or node.text
                if key not in seen:
                    seen.add(key)
                    nodes.append(node)
        calls = [{"tool": c.tool, "tool_input": c.query, "tool_output": c.output, "call": c.call, "agent": c.agent}
                 for c in self.calls]
        return nodes, ({"tool_calls": calls} if calls else {})


class AgentRuns:
    """The agent and workflow runs in flight: every span of a run (steps, tools, LLM calls, nested workflows) maps to
    its ``AgentRun``, the tool call it belongs to and its step; a run's end delivers its records to their sinks.

    The router owns one; single dict operations are atomic, and a lock of its own guards a run's new tool calls.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # span id -> (agent run, its tool call or None, step name) for every span of an agent's or workflow's run
        self._spans: dict[str, tuple[AgentRun, ToolCall | None, str | None]] = {}

    def get(self, span_id: str | None) -> tuple[AgentRun, ToolCall | None, str | None] | None:
        """The run a span belongs to, or None."""
        return self._spans.get(span_id) if span_id is not None and self._spans else None

    def clear(self) -> None:
        """Forget every run (the handlers were removed)."""
        self._spans.clear()

    def step_call(self, in_run: tuple[AgentRun, ToolCall | None, str | None], span_id: str) -> ToolCall:
        """An engine called by a workflow's own step (no tool): the step stands for the tool."""
        run, _, step = in_run
        with self._lock:
            call = run.new_call(step or "step", None, None)
        self._spans[span_id] = (run, call, step)
        return call

    def exit(self, id_: str, result: Any) -> None:
        """A span ends: a tool call's output is kept, and the run's own span finishes the run."""
        if self._spans:
            in_run = self._spans.pop(id_, None)
            if in_run is not None:
                self._span_exit(in_run, id_, result)

    def drop(self, id_: str, err: BaseException | None) -> None:
        """A span raised: when it is the run's own span, the run is dropped without a test case."""
        if self._spans:
            in_run = self._spans.pop(id_, None)
            if in_run is not None and in_run[0].span_id == id_:
                self._discard(in_run[0], err)

    def enter(self, id_: str, args: dict[str, Any], workflow: Any, sink: Sink) -> None:
        """An agent's or workflow's run starts: its spans (steps, tools, LLM calls) are followed from here."""
        start = args.get("start_event")
        # The run span carries no tags of its own: the run's instrument tags are the active ones.
        tags = dict(active_instrument_tags.get() or {})
        conversation: Any = next((str(tags[k]) for k in CONVERSATION_TAGS if tags.get(k)), None)
        if conversation is None and start is not None:
            try:
                conversation = start.get("memory", None)
            except Exception:  # noqa: BLE001
                conversation = None
        run = AgentRun(id_, workflow, _user_message(start), sink, tags, conversation)
        run.otel = span_context_now()
        self._spans[id_] = (run, None, None)

    def span(self, in_run: tuple[AgentRun, ToolCall | None, str | None], id_: str, bound_args: Any,
                  instance: Any) -> None:
        run, call, step = in_run
        if instance is None:
            name = method_of(id_)
            if name not in run.steps and len(run.steps) < 20:
                run.steps.append(name)
        elif method_of(id_) in _LLM_METHODS:
            run.llm_calls += 1
        if call is None and instance is None and step is None:  # a step of the run (steps are spans of no instance)
            step = method_of(id_)
            ev = (getattr(bound_args, "arguments", None) or {}).get("ev")
            if ev is not None and type(ev).__name__ == "ToolCall" and hasattr(ev, "tool_name"):
                with self._lock:
                    call = run.new_call(str(ev.tool_name), getattr(ev, "tool_kwargs", None), id_)
        self._spans[id_] = (run, call, step)
        run.span_ids.append(id_)

    def _span_exit(self, in_run: tuple[AgentRun, ToolCall | None, str | None], id_: str, result: Any) -> None:
        run, call, _ = in_run
        if run.span_id == id_:
            self._exit(run, result)
            return
        name = type(result).__name__
        if call is not None and call.span_id == id_:
            call.output = as_text(getattr(result, "tool_output", result))
            names = getattr(run.sink, "retrieval_tools", None)
            if names and call.tool in names and not call.records:
                # a tool whose output is the context (a web search, an MCP tool): its items are the retrieval
                raw = getattr(getattr(result, "tool_output", None), "raw_output", None)
                record = Record(kind="retrieve", span_id=id_, engine=call.tool, input=call.query, from_tool=True)
                record.retrievals.append((call.query, tool_snapshot(call.output if raw is None else raw)))
                record.retriever = call.tool
                call.records.append((record, run.sink))
        elif name == "AgentOutput":
            agent = getattr(result, "current_agent_name", None)
            if agent:
                run.current_agent = str(agent)

    def _exit(self, run: AgentRun, result: Any) -> None:
        if run.done:
            return
        run.done = True
        self._forget(run)
        is_stop = any(c.__name__ == "StopEvent" for c in type(result).__mro__)
        final = getattr(result, "result", None) if is_stop else result
        try:
            output = as_text(final)
            finished = run.finish(output)
            for record, sink in finished:
                sink.deliver(record)
            if run.conversation is not None:
                run.sink.deliver_turn(run)
            found = sum(len(r.retrievals) for r, _ in finished)
            run.sink.note_root(found, None if found else run.what_ran())
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not turn a llama_index %s run into test cases", run.workflow)

    def _discard(self, run: AgentRun, err: BaseException | None) -> None:
        run.done = True
        self._forget(run)
        logger.debug("contextjudge: %s run raised %r; no test case captured", run.workflow, err)

    def _forget(self, run: AgentRun) -> None:
        for k in run.span_ids:
            self._spans.pop(k, None)

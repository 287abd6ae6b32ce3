"""The capture engine: span and event handlers on LlamaIndex's root dispatcher that turn queries into test cases.

One span handler and one event handler are added to the root dispatcher (idempotently) while anything needs them:
the global ``instrument()`` or a live engine wrapper. The outermost query, chat or retrieval span opens a *unit*;
every span beneath it maps to that unit, so events are grouped by span ancestry, never by time or thread, and
concurrent ``aquery`` calls never mix. The handlers only record (a dict lookup and an append under a lock) and
return; the unit is finalized when its outermost span exits, or when a streaming response is exhausted, and the
record goes to a *sink* (the global capture, or a wrapper), which hands it to a ``CaptureScorer``.

On the request path only cheap copies are made, of what could change later (each node's text, id, score and
metadata, when the retrieval ends and when the call returns), and, when the app traces with OpenTelemetry, the ids of
the span active when the call and its first retrieval began (``contextjudge.otel.span_context_now``); the test case
is assembled from them later, on the scorer's worker thread or when first read (``_results.LazyCase``).

Everything here runs inside LlamaIndex calls, so every failure is logged and contained.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contextjudge import RetrievedNode
from contextjudge.capture import JUDGE_TAG, in_judge_call, search_result, tool_output_items
from contextjudge.cases.identity import golden_id_of
from contextjudge.cases.provenance import SOURCE_DOC_KEY
from contextjudge.otel import span_context_now

from ._images import node_from_llama_image_node
from ._kinds import INPUT_FIELDS as _INPUT_FIELDS
from ._kinds import KINDS as _KINDS
from ._kinds import MODULES as _MODULES

try:  # the instrumentation package split out of llama-index-core in 0.12
    from llama_index_instrumentation.dispatcher import active_instrument_tags
    from llama_index_instrumentation.event_handlers import BaseEventHandler
    from llama_index_instrumentation.span_handlers import BaseSpanHandler
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.dispatcher import active_instrument_tags  # type: ignore[no-redef]
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # type: ignore[no-redef]
    from llama_index.core.instrumentation.span_handlers import BaseSpanHandler  # type: ignore[no-redef]


__all__ = ["AgentRun", "Record", "Router", "Sink", "current_sink", "router"]

logger = logging.getLogger("contextjudge")

# The sink an engine wrapper routes its own calls to; set only for the duration of a wrapper call.
current_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("contextjudge_llama_index_sink",
                                                                            default=None)

_METHODS = {
    "query": frozenset({"query", "aquery"}),
    "retrieve": frozenset({"retrieve", "aretrieve"}),
    "chat": frozenset({"chat", "achat", "stream_chat", "astream_chat"}),
    "workflow": frozenset({"run"}),
}
_WRITERS = frozenset({"write_response_to_history", "awrite_response_to_history"})
_RECORDED_EVENTS = frozenset({"RetrievalEndEvent", "ReRankEndEvent"})  # what Router.event looks at
_UUID_SUFFIX = 37  # "-" + str(uuid4())
_LLM_METHODS = frozenset({"chat", "achat", "complete", "acomplete", "stream_chat", "astream_chat", "stream_complete",
                          "astream_complete"})
SHAPES = ("query engines (query/aquery, streaming too), retrievers (retrieve/aretrieve of any BaseRetriever: "
          "index.as_retriever(), a retriever called by hand, in a query engine, a workflow step or an agent's "
          "tool), chat engines (chat/achat/stream_chat), and agents and workflows whose tools or steps call them")
GOLDEN_INDEX_TAG = "contextjudge.golden_index"
CONVERSATION_TAG = "contextjudge.conversation_id"
"""An instrument tag that makes an agent's or workflow's runs one conversation (see ``AgentRun.conversation``)."""
_CONVERSATION_TAGS = (CONVERSATION_TAG, "conversation_id", "thread_id", "session_id")


def _method_of(span_id: str) -> str:
    return span_id[:-_UUID_SUFFIX].rpartition(".")[2]


_IMAGE_ATTRS = ("image", "image_url", "image_path", "image_resource")
_image_fields_by_class: dict[type, tuple[str, ...]] = {}


def _image_fields(cls: type) -> tuple[str, ...]:
    """The image attributes a node class declares (looked up once per class: reading a missing attribute of a
    pydantic model is slow, and this runs on the request path for every node)."""
    found = _image_fields_by_class.get(cls)
    if found is None:
        declared = getattr(cls, "model_fields", None) or {}
        found = _image_fields_by_class[cls] = tuple(a for a in _IMAGE_ATTRS if a in declared)
    return found


Snapshot = list[tuple[str, "str | None", "float | None", dict[str, Any], Any]]
"""(text, id, score, metadata, image node or None) per NodeWithScore, as it was when the snapshot was taken."""


def _snapshot(nodes: Any) -> Snapshot:
    """Copy now what later postprocessors (or the app) may change in place: each node's text, id, score and metadata.

    Only cheap copies happen here, on the request path; turning them into ``RetrievedNode`` objects (and reading an
    image node's image, which may mean reading a file) waits until the test case is assembled (``to_nodes``).
    """
    out = []
    for n in nodes or ():
        inner = getattr(n, "node", n)
        text = _text_of(inner)
        meta = getattr(inner, "metadata", None)
        meta = dict(meta) if meta else {}
        nid = getattr(inner, "node_id", None)
        try:  # the user's document the chunk came from (Document(id_=...)), beside the chunk's own id
            source = inner.ref_doc_id
        except Exception:  # noqa: BLE001 - a node type without relationships
            source = None
        if source is not None and source != nid:
            meta[SOURCE_DOC_KEY] = source
        image = None
        fields = _image_fields(type(inner))
        if fields and any(getattr(inner, a, None) for a in fields):
            image = _freeze_image_node(inner, meta)
        out.append((text, nid, getattr(n, "score", None), meta, image))
    return out


_ITEM_TEXT_KEYS = ("text", "content", "snippet", "body", "description", "result")


def tool_snapshot(raw: Any) -> Snapshot:
    """A tool's output as a snapshot of ranked items: nodes as nodes; a list (or a JSON list in a string) split
    into items, a search-result dict giving its text and its url/id; anything else one item."""
    out: Snapshot = []
    for item in tool_output_items(raw):
        if hasattr(item, "get_content") or hasattr(getattr(item, "node", None), "get_content"):
            out.extend(_snapshot([item]))
        elif isinstance(item, dict):
            text, nid, meta = search_result(item, _ITEM_TEXT_KEYS)
            out.append((text, nid, None, meta, None))
        elif item is not None and str(item).strip():
            out.append((_text(item) or "", None, None, {}, None))
    return out


def _text_of(node: Any) -> str:
    try:
        return node.get_content()
    except Exception:  # noqa: BLE001 - an exotic node type; fall back to its text attribute
        return str(getattr(node, "text", ""))


def _freeze_image_node(node: Any, meta: dict[str, Any]) -> Any:
    """A shallow copy of an ImageNode (and of its image resource) that later changes to the node do not reach."""
    try:
        update: dict[str, Any] = {"metadata": meta}
        res = getattr(node, "image_resource", None)
        if res is not None and hasattr(res, "model_copy"):
            update["image_resource"] = res.model_copy()
        return node.model_copy(update=update)
    except Exception:  # noqa: BLE001 - not a pydantic node: read it when assembling, as it is then
        return node


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def to_nodes(snap: Snapshot) -> list[RetrievedNode]:
    """RetrievedNodes (rank = list order) from a snapshot of NodeWithScores.

    Built with ``model_construct``: every field is already of its declared type here, and validation would only
    cost time. An image node's image is read here (into the metadata the judge client turns into image blocks).
    """
    out = []
    for text, nid, score, meta, image in snap:
        if image is not None:
            meta = node_from_llama_image_node(image).metadata
        out.append(RetrievedNode.model_construct(text=str(text), id=None if nid is None else str(nid),
                                                 score=None if score is None else float(score),
                                                 metadata={str(k): _jsonable(v) for k, v in meta.items()}))
    return out


def _query_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return getattr(value, "query_str", None) or str(value)


@dataclass
class Record:
    """What one outermost query, chat or retrieval call did, assembled from its spans and events."""

    kind: str  # "query" | "chat" | "retrieve"
    span_id: str
    engine: str
    input: str | None
    started: float = field(default_factory=time.time)
    retrievals: list[tuple[str | None, list]] = field(default_factory=list)  # top-level retrievals, in order
    nested_retrievals: int = 0
    reranks: list[list] = field(default_factory=list)
    output: str | None = None
    final: list | None = None  # the nodes handed to the LLM (response.source_nodes), when the response has them
    streamed: bool = False
    stream_completed: bool = True
    latency_ms: float | None = None
    golden_id: str | None = None
    golden_index: int | None = None
    retrieved_objects: list | None = None  # the retriever's NodeWithScores, to spot a list no postprocessor touched
    agent: dict[str, Any] | None = None  # provenance.AGENT_KEY: set when the call ran inside an agent's tool call
    user_message: str | None = None  # the message that started the agent's turn (the case's input then)
    agent_output: str | None = None  # the agent's final answer (the case's actual_output then)
    name: str | None = None  # the case's name, for agent cases
    tags: dict[str, Any] | None = None  # the instrument tags active when the call began
    retriever: str | None = None  # the class of the (first) retriever the call ran
    otel: dict[str, Any] | None = None  # the app's OpenTelemetry span when the call began (otel.span_context_now)
    retriever_otel: dict[str, Any] | None = None  # ... and when the (first) retrieval began
    from_tool: bool = False  # a tool's output captured as a retrieval (instrument(retrieval_tools=...))

    @property
    def conversation_id(self) -> str | None:
        """The conversation the call belongs to, from its instrument tags (``instrument_tags(conversation_id=)``)."""
        tags = self.tags or {}
        found = next((tags[k] for k in _CONVERSATION_TAGS if tags.get(k) not in (None, "")), None)
        return None if found is None else str(found)

    @property
    def retrieval_query(self) -> str | None:
        """The question the (first) retrieval ran with: the rewritten standalone question in condense modes."""
        return self.retrievals[0][0] if self.retrievals else None

    @property
    def retrieved(self) -> list | None:
        """The retriever's ranking: the top-level retrieval, or all of them in order when there were several."""
        if not self.retrievals:
            return None
        if len(self.retrievals) == 1:
            return self.retrievals[0][1]
        seen, out = set(), []
        for _, snap in self.retrievals:
            for item in snap:
                key = item[1] or item[0]
                if key not in seen:
                    seen.add(key)
                    out.append(item)
        return out

    def contexts(self) -> tuple[list[RetrievedNode] | None, dict[str, Any]]:
        """The retrieval_context to score (the list that went to the LLM) and metadata describing the rankings."""
        retrieved = self.retrieved
        # An empty final list is what the LLM saw when postprocessors left no node: scored as it is (the empty-context
        # rule), never replaced by the retriever's ranking, which is kept beside it. Without a retrieval in the call
        # (a chat engine that did not retrieve), there is nothing to score.
        final = self.final if self.final is not None and retrieved is not None else retrieved
        meta: dict[str, Any] = {}
        if final is None:
            return None, meta
        if retrieved is not None and [i[1] for i in retrieved] != [i[1] for i in final]:
            meta["reranked"] = True
            meta["retriever_ranking"] = [n.model_dump() for n in to_nodes(retrieved)]
            meta["final_ranking_ids"] = [i[1] for i in final]
        if self.reranks:
            meta["reranker_rankings"] = [[i[1] for i in snap] for snap in self.reranks]
        if len(self.retrievals) > 1:
            meta["retrievals"] = [{"query": q, "ids": [i[1] for i in snap]} for q, snap in self.retrievals]
        if self.nested_retrievals:
            meta["nested_retrievals"] = self.nested_retrievals
        return to_nodes(final), meta

    def base_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"source": "llama_index", "kind": self.kind, "engine": self.engine,
                                "span_id": self.span_id}
        if self.from_tool:
            meta["tool_output_retrieval"] = True
        if self.latency_ms is not None:
            meta["latency_ms"] = round(self.latency_ms, 3)
        if self.streamed:
            meta["streamed"] = True
            meta["stream_completed"] = self.stream_completed
        return meta


class Sink:
    """Where finished records go: the global capture or an engine wrapper."""

    def deliver(self, record: Record) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def deliver_turn(self, turn: AgentRun) -> None:
        """An agent's or workflow's finished run that belongs to a conversation (see ``AgentRun.conversation``).
        Only sinks that assemble conversations keep it."""
        return None

    def note_root(self, retrievals: int, seen: dict[str, Any] | None) -> None:
        """One of the app's top-level calls ended with ``retrievals`` retrievals (``CaptureSession.note_root``)."""
        return None


def _text(value: Any) -> str | None:
    """The text of a user message, a chat message, an agent output or a response."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    for attr in ("response", "content", "text", "message", "result"):
        inner = getattr(value, attr, None)
        if inner is not None and inner is not value:
            return _text(inner)
    return str(value)


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
            return _text(value)
    try:
        history = get("chat_history", None)
    except Exception:  # noqa: BLE001
        history = None
    for msg in reversed(list(history or ())):
        if str(getattr(getattr(msg, "role", None), "value", getattr(msg, "role", ""))) == "user":
            return _text(msg)
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
                return _text(vals[0])
            return ", ".join(f"{k}={v}" for k, v in value.items()) if value else None
        return _text(value)


class _ToolSink(Sink):
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


class _Unit:
    __slots__ = ("record", "sink", "t0", "done", "span_ids")

    def __init__(self, record: Record, sink: Sink) -> None:
        self.record = record
        self.sink = sink
        self.t0 = time.perf_counter()
        self.done = False
        self.span_ids = [record.span_id]


class ContextJudgeSpanHandler(BaseSpanHandler[Any]):
    """Forwards span enter/exit/drop to the router; keeps no spans of its own (``open_spans`` stays empty).

    It reaches the process's one router as a module global: a pydantic private attribute costs a slow
    ``__getattr__`` on every one of the dozens of spans a query opens.
    """

    @classmethod
    def class_name(cls) -> str:
        return "ContextJudgeSpanHandler"

    def span_enter(self, id_: str, bound_args: Any, instance: Any = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            router.enter(id_, bound_args, instance, parent_id, tags)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: llama_index span handler failed on enter")

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        try:
            router.exit(id_, instance, result)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: llama_index span handler failed on exit")

    def span_drop(self, id_: str, bound_args: Any, instance: Any = None, err: BaseException | None = None,
                  **kwargs: Any) -> None:
        try:
            router.drop(id_, instance, err)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: llama_index span handler failed on drop")

    def new_span(self, id_: str, bound_args: Any, instance: Any = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None,
                             **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: Any, instance: Any = None,
                             err: BaseException | None = None, **kwargs: Any) -> None:
        return None


class ContextJudgeEventHandler(BaseEventHandler):
    """Records retrieval and rerank events under the unit their span belongs to."""

    @classmethod
    def class_name(cls) -> str:
        return "ContextJudgeEventHandler"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if type(event).__name__ not in _RECORDED_EVENTS:
            return  # most of a query's events: nothing to record, so not even a call
        try:
            router.event(event)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: llama_index event handler failed")


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
        conversation: Any = next((str(tags[k]) for k in _CONVERSATION_TAGS if tags.get(k)), None)
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
            name = _method_of(id_)
            if name not in run.steps and len(run.steps) < 20:
                run.steps.append(name)
        elif _method_of(id_) in _LLM_METHODS:
            run.llm_calls += 1
        if call is None and instance is None and step is None:  # a step of the run (steps are spans of no instance)
            step = _method_of(id_)
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
            call.output = _text(getattr(result, "tool_output", result))
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
            output = _text(final)
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


class Router:
    """Owns the two root-dispatcher handlers and routes spans and events to units and units to sinks.

    A process has one router (LlamaIndex's root dispatcher is process-global); its state is guarded by a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, tuple[_Unit, bool, bool]] = {}  # span id -> (unit, is retrieval span, under one)
        self._streams: dict[int, tuple[_Unit, Any]] = {}  # id(StreamingAgentChatResponse) -> unit awaiting its end
        self._runs = AgentRuns()  # the agent and workflow runs in flight, by span
        self._kinds: dict[type, str | None] = {}
        self._users = 0
        self.global_sink: Sink | None = None
        self._span_handler: ContextJudgeSpanHandler | None = None
        self._event_handler: ContextJudgeEventHandler | None = None

    # ------------------------------------------------------------------------------------------ install
    @property
    def installed(self) -> bool:
        return self._span_handler is not None

    def acquire(self) -> None:
        """One more user (the global capture or a wrapper) needs the handlers; install them on the first."""
        with self._lock:
            self._users += 1
            if self._span_handler is None:
                self._install()

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0 and self._span_handler is not None:
                self._uninstall()

    def _install(self) -> None:
        from llama_index.core.instrumentation import get_dispatcher  # noqa: PLC0415

        sh, eh = ContextJudgeSpanHandler(), ContextJudgeEventHandler()
        root = get_dispatcher()
        # Remove handlers a previous router left behind (e.g. a module reload), then add ours once.
        root.span_handlers = [h for h in root.span_handlers if type(h).__name__ != "ContextJudgeSpanHandler"] + [sh]
        root.event_handlers = [h for h in root.event_handlers if type(h).__name__ != "ContextJudgeEventHandler"] + [eh]
        self._span_handler, self._event_handler = sh, eh

    def _uninstall(self) -> None:
        from llama_index.core.instrumentation import get_dispatcher  # noqa: PLC0415

        root = get_dispatcher()
        root.span_handlers = [h for h in root.span_handlers if h is not self._span_handler]
        root.event_handlers = [h for h in root.event_handlers if h is not self._event_handler]
        self._span_handler = self._event_handler = None
        self._spans.clear()
        self._streams.clear()
        self._runs.clear()

    # ------------------------------------------------------------------------------------------ spans
    def _kind(self, instance: Any, span_id: str) -> str | None:
        if instance is None:
            return None
        cls = type(instance)
        kind = self._kinds.get(cls, "?")
        if kind == "?":
            kind = None
            if not getattr(cls, "_contextjudge_transparent", False):
                for c in cls.__mro__:
                    k = _KINDS.get(c.__name__)
                    if k is not None and c.__module__.startswith(_MODULES):
                        kind = k
                        break
            self._kinds[cls] = kind
        if kind is None or _method_of(span_id) not in _METHODS[kind]:
            return None
        return kind

    def enter(self, id_: str, bound_args: Any, instance: Any, parent_id: str | None,
              tags: dict[str, Any] | None) -> None:
        parent = self._spans.get(parent_id) if parent_id is not None else None
        if parent is not None:
            # single dict operations are atomic: the lock guards compound updates only
            unit = parent[0]
            retrieval = False
            # most spans (LLMs, synthesizers, splitters) belong to classes already known to be none of ours
            if instance is not None and self._kinds.get(type(instance), "?") is not None:
                retrieval = self._kind(instance, id_) == "retrieve"
                if retrieval and not parent[1] and not parent[2] and unit.record.retriever is None:
                    # the first top-level retrieval: its retriever, and where it sits in the app's trace
                    unit.record.retriever = type(instance).__name__
                    unit.record.retriever_otel = span_context_now()
            self._spans[id_] = (unit, retrieval, parent[1] or parent[2])
            unit.span_ids.append(id_)
            return
        in_run = self._runs.get(parent_id)
        kind = self._kind(instance, id_)
        if in_run is not None:
            if kind is None or kind == "workflow":  # a step, a tool, an LLM call, a nested workflow: part of the run
                self._runs.span(in_run, id_, bound_args, instance)
                return
        elif kind is None:
            return
        sink = current_sink.get() or self.global_sink
        if sink is None:
            return
        if tags and (JUDGE_TAG in tags or "contextjudge.judge" in tags):
            return  # a judge's own LlamaIndex traffic is never a test case
        if in_judge_call():
            return  # the same, for judge traffic that carries no tag: the judge call's context says so
        args = getattr(bound_args, "arguments", {}) or {}
        if kind == "workflow":
            self._runs.enter(id_, args, instance, sink)
            return
        if in_run is not None:
            run, call, _ = in_run
            if call is None:  # an engine called by a workflow's own step (no tool): the step stands for the tool
                call = self._runs.step_call(in_run, parent_id)  # type: ignore[arg-type]
            sink = _ToolSink(call, current_sink.get() or run.sink)
        first = args.get("message", args.get("str_or_query_bundle"))
        if first is None and args:
            first = next(iter(args.values()))
        record = Record(kind=kind, span_id=id_, engine=type(instance).__name__, input=_query_text(first))
        if in_run is not None and call is not None and call.tool_input is None:
            call.tool_input = record.input  # a workflow step's engine call: its query is the "tool's" input
        if tags:
            record.golden_id = golden_id_of(tags)
            idx = tags.get(GOLDEN_INDEX_TAG)
            record.golden_index = idx if isinstance(idx, int) else None
            record.tags = dict(tags)
        record.otel = span_context_now()  # the request's span, read on the app's thread (None without OpenTelemetry)
        if kind == "retrieve":
            record.retriever = record.engine
        self._spans[id_] = (_Unit(record, sink), kind == "retrieve", False)

    def exit(self, id_: str, instance: Any, result: Any) -> None:
        entry = self._spans.pop(id_, None)
        if self._streams and instance is not None and _method_of(id_) in _WRITERS:
            with self._lock:
                waiting = self._streams.pop(id(instance), None)
            if waiting is not None:
                unit, response = waiting
                self._finish(unit, getattr(response, "response", None), getattr(response, "source_nodes", None))
        self._runs.exit(id_, result)
        if entry is None:
            return
        unit = entry[0]
        if unit.record.span_id != id_:
            return
        self._root_exit(unit, result)

    def drop(self, id_: str, instance: Any, err: BaseException | None) -> None:
        with self._lock:
            entry = self._spans.pop(id_, None)
            waiting = self._streams.pop(id(instance), None) if self._streams and instance is not None else None
        if waiting is not None:  # the stream failed while being written: that call produced no answer
            self._discard(waiting[0], err)
        self._runs.drop(id_, err)
        if entry is not None and entry[0].record.span_id == id_:
            self._discard(entry[0], err)

    def _discard(self, unit: _Unit, err: BaseException | None) -> None:
        unit.done = True
        self._forget(unit)
        logger.debug("contextjudge: %s %s raised %r; no test case captured", unit.record.engine,
                     unit.record.kind, err)

    def _forget(self, unit: _Unit) -> None:
        """Drop the unit's spans that are still open (a stream's writer, a span that never closed)."""
        for k in unit.span_ids:
            self._spans.pop(k, None)

    # ------------------------------------------------------------------------------------------ events
    def event(self, event: Any) -> None:
        name = type(event).__name__
        if name == "RetrievalEndEvent":
            entry = self._spans.get(event.span_id) if event.span_id else None
            if entry is None:
                return
            unit, _, nested = entry
            if nested:
                unit.record.nested_retrievals += 1
                return
            snap = _snapshot(event.nodes)
            with self._lock:
                unit.record.retrievals.append((_query_text(event.str_or_query_bundle), snap))
                unit.record.retrieved_objects = list(event.nodes)  # held, so no object id can be reused
        elif name == "ReRankEndEvent":
            entry = self._spans.get(event.span_id) if event.span_id else None
            if entry is not None:
                snap = _snapshot(event.nodes)
                with self._lock:
                    entry[0].record.reranks.append(snap)

    # ------------------------------------------------------------------------------------------ finishing
    def _root_exit(self, unit: _Unit, result: Any) -> None:
        record = unit.record
        if record.kind == "retrieve":
            self._finish(unit, None, None)
            return
        cls_name = type(result).__name__
        if cls_name == "StreamingResponse" and getattr(result, "response_gen", None) is not None:
            record.streamed = True
            result.response_gen = _wrap_gen(result.response_gen,
                                            lambda text, done: self._stream_done(unit, result, text, done))
            self._forget(unit)
            return
        if cls_name == "AsyncStreamingResponse" and getattr(result, "response_gen", None) is not None:
            record.streamed = True
            result.response_gen = _wrap_agen(result.response_gen,
                                             lambda text, done: self._stream_done(unit, result, text, done))
            self._forget(unit)
            return
        if cls_name == "StreamingAgentChatResponse":
            record.streamed = True
            with self._lock:
                if not getattr(result, "is_done", False):
                    self._streams[id(result)] = (unit, result)
                    return
            self._finish(unit, getattr(result, "response", None), getattr(result, "source_nodes", None))
            return
        self._finish(unit, _response_text(result), getattr(result, "source_nodes", None))

    def _stream_done(self, unit: _Unit, response: Any, text: str, completed: bool) -> None:
        try:
            unit.record.stream_completed = completed
            self._finish(unit, text, getattr(response, "source_nodes", None))
        except Exception:  # noqa: BLE001 - runs inside the user's iteration of the stream
            logger.exception("contextjudge: could not finish a streamed llama_index response")

    def _finish(self, unit: _Unit, output: Any, source_nodes: Any) -> None:
        if unit.done:
            return
        unit.done = True
        record = unit.record
        record.latency_ms = (time.perf_counter() - unit.t0) * 1000.0
        record.output = None if output is None else str(output)
        if source_nodes is not None and not source_nodes and record.retrievals:
            record.final = []  # the postprocessors left no node: the LLM saw none
        elif source_nodes:
            objs = record.retrieved_objects
            snap = record.retrievals[0][1] if len(record.retrievals) == 1 else None
            if (snap is not None and objs is not None and len(objs) == len(source_nodes)
                    and all(a is b and t[2] == b.score and t[0] == _text_of(getattr(b, "node", b))
                            for a, b, t in zip(objs, source_nodes, snap, strict=False))):
                # untouched by postprocessors: the same nodes in the same order, with the same scores and texts
                # (a sentence-window postprocessor swaps each node's text in place: then the new text is scored)
                record.final = record.retrievals[0][1]
            else:
                record.final = _snapshot(source_nodes)
        record.retrieved_objects = None
        self._forget(unit)
        try:
            unit.sink.deliver(record)
            unit.sink.note_root(len(record.retrievals), None if record.retrievals else {"engines": [record.engine]})
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not turn a llama_index %s into a test case", record.kind)


def _response_text(result: Any) -> str | None:
    if result is None:
        return None
    resp = getattr(result, "response", None)
    if isinstance(resp, str):
        return resp
    if resp is not None:
        dump = getattr(resp, "model_dump_json", None)
        return dump() if callable(dump) else str(resp)
    if isinstance(result, str):
        return result
    return None


def _wrap_gen(gen: Iterator[str], on_done: Callable[[str, bool], None]) -> Iterator[str]:
    """Yield what ``gen`` yields; when it ends (or is closed), report the text it produced."""
    parts: list[str] = []
    completed = False
    try:
        for token in gen:
            parts.append(token)
            yield token
        completed = True
    finally:
        on_done("".join(parts), completed)


async def _wrap_agen(agen: AsyncIterator[str], on_done: Callable[[str, bool], None]) -> AsyncIterator[str]:
    parts: list[str] = []
    completed = False
    try:
        async for token in agen:
            parts.append(token)
            yield token
        completed = True
    finally:
        on_done("".join(parts), completed)


router = Router()

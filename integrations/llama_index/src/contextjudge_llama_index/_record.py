"""The record of one captured call, and the sinks records go to.

A ``Record`` is what one outermost query, chat or retrieval call did (its retrievals and reranks as snapshots, its
answer, its tags and OpenTelemetry span); the capture router (``_capture``) fills it, an agent's run (``_agents``)
adds its turn, and ``_cases`` assembles the test case from it. A ``Sink`` is where a finished record goes: the global
capture or an engine wrapper; ``current_sink`` names the wrapper whose call is running.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextjudge import RetrievedNode

from ._snapshots import to_nodes

__all__ = ["CONVERSATION_TAG", "CONVERSATION_TAGS", "GOLDEN_INDEX_TAG", "AgentTurn", "Record", "Sink", "current_sink"]

GOLDEN_INDEX_TAG = "contextjudge.golden_index"
CONVERSATION_TAG = "contextjudge.conversation_id"
"""An instrument tag that makes an agent's or workflow's runs one conversation (see ``AgentRun.conversation``)."""
CONVERSATION_TAGS = (CONVERSATION_TAG, "conversation_id", "thread_id", "session_id")


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
        found = next((tags[k] for k in CONVERSATION_TAGS if tags.get(k) not in (None, "")), None)
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


class AgentTurn(Protocol):
    """What a sink reads of an agent's or workflow's finished run to make it a turn of a conversation
    (``_agents.AgentRun`` is one; a Protocol here, since the agents' module imports this one)."""

    @property
    def span_id(self) -> str: ...
    @property
    def agent(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def user_message(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...
    @property
    def otel(self) -> dict[str, Any] | None: ...
    @property
    def tags(self) -> dict[str, Any]: ...
    @property
    def conversation(self) -> Any: ...
    def records(self) -> list[Record]: ...
    def turn_contexts(self) -> tuple[list[RetrievedNode] | None, dict[str, Any]]: ...


class Sink:
    """Where finished records go: the global capture or an engine wrapper."""

    def deliver(self, record: Record) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def deliver_turn(self, turn: AgentTurn) -> None:
        """An agent's or workflow's finished run that belongs to a conversation (see ``AgentRun.conversation``).
        Only sinks that assemble conversations keep it."""
        return None

    def note_root(self, retrievals: int, seen: dict[str, Any] | None) -> None:
        """One of the app's top-level calls ended with ``retrievals`` retrievals (``CaptureSession.note_root``)."""
        return None


# The sink an engine wrapper routes its own calls to; set only for the duration of a wrapper call.
current_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("contextjudge_llama_index_sink",
                                                                            default=None)

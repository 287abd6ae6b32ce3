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
is assembled from them later, on the scorer's worker thread or when first read (``_lazy_case.LazyCase``).

This module is the router and its two handlers; the record of a call is ``_record``, the copies of its nodes
``_snapshots``, agents' and workflows' runs ``_agents``, streamed answers ``_responses``.

Everything here runs inside LlamaIndex calls, so every failure is logged and contained.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from contextjudge.capture import JUDGE_TAG, in_judge_call
from contextjudge.cases.identity import golden_id_of
from contextjudge.otel import span_context_now

from ._agents import AgentRuns, ToolSink
from ._kinds import KINDS as _KINDS
from ._kinds import MODULES as _MODULES
from ._kinds import method_of
from ._record import GOLDEN_INDEX_TAG, Record, Sink, current_sink
from ._responses import response_text, wrap_agen, wrap_gen
from ._snapshots import node_text, query_text, snapshot

try:  # the instrumentation package split out of llama-index-core in 0.12
    from llama_index_instrumentation.event_handlers import BaseEventHandler
    from llama_index_instrumentation.span_handlers import BaseSpanHandler
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # type: ignore[no-redef]
    from llama_index.core.instrumentation.span_handlers import BaseSpanHandler  # type: ignore[no-redef]


__all__ = ["Router", "router"]

logger = logging.getLogger("contextjudge")

_METHODS = {
    "query": frozenset({"query", "aquery"}),
    "retrieve": frozenset({"retrieve", "aretrieve"}),
    "chat": frozenset({"chat", "achat", "stream_chat", "astream_chat"}),
    "workflow": frozenset({"run"}),
}
_WRITERS = frozenset({"write_response_to_history", "awrite_response_to_history"})
_RECORDED_EVENTS = frozenset({"RetrievalEndEvent", "ReRankEndEvent"})  # what Router.event looks at


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
        if kind is None or method_of(span_id) not in _METHODS[kind]:
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
            sink = ToolSink(call, current_sink.get() or run.sink)
        first = args.get("message", args.get("str_or_query_bundle"))
        if first is None and args:
            first = next(iter(args.values()))
        record = Record(kind=kind, span_id=id_, engine=type(instance).__name__, input=query_text(first))
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
        if self._streams and instance is not None and method_of(id_) in _WRITERS:
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
            snap = snapshot(event.nodes)
            with self._lock:
                unit.record.retrievals.append((query_text(event.str_or_query_bundle), snap))
                unit.record.retrieved_objects = list(event.nodes)  # held, so no object id can be reused
        elif name == "ReRankEndEvent":
            entry = self._spans.get(event.span_id) if event.span_id else None
            if entry is not None:
                snap = snapshot(event.nodes)
                with self._lock:
                    entry[0].record.reranks.append(snap)

    # ------------------------------------------------------------------------------------------ finishing
    def _root_exit(self, unit: _Unit, result: Any) -> None:
        record = unit.record
        if record.kind == "retrieve":
            self._finish(unit, None, None)
            return
        cls_name = type(result).__name__
        wrap = {"StreamingResponse": wrap_gen, "AsyncStreamingResponse": wrap_agen}.get(cls_name)
        if wrap is not None and getattr(result, "response_gen", None) is not None:  # the answer is read as it streams
            record.streamed = True
            result.response_gen = wrap(result.response_gen,
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
        self._finish(unit, response_text(result), getattr(result, "source_nodes", None))

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
                    and all(a is b and t[2] == b.score and t[0] == node_text(getattr(b, "node", b))
                            for a, b, t in zip(objs, source_nodes, snap, strict=False))):
                # untouched by postprocessors: the same nodes in the same order, with the same scores and texts
                # (a sentence-window postprocessor swaps each node's text in place: then the new text is scored)
                record.final = record.retrievals[0][1]
            else:
                record.final = snapshot(source_nodes)
        record.retrieved_objects = None
        self._forget(unit)
        try:
            unit.sink.deliver(record)
            unit.sink.note_root(len(record.retrievals), None if record.retrievals else {"engines": [record.engine]})
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not turn a llama_index %s into a test case", record.kind)


router = Router()

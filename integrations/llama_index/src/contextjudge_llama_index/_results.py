"""From captured records to test cases, and from metric results back into LlamaIndex as events.

``ContextJudgeResultEvent`` is sent through the dispatcher ``contextjudge_llama_index`` (a child of the root, so
every root handler sees it), from inside a short span whose parent is the query's span: an observability tool
attaches the score to the query it belongs to, and a user's own event handler receives it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

from contextjudge import ConversationalTestCase, LLMTestCase, MetricResult, Turn
from contextjudge.capture import (
    CHAIN_KEY,
    RETRIEVER_NAME_KEY,
    RUN_METADATA_KEY,
    TAGS_KEY,
    THREAD_KEY,
    CapturedCase,
    CaptureSession,
    IdleConversations,
    no_retrieval_message,
    result_event,
)
from contextjudge.cases.identity import GOLDEN_ID_KEY, new_case_id
from contextjudge.cases.provenance import (
    AGENT_KEY,
    CHAIN_INPUT_KEY,
    GOLDEN_INDEX_KEY,
    MATCH_INPUTS_KEY,
    NO_RETRIEVAL_KEY,
    OTEL_KEY,
    short,
)
from contextjudge.errors import CaptureError
from contextjudge.otel import case_trace

try:
    from llama_index_instrumentation.base import BaseEvent
    from llama_index_instrumentation.span import active_span_id
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.events.base import BaseEvent  # type: ignore[no-redef]
    from llama_index.core.instrumentation.span import active_span_id  # type: ignore[no-redef]

from ._kinds import SHAPES
from ._record import AgentTurn, Record, Sink

__all__ = ["CaseSink", "ChatSession", "ContextJudgeResultEvent", "LazyCase", "conversation_case",
           "emit_result", "record_to_case"]

logger = logging.getLogger("contextjudge")

DISPATCHER_NAME = "contextjudge_llama_index"


class ContextJudgeResultEvent(BaseEvent):
    """One metric's result on one captured query or conversation, sent back through LlamaIndex's dispatcher.

    Its fields are the payload every framework reports a result with (``contextjudge.capture.result_event``):
    ``origin_id`` is the span of the query (or of the conversation's last chat call) that was scored; the event's
    own ``span_id`` is a short report span whose parent is that span.
    """

    metric: str
    score: float | None = None
    threshold: float = 0.5
    success: bool = False
    reason: str | None = None
    error: str | None = None
    error_type: str | None = None
    case_id: str
    origin_id: str | None = None
    source: str | None = None
    golden_id: str | None = None
    run_id: str | None = None
    input: Any = None
    evaluation_model: str | None = None
    conversation: bool = False  # a whole conversation was scored (input is None then), not one retrieval

    @classmethod
    def class_name(cls) -> str:
        return "ContextJudgeResultEvent"


# ---------------------------------------------------------------------------------------------------- cases
def record_to_case(record: Record) -> CapturedCase:
    """One query, retrieval or chat call as an ``LLMTestCase``.

    For a chat call whose retrieval ran with a rewritten standalone question, the input is that question (what the
    retrieval must be judged against) and the user's message is kept in ``additional_metadata["user_message"]``.
    """
    nodes, rank_meta = record.contexts()
    meta = record.base_metadata()
    meta.update(rank_meta)
    where = case_trace(record.otel, record.retriever_otel)
    if where is not None:
        meta[OTEL_KEY] = where
    if record.agent is not None:
        return _agent_case(record, nodes, meta)
    inp = record.input
    user_message = None
    rq = record.retrieval_query
    if record.kind == "chat":
        user_message = record.input
        meta["user_message"] = user_message
        if rq and rq != user_message:
            meta["retrieval_query"] = rq
            inp = rq
    elif rq and rq != inp:
        meta["retrieval_query"] = rq
    if not inp or not inp.strip():
        inp = rq or "(empty query)"
    if not record.retrievals:  # an engine call that retrieved nothing: its metrics say why there is no context
        meta[NO_RETRIEVAL_KEY] = no_retrieval_message({"engines": [record.engine]}, SHAPES)
    # named after the question, as LangChain's cases are (the user's own message for a chat call)
    tc = LLMTestCase(input=inp, actual_output=record.output, retrieval_context=nodes, additional_metadata=meta,
                     name=short(user_message or inp, 80))
    # goldens may be keyed on the user's own words
    return _captured(record, tc, user_message if user_message and user_message != inp else None)


def _user_tags(tags: dict[str, Any] | None) -> dict[str, Any]:
    """The app's own instrument tags: those contextjudge sets (golden id, golden index, conversation) left out."""
    return {k: v for k, v in (tags or {}).items() if k != GOLDEN_ID_KEY and not str(k).startswith("contextjudge.")}


def call_keys(record: Record, thread: str | None = None) -> dict[str, Any]:
    """What Sampling's filters and key read of a call (``contextjudge.capture``'s metadata keys): the engine (or
    agent), its retriever, the instrument tags (their names, and the tags themselves as the call's metadata) and
    the conversation."""
    tags = _user_tags(record.tags)
    out: dict[str, Any] = {CHAIN_KEY: (record.agent or {}).get("agent") or record.engine,
                           TAGS_KEY: list(tags), RUN_METADATA_KEY: tags}
    if record.retriever:
        out[RETRIEVER_NAME_KEY] = record.retriever
    thread = thread or record.conversation_id
    if thread:
        out[THREAD_KEY] = thread
    return out


def _captured(record: Record, tc: LLMTestCase, chain_input: str | None = None) -> CapturedCase:
    cmeta: dict[str, Any] = {"query_span_id": record.span_id, **call_keys(record)}
    if chain_input:
        cmeta[CHAIN_INPUT_KEY] = chain_input
    if record.golden_index is not None:
        cmeta[GOLDEN_INDEX_KEY] = record.golden_index
    return CapturedCase(test_case=tc, source="llama_index", root_run_id=record.span_id, metadata=cmeta,
                        golden_id=record.golden_id)


def _agent_case(record: Record, nodes: Any, meta: dict[str, Any]) -> CapturedCase:
    """A query or retrieval an agent's tool ran: the user's message in, the agent's final answer out, and the tool
    (its name, query and own answer) under ``provenance.AGENT_KEY``; goldens may also match the tool's query."""
    agent = dict(record.agent or {})
    meta[AGENT_KEY] = agent
    tool_output = record.output if record.kind != "retrieve" else None
    if agent.get("tool_output") is None and tool_output is not None:
        agent["tool_output"] = tool_output
    rq = record.retrieval_query or record.input
    if rq:
        meta["retrieval_query"] = rq
    others = [t for t in (record.input, rq) if t and t != agent.get("tool_input")]
    if others:
        meta[MATCH_INPUTS_KEY] = list(dict.fromkeys(others))
    inp = record.user_message or agent.get("tool_input") or rq or "(empty query)"
    tc = LLMTestCase(input=inp, actual_output=record.agent_output, retrieval_context=nodes, name=record.name,
                     additional_metadata=meta)
    return _captured(record, tc)


def turn_case(record: Record, golden: Any, session_id: str | None = None) -> CapturedCase:
    """One turn of a conversation as a single-turn case (for the single-turn metrics), when a golden matches it."""
    case = record_to_case(record)
    if session_id is not None:
        case.metadata[THREAD_KEY] = session_id  # sampled with its conversation
    tc = case.test_case
    if tc.expected_output is None and getattr(golden, "expected_output", None):
        tc.expected_output = golden.expected_output
    if getattr(golden, "id", None) and case.golden_id is None:
        case.golden_id = golden.id
    return case


def agent_conversation_case(runs: list[AgentTurn], conversation_id: str) -> CapturedCase:
    """An agent's runs that share a memory (or a conversation id) as one ``ConversationalTestCase``: each user turn
    is the message that started a run, each assistant turn the run's final answer with the nodes its tools
    retrieved (``retrieval_context``) and its tool calls (``additional_metadata["tool_calls"]``)."""
    turns: list[Turn] = []
    span_ids: list[str] = []
    for run in runs:
        nodes, a_meta = run.turn_contexts()
        a_meta.update({"source": "llama_index", "span_id": run.span_id, "agent_name": run.agent})
        turns.append(Turn(role="user", content=run.user_message or ""))
        turns.append(Turn(role="assistant", content=run.output or "", retrieval_context=nodes,
                          additional_metadata=a_meta))
        span_ids.append(run.span_id)
    extra = {OTEL_KEY: dict(runs[-1].otel)} if runs[-1].otel else {}  # the latest turn's trace
    tc = ConversationalTestCase(turns=turns, name=f"conversation: {short(runs[0].user_message, 60)}",
                                additional_metadata={"source": "llama_index", "engine": runs[0].workflow,
                                                     "session_id": conversation_id, "span_ids": span_ids,
                                                     "agent_name": runs[0].agent, "framework": "llama_index",
                                                     **extra})
    tags = _user_tags(runs[-1].tags)
    retrievers = [r.retriever for run in runs for r in run.records() if r.retriever]
    meta: dict[str, Any] = {"query_span_id": span_ids[-1], "session_id": conversation_id, "span_ids": span_ids,
                            THREAD_KEY: conversation_id, CHAIN_KEY: runs[-1].agent, TAGS_KEY: list(tags),
                            RUN_METADATA_KEY: tags}
    if retrievers:
        meta[RETRIEVER_NAME_KEY] = list(dict.fromkeys(retrievers))
    return CapturedCase(test_case=tc, source="llama_index", root_run_id=span_ids[-1], metadata=meta)


def conversation_case(records: list[Record], session_id: str, engine: str) -> CapturedCase:
    """A chat session's calls as a ``ConversationalTestCase``: each assistant turn carries its own retrieval.

    With the condense chat modes, the user turn's ``additional_metadata["retrieval_query"]`` is the rewritten
    standalone question the retrieval actually used.
    """
    turns: list[Turn] = []
    span_ids: list[str] = []
    for r in records:
        nodes, rank_meta = r.contexts()
        rq = r.retrieval_query
        user_meta = {"retrieval_query": rq} if rq and rq != r.input else None
        turns.append(Turn(role="user", content=r.input or "", additional_metadata=user_meta))
        a_meta = r.base_metadata()
        a_meta.update(rank_meta)
        if rq:
            a_meta["retrieval_query"] = rq
        turns.append(Turn(role="assistant", content=r.output or "", retrieval_context=nodes,
                          additional_metadata=a_meta))
        span_ids.append(r.span_id)
    extra = {OTEL_KEY: dict(records[-1].otel)} if records[-1].otel else {}  # the latest turn's trace
    tc = ConversationalTestCase(turns=turns, additional_metadata={"source": "llama_index", "engine": engine,
                                                                  "session_id": session_id, "span_ids": span_ids,
                                                                  **extra})
    meta: dict[str, Any] = {"query_span_id": span_ids[-1], "session_id": session_id, "span_ids": span_ids,
                            **call_keys(records[-1], session_id)}
    meta[CHAIN_KEY] = engine
    retrievers = [r.retriever for r in records if r.retriever]
    if retrievers:
        meta[RETRIEVER_NAME_KEY] = list(dict.fromkeys(retrievers))
    return CapturedCase(test_case=tc, source="llama_index", root_run_id=span_ids[-1], metadata=meta)


_ASSEMBLY_LOCK = threading.RLock()  # guards every LazyCase's one-time assembly (re-entrant: see LazyCase)


class LazyCase(CapturedCase):
    """A captured call whose ``LLMTestCase`` is assembled on first use, off the request path.

    The request path only creates this object and hands it to the scorer: the record it holds was snapshotted while
    the call ran (node texts, ids, scores and metadata copied as they were). ``test_case``, ``metadata`` and
    ``golden_id`` assemble it on first access, once, under a lock: on the scorer's worker thread in background
    mode, else on whichever thread first reads the case. Goldens are matched at assembly, before anyone sees the
    test case. If assembly fails, the failure is logged, the case leaves its scorer, and reading it raises
    ``CaptureError``. Copied or pickled, it becomes a plain ``CapturedCase``.
    """

    def __init__(self, record: Record) -> None:
        # Not CapturedCase.__init__: its three assembled fields are the properties below.
        self.source = "llama_index"
        self._case_id: str | None = None  # a uuid4 costs a system call: drawn on first read
        self.root_run_id = record.span_id
        self.results: list[MetricResult] = []
        self.captured_at = time.time()
        self._record: Record | None = record
        self._callbacks: list[Any] = []  # when_assembled callbacks (the session's golden matching)
        self._fields: list[Any] | None = None  # [test_case, metadata, golden_id] once assembled
        self._ready = False
        self._failed = False

    # ------------------------------------------------------------------------------------------ assembly
    @property
    def assembled(self) -> bool:
        """Whether the test case has been assembled (successfully or not)."""
        return self._ready or self._failed

    def assemble(self) -> bool:
        """Assemble now if not done yet; False when assembly failed (logged once)."""
        try:
            self._assembled()
        except CaptureError:
            return False
        return True

    def _assembled(self) -> list[Any]:
        if self._ready:
            return self._fields  # type: ignore[return-value]
        with _ASSEMBLY_LOCK:
            if self._fields is None:
                if self._failed:
                    raise CaptureError("contextjudge could not assemble this captured llama_index call (logged).")
                self._assemble()
            return self._fields

    def when_assembled(self, callback: Any) -> None:
        with _ASSEMBLY_LOCK:
            if not self._ready and not self._failed:
                self._callbacks.append(callback)
                return
        if self._ready:
            callback(self)

    def _assemble(self) -> None:
        record = self._record
        try:
            assert record is not None
            built = record_to_case(record)
            self._fields = [built.test_case, built.metadata, built.golden_id]
            # The callbacks read the fields being filled in: this thread holds the (re-entrant) assembly lock.
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback(self)
        except Exception as exc:  # noqa: BLE001 - a bug or an exotic node must not reach the app or the session
            self._fields = None
            self._failed = True
            logger.exception("contextjudge: could not turn a llama_index %s into a test case",
                             getattr(record, "kind", "call"))
            raise CaptureError("contextjudge could not assemble this captured llama_index call (logged).") from exc
        finally:
            self._record = None
            self._callbacks = []
        self._ready = True

    # ------------------------------------------------------------------------------------------ fields
    @property  # type: ignore[override]
    def case_id(self) -> str:
        if self._case_id is None:
            with _ASSEMBLY_LOCK:
                if self._case_id is None:
                    self._case_id = new_case_id()
        return self._case_id

    @case_id.setter
    def case_id(self, value: str) -> None:
        self._case_id = value

    @property  # type: ignore[override]
    def test_case(self) -> LLMTestCase:
        return self._assembled()[0]

    @test_case.setter
    def test_case(self, value: LLMTestCase) -> None:
        self._assembled()[0] = value

    @property  # type: ignore[override]
    def metadata(self) -> dict[str, Any]:
        return self._assembled()[1]

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._assembled()[1] = value

    @property  # type: ignore[override]
    def golden_id(self) -> str | None:
        return self._assembled()[2]

    @golden_id.setter
    def golden_id(self, value: str | None) -> None:
        self._assembled()[2] = value

    def __repr__(self) -> str:
        if not self.assemble():
            return f"LazyCase(case_id={self.case_id!r}, not assembled: capture failed)"
        return CapturedCase.__repr__(self)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, CapturedCase) or not self.assemble():
            return False
        if isinstance(other, LazyCase) and not other.assemble():
            return False
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(CapturedCase))

    __hash__ = None  # type: ignore[assignment] - like CapturedCase: mutable, compared by value

    def __reduce__(self) -> Any:
        return CapturedCase, tuple(getattr(self, f.name) for f in dataclasses.fields(CapturedCase))


def _held(obj: Any) -> Any:
    """A strong stand-in for ``weakref.ref(obj)`` (called, it returns ``obj``)."""
    return lambda: obj


class _Conversation:
    """An agent's runs that share a memory object or a conversation id."""

    __slots__ = ("id", "runs", "submitted", "memory")

    def __init__(self, conversation_id: str, memory: Any) -> None:
        self.id = conversation_id
        self.runs: list[AgentTurn] = []
        self.submitted = 0
        self.memory = memory  # a weak reference to the memory object that keys it, or None for a tag's id


class CaseSink(Sink):
    """Each finished call becomes one ``LLMTestCase`` handed to a session (assembled later: see ``LazyCase``).

    An agent's runs that share a memory object (``memory=``) or a conversation id (instrument tag
    ``contextjudge.conversation_id``) are also kept as one conversation, submitted as a ``ConversationalTestCase``
    once it has had no run for the session's ``conversation_idle`` seconds (default 300, checked off the request
    path; it is then forgotten, and later runs of it form a new case under the same conversation id, so sampling
    keeps the two together), and when the session is flushed or closed (then again, whole, if more turns came
    since). The per-tool-call ``LLMTestCase`` of each run is submitted as it ends, as for any agent run. At most
    ``max_conversations`` are followed at once (the least recently active is submitted and forgotten first).
    """

    max_conversations = 1000

    def __init__(self, scorer: CaptureSession, retrieval_tools: Any = ()) -> None:
        self.scorer = scorer
        # tools whose output is the context the agent answers from: captured as retrievals, by tool name
        self.retrieval_tools = frozenset([retrieval_tools] if isinstance(retrieval_tools, str)
                                         else (retrieval_tools or ()))
        self._conversations: dict[Any, _Conversation] = {}  # least recently active first
        # conversations keyed by a memory object that were submitted idle: the memory's id, so its later runs keep
        # the conversation id (and so the sampling decision)
        self._retired: OrderedDict[Any, _Conversation] = OrderedDict()
        self._lock = threading.Lock()
        self._drain_added = False
        idle = getattr(scorer, "conversation_idle", None)
        self._idle = IdleConversations(self._conversation_idle, idle)

    def deliver(self, record: Record) -> None:
        self.scorer.submit(LazyCase(record))

    def note_root(self, retrievals: int, seen: dict[str, Any] | None) -> None:
        self.scorer.note_root(retrievals, seen, SHAPES)

    def deliver_turn(self, turn: AgentTurn) -> None:
        key = turn.conversation
        memory = None
        if not isinstance(key, str):
            memory, key = key, ("memory", id(key))
        evicted: list[_Conversation] = []
        with self._lock:
            conv = self._conversations.pop(key, None)
            if conv is not None and conv.memory is not None and conv.memory() is not memory:
                evicted.append(conv)  # the memory that keyed it is gone and its id was reused: a new conversation
                conv = None
            if conv is None:
                ref = None
                if memory is not None:
                    try:
                        ref = weakref.ref(memory)
                    except TypeError:  # not weakly referenceable: held (and bounded by max_conversations)
                        ref = _held(memory)
                old = self._retired.pop(key, None)
                if isinstance(key, str):
                    conv_id = key
                elif old is not None and old.memory is not None and old.memory() is memory:
                    conv_id = old.id  # the same memory after it went idle: the same conversation
                else:
                    conv_id = new_case_id()
                conv = _Conversation(conv_id, ref)
            self._conversations[key] = conv  # the most recently active last
            while len(self._conversations) > self.max_conversations:
                evicted.append(self._conversations.pop(next(iter(self._conversations))))
            conv.runs.append(turn)
            if not self._drain_added:
                self._drain_added = True
                self.scorer.add_drain(self.submit_conversations)
        self._idle.touch(key)
        for old_conv in evicted:
            self._submit(old_conv)

    def _conversation_idle(self, key: Any) -> None:
        """The idle watch: submit a conversation that has had no run for ``conversation_idle`` seconds, and forget
        it (a memory-keyed one is remembered by its id only, bounded)."""
        with self._lock:
            conv = self._conversations.pop(key, None)
            if conv is None:
                return
            if conv.memory is not None:
                self._retired[key] = _Conversation(conv.id, conv.memory)
                while len(self._retired) > self.max_conversations:
                    self._retired.popitem(last=False)
        self._submit(conv)

    def submit_conversations(self, timeout: float | None = None) -> bool:
        """Submit every conversation with turns not submitted yet (a drain of the session: flush and close)."""
        with self._lock:
            convs = list(self._conversations.values())
        for conv in convs:
            self._submit(conv)
        return True

    def _submit(self, conv: _Conversation) -> None:
        with self._lock:
            if len(conv.runs) == conv.submitted:
                return
            conv.submitted = len(conv.runs)
            runs = list(conv.runs)
        self.scorer.submit(agent_conversation_case(runs, conv.id))


class ChatSession(Sink):
    """Collects one chat session's calls; ``end()`` turns them into one conversation for the scorer."""

    def __init__(self, scorer: CaptureSession, session_id: str, engine: str) -> None:
        self.scorer = scorer
        self.session_id = session_id
        self.engine = engine
        self.records: list[Record] = []
        self._submitted = 0
        self._lock = threading.Lock()
        idle = getattr(scorer, "conversation_idle", None)
        # the session so far is submitted once it has had no call for conversation_idle seconds, as end() does
        self._idle = IdleConversations(lambda _key: self.end(), idle)

    def deliver(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)
        self._idle.touch(self.session_id)

    def ordered(self) -> list[Record]:
        with self._lock:
            return sorted(self.records, key=lambda r: r.started)

    def build(self) -> CapturedCase | None:
        recs = self.ordered()
        return conversation_case(recs, self.session_id, self.engine) if recs else None

    def end(self) -> CapturedCase | None:
        """Submit the conversation so far, if it has calls not yet submitted; returns what was submitted.

        Each new turn that a golden matches (on the user's message, else the rewritten question its retrieval used)
        is also submitted as a single-turn case with the golden's expected output, for the single-turn metrics.
        """
        with self._lock:
            if len(self.records) == self._submitted:
                return None
            new = sorted(self.records[self._submitted:], key=lambda r: r.started)
            self._submitted = len(self.records)
        case = self.build()
        if case is not None:
            self.scorer.submit(case)
        goldens = getattr(self.scorer, "goldens", None)
        if goldens is not None and len(goldens):
            for record in new:
                golden = goldens.match(record.input) or goldens.match(record.retrieval_query)
                if golden is not None:
                    try:
                        self.scorer.submit(turn_case(record, golden, self.session_id))
                    except Exception:  # noqa: BLE001 - capture never breaks the app
                        logger.exception("contextjudge: could not make a test case of a chat turn")
        return case


# ---------------------------------------------------------------------------------------------------- events
@functools.lru_cache(maxsize=1)
def _reporter() -> Any:
    from llama_index.core.instrumentation import get_dispatcher  # noqa: PLC0415

    dispatcher = get_dispatcher(DISPATCHER_NAME)

    @dispatcher.span
    def report_contextjudge_result(fields: dict[str, Any]) -> None:
        dispatcher.event(ContextJudgeResultEvent(**fields))

    return report_contextjudge_result


def _report_in_context(query_span_id: str | None, fields: dict[str, Any]) -> None:
    active_span_id.set(query_span_id)
    _reporter()(fields)


def emit_result(case: CapturedCase, result: MetricResult, session: CaptureSession | None = None) -> None:
    """Send ``result`` through LlamaIndex's dispatcher, in a span whose parent is the scored query's span."""
    try:
        span = case.metadata.get("query_span_id")
        fields = result_event(case, result, run_id=None if session is None else session.run_id)
        # A fresh context: no span or tags of whatever thread happens to deliver the result leak into the report.
        contextvars.Context().run(_report_in_context, span, fields)
    except Exception:  # noqa: BLE001
        logger.exception("contextjudge: could not send a ContextJudgeResultEvent")

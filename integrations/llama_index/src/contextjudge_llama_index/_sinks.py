"""Where finished records go to become cases: ``CaseSink`` (each call a case handed to a session, an agent's runs
kept as conversations) and ``ChatSession`` (one chat session's calls as one conversation)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any

from contextjudge.capture import CapturedCase, CaptureSession, IdleConversations
from contextjudge.cases.identity import new_case_id

from ._cases import agent_conversation_case, conversation_case, turn_case
from ._kinds import SHAPES
from ._lazy_case import LazyCase
from ._record import AgentTurn, Record, Sink

__all__ = ["CaseSink", "ChatSession"]

logger = logging.getLogger("contextjudge")


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

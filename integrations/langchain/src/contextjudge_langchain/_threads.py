"""The handler's conversations: runs that share a thread id become one ``ConversationalTestCase``.

``Conversations`` keeps one log of turns per thread (least recently active first, at most ``limit()`` threads),
submits a thread to the session once it has been idle (``IdleConversations``), when it is evicted, and at
``submit_all`` (the handler's flush, close and ``submit_conversations``), and forgets it once submitted idle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextjudge import ConversationalTestCase, Turn
from contextjudge.capture import RETRIEVER_NAME_KEY, THREAD_KEY, CapturedCase, CaptureSession, IdleConversations
from contextjudge.cases.identity import new_case_id
from contextjudge.cases.provenance import OTEL_KEY

from ._assemble import final_answer, question_of
from ._runs import call_keys

logger = logging.getLogger("contextjudge")


@dataclass
class _ThreadLog:
    turns: list[tuple[Any, str, list[Turn]]] = field(default_factory=list)  # (start_time, root id, turns)
    submitted: int = 0
    golden_ids: list[str] = field(default_factory=list)
    latest: Any = None  # the latest turn's root run: its name, tags, metadata and trace describe the conversation
    retrievers: list[str] = field(default_factory=list)  # the retrievers its turns ran (Sampling's retriever filter)


class Conversations:
    """The threads one handler follows; ``idle`` is the session's ``conversation_idle`` (None: no idle watch) and
    ``limit`` says how many threads may be followed at once (read at each turn, so it can change)."""

    def __init__(self, session: CaptureSession, *, idle: float | None, limit: Callable[[], int]) -> None:
        self._session = session
        self._limit = limit
        self._lock = threading.Lock()
        self.threads: dict[str, _ThreadLog] = {}  # least recently active first
        self.idle = IdleConversations(self._thread_idle, idle)

    def submit_all(self) -> list[CapturedCase]:
        """Turn each thread with new turns into a ConversationalTestCase (the whole thread so far) and submit it."""
        with self._lock:
            todo = [(tid, log) for tid, log in self.threads.items() if len(log.turns) > log.submitted]
        return self._submit(todo)

    def _thread_idle(self, tid: str) -> None:
        """The idle watch: submit a thread that has had no turn for ``conversation_idle`` seconds, and forget it."""
        with self._lock:
            log = self.threads.pop(tid, None)
        if log is not None:
            self._submit([(tid, log)])

    def _submit(self, todo: list[tuple[str, _ThreadLog]]) -> list[CapturedCase]:
        out: list[CapturedCase] = []
        with self._lock:
            todo = [(tid, log) for tid, log in todo if len(log.turns) > log.submitted]
            for _, log in todo:
                log.submitted = len(log.turns)
            snapshot = [(tid, sorted(log.turns, key=lambda t: t[0]), list(log.golden_ids)) for tid, log in todo]
            latest_roots = {tid: log.latest for tid, log in todo}
            retrievers = {tid: list(log.retrievers) for tid, log in todo}
        for tid, entries, _golden_ids in snapshot:
            try:
                turns = [t for _, _, ts in entries for t in ts]
                case_id = new_case_id()
                root_ids = [rid for _, rid, _ in entries]
                extra: dict[str, Any] = {}
                latest = latest_roots.get(tid)
                if latest is not None and latest.otel is not None:
                    extra[OTEL_KEY] = dict(latest.otel)  # the results go into the latest turn's trace
                tc = ConversationalTestCase(turns=turns, name=f"thread:{tid}", id=case_id,
                                            additional_metadata={"thread_id": tid, "root_run_ids": root_ids, **extra})
                meta: dict[str, Any] = {THREAD_KEY: tid, "root_run_ids": root_ids}
                if latest is not None:
                    meta.update(call_keys(latest))
                if retrievers.get(tid):
                    meta[RETRIEVER_NAME_KEY] = retrievers[tid]
                captured = CapturedCase(test_case=tc, source=f"thread:{tid}", case_id=case_id,
                                        root_run_id=root_ids[-1], metadata=meta)
                self._session.submit(captured)
                out.append(captured)
            except Exception:  # noqa: BLE001 - capture never breaks the app
                logger.exception("contextjudge: could not build the conversation for thread %s", tid)
        return out

    def add_turn(self, thread_id: str, root: Any, found: list[Any], golden_id: str | None) -> None:
        """One exchange of the thread: the user's message, and the answer with every node retrieved in the turn
        (an agent's tool calls included; each call's tool and query are kept on the assistant turn)."""
        question = question_of(root.inputs) or (found[0].query if found else None)
        answer = final_answer(root.outputs) if not root.error else None
        if answer is None and found:
            answer = found[0].case.actual_output
        if not question or answer is None:
            return
        nodes = [n for item in found for n in (item.case.retrieval_context or [])]
        expected = next((i.case.expected_output for i in found if i.case.expected_output), None)
        if expected is None and len(self._session.goldens):
            g = self._session.goldens.match(question, golden_id)
            expected = g.expected_output if g is not None else None
        meta: dict[str, Any] = {"root_run_id": str(root.id)}
        calls = [{k: item.agent.get(k) for k in ("tool", "node", "tool_input", "call")} for item in found
                 if item.agent is not None]
        if calls:
            meta["agent_calls"] = calls
            meta["agent_name"] = root.name
        turns = [Turn(role="user", content=question),
                 Turn(role="assistant", content=answer, retrieval_context=nodes if found else None,
                      expected_output=expected, additional_metadata=meta)]
        evicted: list[tuple[str, _ThreadLog]] = []
        with self._lock:
            log = self.threads.pop(thread_id, None) or _ThreadLog()
            self.threads[thread_id] = log  # the most recently active last
            log.turns.append((root.start, str(root.id), turns))
            if log.latest is None or root.start >= log.latest.start:
                log.latest = root
            if golden_id:
                log.golden_ids.append(golden_id)
            for item in found:
                if item.name not in log.retrievers:
                    log.retrievers.append(item.name)
            while len(self.threads) > self._limit():
                oldest = next(iter(self.threads))
                evicted.append((oldest, self.threads.pop(oldest)))
        self.idle.touch(thread_id)
        for tid, _ in evicted:
            self.idle.discard(tid)
        if evicted:
            self._submit(evicted)

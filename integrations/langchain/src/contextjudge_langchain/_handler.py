"""The callback handler that turns LangChain runs into contextjudge test cases and sends the scores back.

``ContextJudgeCallbackHandler`` is a ``BaseTracer``: LangChain hands it every run of a chain, it keeps the run
tree, and when a root run ends it assembles one test case per retrieval (see ``_assemble``). It hands them to a
``contextjudge.capture.CaptureSession``, which fills expected outputs from goldens and scores, keeps or stores them
according to the mode. Each score then goes back into LangChain as the custom event ``contextjudge/metric_result``.

The handler never changes what the app sees: every callback only records, under a lock, inline; the judge runs on
the session's worker; and any exception in the handler is logged on the ``contextjudge`` logger and swallowed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager, CallbackManager
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers.base import BaseTracer

from contextjudge import ConversationalTestCase, MetricResult, Turn
from contextjudge.capture import (
    CHAIN_KEY,
    JUDGE_TAG,
    RETRIEVER_NAME_KEY,
    RUN_METADATA_KEY,
    TAGS_KEY,
    THREAD_KEY,
    CapturedCase,
    CaptureSession,
    IdleConversations,
    result_event,
)
from contextjudge.cases.identity import golden_id_of, new_case_id
from contextjudge.cases.provenance import OTEL_KEY
from contextjudge.otel import span_context_now

from . import _vectorstores
from ._assemble import (
    THREAD_KEYS,
    RunRecord,
    add_tool_retrievals,
    final_answer,
    question_of,
    retrievals,
    thread_id_of,
    walk,
)

__all__ = ["METRIC_RESULT_EVENT", "ContextJudgeCallbackHandler"]

_in_retriever = _vectorstores.in_retriever

logger = logging.getLogger("contextjudge")

METRIC_RESULT_EVENT = "contextjudge/metric_result"
"""Name of the custom event that carries one metric result back into LangChain."""

_MAX_TARGETS = 20_000


@dataclass
class _Target:
    """Where a root run's results go: the handlers, tags and metadata the root run was called with."""

    handlers: list[Any]
    tags: list[str]
    metadata: dict[str, Any]
    thread_id: str | None = None  # from config["configurable"], which LangChain keeps out of run metadata


@dataclass
class _ThreadLog:
    turns: list[tuple[Any, str, list[Turn]]] = field(default_factory=list)  # (start_time, root id, turns)
    submitted: int = 0
    golden_ids: list[str] = field(default_factory=list)
    latest: Any = None  # the latest turn's root run: its name, tags, metadata and trace describe the conversation
    retrievers: list[str] = field(default_factory=list)  # the retrievers its turns ran (Sampling's retriever filter)


class ContextJudgeCallbackHandler(BaseTracer):
    """Scores every retrieval of the LangChain runs it is attached to.

    Attach it per call (``config={"callbacks": [handler]}``), for a block (``with capture(...)``) or for the process
    (``instrument(...)``). ``metrics`` defaults to the four single-turn metrics plus turn relevancy; ``model`` is
    the judge (``"local"``, a model name, or a LangChain chat model); ``goldens`` (a list of dicts, a JSONL or a CSV
    path) fills ``expected_output``; ``mode`` is ``"background"``, ``"deferred"``, ``"off"`` or ``"worker"`` (only
    write the cases, for ``contextjudge worker``); ``store`` is a contextjudge store or a path/URL. Other keyword
    arguments go to ``CaptureSession`` (``sample_rate``, ``sampling``, ``budget``, ``judge_options``, ``max_queue``,
    ``max_kept``, ``concurrency``, ``on_result``, ``run_name``).
    ``session`` (also ``scorer``, its older name) is the ``CaptureSession`` the cases go to; ``instrument()``
    returns it, as LlamaIndex's ``instrument()`` does.

    ``retrieval_tools`` names the tools whose output is the context the model answers from (a web search, an MCP
    server's tool, a SQL tool): each call's output becomes a retrieval of that tool, its items ranked nodes (a list
    split into items, search-result dicts giving their text and url/id, a single string one node). A tool tagged
    ``contextjudge:retrieval`` or made with ``metadata={"contextjudge": "retrieval"}`` is captured the same way.

    Pass ``emit_events=False`` to keep results out of LangChain's callbacks. Runs that share a thread (a
    ``thread_id``, ``session_id`` or ``conversation_id`` in the config's ``configurable`` or ``metadata``, as a
    LangGraph checkpointer needs) also form one ``ConversationalTestCase`` for the turn metrics;
    ``conversations=False`` turns that off. A thread is submitted once it has had no turn for the session's
    ``conversation_idle`` seconds (default 300; checked on a thread of its own, off the request path) and then
    forgotten, and at ``flush``/``close`` (the whole thread so far); a thread that goes on after it was submitted
    idle comes back later as a new case with its new turns, sampled the same way (by its thread id). At most
    ``max_conversations`` threads are followed at once (the least recently active one is submitted first).

    Each case records what sampling filters on (``contextjudge.capture``'s metadata keys: the root run's name, its
    tags and metadata, the retriever's name and the thread) and, when the app traces with OpenTelemetry, the spans
    active when the root run and the retrieval began (``provenance.OTEL_KEY``), so ``contextjudge.otel`` can put the
    scores into that trace. A thread id given only in ``configurable`` is read from the config of the root's first
    child run: a bare retriever called as the root needs it in ``metadata``.

    It is a ``BaseTracer`` (so LangChain shares one instance across copied configs, as with its own tracers), but it
    records runs as light ``RunRecord`` objects in its own locked map instead of LangSmith ``RunTree`` models:
    building a RunTree per run cost more than the whole capture budget (``benchmarks/capture_overhead.py``).
    """

    name = "contextjudge"
    run_inline = True
    max_conversations = 10_000

    def __init__(
        self,
        metrics: Any = None,
        model: Any = None,
        goldens: Any = None,
        mode: str = "background",
        store: Any = None,
        *,
        emit_events: bool = True,
        conversations: bool = True,
        scorer: CaptureSession | None = None,
        session: CaptureSession | None = None,
        retrieval_tools: Any = (),
        **kwargs: Any,
    ) -> None:
        super().__init__()
        # tools whose output is the context the model answers from (web search, an MCP tool, SQL): by name
        self.retrieval_tools = frozenset([retrieval_tools] if isinstance(retrieval_tools, str)
                                         else (retrieval_tools or ()))
        self._lock = threading.Lock()
        session = session if session is not None else scorer
        self.session = session if session is not None else CaptureSession(
            metrics, model=model, goldens=goldens, mode=mode, store=store, **kwargs)  # type: ignore[arg-type]
        self.session.on_result.append(self._emit_result)
        self.session.add_drain(self._hand_over)
        self.session.add_sync(self._assembler_wait)
        self.session.handler = self
        self.emit_events = emit_events
        self.conversations = conversations
        self._ignored: set[int] = set()  # judge runs and their children, by UUID.int
        self._runs: dict[int, RunRecord] = {}  # open runs, by UUID.int
        self._noted: set[int] = set()  # open roots whose target is known
        self._clock = itertools.count()
        self._assembler = _Assembler(self._capture_root)
        self._targets: OrderedDict[int, tuple[Any, Any, Any, Any]] = OrderedDict()  # root run id (int) -> target
        # the latest root runs that retrieved nothing: root run id -> what they ran (CaptureSession.note_root)
        self.roots_without_retrieval: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._threads: dict[str, _ThreadLog] = {}  # least recently active first
        idle = getattr(self.session, "conversation_idle", None)
        self._idle = IdleConversations(self._thread_idle, idle) if conversations else None
        # vector stores called directly become retriever runs of this handler while it lives (_vectorstores)
        _vectorstores.acquire(self)
        self.session.add_close_hook(self.release_vector_stores)

    def release_vector_stores(self) -> None:
        """Stop capturing direct vector store calls for this handler; LangChain's own methods come back once no
        handler needs them (called by ``close()`` and ``uninstrument()``)."""
        _vectorstores.release(self)

    # ------------------------------------------------------------------------------------------ LangChain knobs
    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        """Always False: an error inside capture must never reach the user's chain."""
        return False

    @property
    def ignore_custom_event(self) -> bool:
        return True  # our own result events are for the other handlers

    def __repr__(self) -> str:
        return f"ContextJudgeCallbackHandler(mode={self.session.mode!r}, cases={len(self.session.cases)})"

    # ------------------------------------------------------------------------------------------ public access
    @property
    def mode(self) -> str:
        return self.session.mode

    @property
    def results(self) -> list[tuple[CapturedCase, MetricResult]]:
        """Every (captured case, metric result) pair scored so far."""
        self._assembler.wait()
        return self.session.results

    @property
    def test_cases(self) -> list[Any]:
        """The test cases captured so far (conversations join at ``flush()``)."""
        self._assembler.wait()
        return self.session.test_cases

    @property
    def cases(self) -> list[CapturedCase]:
        """The captured cases with their source, ids, metadata and results."""
        self._assembler.wait()
        return self.session.kept()

    def _assembler_wait(self) -> None:
        self._assembler.wait()

    def _hand_over(self, timeout: float | None) -> bool:
        """The session's drain: assemble the finished roots, then submit the open conversations; False when the
        roots could not all be assembled within ``timeout``."""
        if not self._assembler.wait(timeout):
            return False
        self.submit_conversations()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Close the open conversations, then wait until every captured case is scored."""
        return self.session.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async ``flush``: waits without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def score_deferred(self, **kwargs: Any) -> Any:
        """Score now the cases kept in "deferred"/"off" mode; returns the ``EvaluationResult``."""
        self._assembler.wait()
        self.submit_conversations()
        return self.session.score_deferred(**kwargs)

    def close(self, timeout: float | None = 30.0) -> bool:
        """Hand over, flush, stop the scoring worker and end the run; ``timeout`` bounds it all, once."""
        return self.session.close(timeout)

    def submit_conversations(self) -> list[CapturedCase]:
        """Turn each thread with new turns into a ConversationalTestCase (the whole thread so far) and submit it."""
        self._assembler.wait()
        with self._lock:
            todo = [(tid, log) for tid, log in self._threads.items() if len(log.turns) > log.submitted]
        return self._submit_threads(todo)

    def _thread_idle(self, tid: str) -> None:
        """The idle watch: submit a thread that has had no turn for ``conversation_idle`` seconds, and forget it."""
        with self._lock:
            log = self._threads.pop(tid, None)
        if log is not None:
            self._submit_threads([(tid, log)])

    def _submit_threads(self, todo: list[tuple[str, _ThreadLog]]) -> list[CapturedCase]:
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
                    meta.update(_call_keys(latest))
                if retrievers.get(tid):
                    meta[RETRIEVER_NAME_KEY] = retrievers[tid]
                captured = CapturedCase(test_case=tc, source=f"thread:{tid}", case_id=case_id,
                                        root_run_id=root_ids[-1], metadata=meta)
                self.session.submit(captured)
                out.append(captured)
            except Exception:  # noqa: BLE001 - capture never breaks the app
                logger.exception("contextjudge: could not build the conversation for thread %s", tid)
        return out

    # ------------------------------------------------------------------------------------------ run bookkeeping
    # Run ids are keyed by ``UUID.int``: hashing a UUID runs Python code, and this path runs for every run.
    def _open(self, run_type: str, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None,
              metadata: dict[str, Any] | None, name: str | None, inputs: Any,
              tool_call_id: str | None = None) -> None:
        try:
            key = run_id.int
            # where the run sits in the app's OpenTelemetry trace, read on the app's thread (None, at the cost of one
            # dict lookup, when the app does not use OpenTelemetry): the request's span, the retriever's span
            where = span_context_now() if parent_run_id is None or run_type == "retriever" else None
            with self._lock:
                if parent_run_id is None:
                    if tags and JUDGE_TAG in tags:
                        self._ignored.add(key)
                        return
                    run = self._runs[key] = RunRecord(run_id, None, run_id, run_type, name or run_type, inputs, tags,
                                                      metadata, next(self._clock))
                    run.otel = where
                    return
                parent_key = parent_run_id.int
                if parent_key in self._ignored or (tags and JUDGE_TAG in tags):
                    self._ignored.add(key)
                    return
                parent = self._runs.get(parent_key)
                if parent is None:  # its parent was never seen (e.g. a LangSmith @traceable): a root
                    run = RunRecord(run_id, None, run_id, run_type, name or run_type, inputs, tags, metadata,
                                    next(self._clock))
                else:
                    run = RunRecord(run_id, parent.id, parent.root_id, run_type, name or run_type, inputs, tags,
                                    metadata, next(self._clock))
                    parent.child_runs.append(run)
                if tool_call_id is not None:
                    run.tool_call_id = tool_call_id
                if parent is None and where is None:
                    where = span_context_now()
                run.otel = where
                self._runs[key] = run
                if parent is not None and run.root_id.int not in self._noted:
                    self._note_target(run, parent_run_id)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: capture failed on a run start; the run goes on uncaptured")

    def _close(self, run_id: UUID, outputs: Any = None, error: BaseException | None = None) -> None:
        try:
            key = run_id.int
            with self._lock:
                run = self._runs.pop(key, None)
                if run is None:
                    self._ignored.discard(key)  # a judge run, or one started before this handler was attached
                    return
                run.outputs = outputs
                if error is not None:
                    run.error = f"{type(error).__name__}: {error}"
                run.end = next(self._clock)
                if run.parent_run_id is None:
                    self._noted.discard(key)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: capture failed on a run end; the run goes on uncaptured")
            return
        if run.parent_run_id is None:
            self._assembler.put(run)  # assembled on a worker: the tree is complete and no callback touches it again

    def _note_target(self, run: RunRecord, parent_run_id: UUID) -> None:
        """Remember which handlers the root run was called with, for sending results back later.

        LangChain does not show a handler the callback manager, but a child run starts inside its parent's child
        config, whose callback manager carries the root's inheritable handlers.
        """
        config = var_child_runnable_config.get()
        manager = config.get("callbacks") if config else None
        if not isinstance(manager, BaseCallbackManager) or manager.parent_run_id != parent_run_id:
            return
        key = run.root_id.int
        self._noted.add(key)
        # kept as they are (LangChain makes a new manager, with new lists, for every child run): read into a
        # _Target only when a result is sent back or the case is assembled, off the request path
        self._targets[key] = (manager.inheritable_handlers, manager.inheritable_tags, manager.inheritable_metadata,
                              config.get("configurable"))
        if len(self._targets) > _MAX_TARGETS:
            self._targets.popitem(last=False)

    def _target(self, root_id: str) -> _Target | None:
        """Where a root run's results go (see ``_note_target``), or None when it was not noted or is forgotten."""
        try:
            key = UUID(root_id).int
        except (TypeError, ValueError):
            return None
        with self._lock:
            found = self._targets.get(key)
        if found is None:
            return None
        handlers, tags, metadata, configurable = found
        configurable = configurable or {}
        thread = next((str(configurable[k]) for k in THREAD_KEYS
                       if isinstance(configurable.get(k), (str, int)) and str(configurable[k])), None)
        return _Target(list(handlers), list(tags), dict(metadata), thread)

    def _persist_run(self, run: Any) -> None:
        """Required by BaseTracer; unused: finished roots go to ``_capture_root`` on the assembler thread."""

    # ------------------------------------------------------------------------------------------ assembly
    def _capture_root(self, root: Any) -> None:
        try:
            self._assemble_root(root)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not assemble test cases from LangChain run %s", root.id)

    def _assemble_root(self, root: Any) -> None:
        root_id = str(root.id)
        walked = walk(root)
        if any(r.run_type == "tool" for r, _ in walked) and add_tool_retrievals(root, self.retrieval_tools):
            walked = walk(root)  # with the retrieval tools' outputs as retrievals
        runs = [r for r, _ in walked]
        golden_id = None
        for r in runs:
            if not r.metadata:
                continue
            gid = golden_id_of(r.metadata)
            if gid is not None:
                golden_id = str(gid)
                break
        thread_id = thread_id_of(runs)
        target = self._target(root_id)
        if thread_id is None and target is not None:
            thread_id = target.thread_id
        found = retrievals(root, thread_id=thread_id, runs=walked)
        ran = None if found else _what_ran(root, runs)
        self.session.note_root(len(found), ran, SHAPES)
        if ran is not None:
            with self._lock:
                self.roots_without_retrieval[root_id] = ran  # read by contextjudge eval's adapter
                while len(self.roots_without_retrieval) > 1000:
                    self.roots_without_retrieval.popitem(last=False)
        keys = _call_keys(root)
        if thread_id is not None:
            keys[THREAD_KEY] = thread_id
        for item in found:
            meta = dict(item.case.additional_metadata or {})
            meta.update(keys)
            meta[RETRIEVER_NAME_KEY] = item.name
            captured = CapturedCase(test_case=item.case, source=item.name, root_run_id=root_id, metadata=meta,
                                    golden_id=golden_id)
            item.case.id = captured.case_id
            self.session.submit(captured)
        if not found and thread_id is None:
            with self._lock:
                self._targets.pop(root.id.int, None)  # nothing will be scored for this run
        if thread_id is not None and self.conversations and root.run_type not in ("llm", "chat_model"):
            self._add_turn(thread_id, root, found, golden_id)

    def _add_turn(self, thread_id: str, root: Any, found: list[Any], golden_id: str | None) -> None:
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
        if expected is None and len(self.session.goldens):
            g = self.session.goldens.match(question, golden_id)
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
            log = self._threads.pop(thread_id, None) or _ThreadLog()
            self._threads[thread_id] = log  # the most recently active last
            log.turns.append((root.start, str(root.id), turns))
            if log.latest is None or root.start >= log.latest.start:
                log.latest = root
            if golden_id:
                log.golden_ids.append(golden_id)
            for item in found:
                if item.name not in log.retrievers:
                    log.retrievers.append(item.name)
            while len(self._threads) > self.max_conversations:
                oldest = next(iter(self._threads))
                evicted.append((oldest, self._threads.pop(oldest)))
        if self._idle is not None:
            self._idle.touch(thread_id)
            for tid, _ in evicted:
                self._idle.discard(tid)
        if evicted:
            self._submit_threads(evicted)

    # ------------------------------------------------------------------------------------------ results back
    def _emit_result(self, case: CapturedCase, result: MetricResult) -> None:
        if not self.emit_events or case.root_run_id is None:
            return
        target = self._target(case.root_run_id)
        if target is None:
            return
        handlers = [h for h in target.handlers if not isinstance(h, ContextJudgeCallbackHandler)]
        if not handlers:
            return
        root_uuid = UUID(case.root_run_id)
        payload = result_event(case, result, run_id=self.session.run_id)
        manager = CallbackManager(handlers=handlers, inheritable_handlers=handlers, parent_run_id=root_uuid,
                                  tags=list(target.tags), inheritable_tags=list(target.tags),
                                  metadata=dict(target.metadata), inheritable_metadata=dict(target.metadata))
        # The root has ended by the time a score exists, so the event goes through a manager parented on the root
        # run; this is also what dispatch_custom_event does inside an open run (run_id = the enclosing run).
        manager.on_custom_event(METRIC_RESULT_EVENT, payload, run_id=root_uuid)

    # ------------------------------------------------------------------------------------------ callbacks
    # Each callback only records; nothing here may block or raise into the app.
    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, name: str | None = None, **kwargs: Any) -> None:
        # The prompt is kept as text: it is what tells which generation consumed which documents.
        self._open("llm", run_id, parent_run_id, tags, metadata, _name(serialized, name),
                   {"prompts": _LazyPrompts(messages)})

    def on_llm_start(self, serialized: Any, prompts: list[str], *, run_id: UUID, parent_run_id: UUID | None = None,
                     tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                     name: str | None = None, **kwargs: Any) -> None:
        self._open("llm", run_id, parent_run_id, tags, metadata, _name(serialized, name), {"prompts": prompts})

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        return None  # tokens add nothing a test case needs; the end event carries the whole text

    def on_retry(self, retry_state: Any, *, run_id: UUID, **kwargs: Any) -> None:
        return None

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, {"generations": response.generations})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                       run_type: str | None = None, name: str | None = None, **kwargs: Any) -> None:
        self._open(run_type or "chain", run_id, parent_run_id, tags, metadata, _name(serialized, name), inputs)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, inputs: Any = None, **kwargs: Any) -> None:
        self._close(run_id, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                      tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                      name: str | None = None, inputs: Any = None, tool_call_id: str | None = None,
                      **kwargs: Any) -> None:
        self._open("tool", run_id, parent_run_id, tags, metadata, _name(serialized, name),
                   inputs if inputs is not None else {"input": input_str}, tool_call_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, {"output": output})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, error=error)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                           name: str | None = None, **kwargs: Any) -> None:
        self._open("retriever", run_id, parent_run_id, tags, metadata, _name(serialized, name) or "Retriever",
                   {"query": query})
        # the retriever's own vector store calls are not retrievals of their own (LangChain runs retriever
        # callbacks inline, in the retriever's context: this marks the rest of its call)
        _in_retriever.set(_in_retriever.get() + 1)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        _in_retriever.set(max(0, _in_retriever.get() - 1))
        self._close(run_id, {"documents": documents})

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        _in_retriever.set(max(0, _in_retriever.get() - 1))
        self._close(run_id, error=error)


class _Assembler:
    """Turns finished root runs into test cases on a worker thread, so the app's call returns without waiting.

    Roots are handed over in batches: ``put`` only appends, and the worker wakes every ``interval`` seconds, when
    ``batch`` roots are waiting, or when someone waits for it, which saves a thread wake-up per call. The thread
    starts on demand and leaves after two idle seconds. ``wait()`` returns once everything handed over is assembled;
    the handler's accessors call it, so a case is visible as soon as its call has returned.
    """

    def __init__(self, work: Callable[[Any], None], *, interval: float = 0.05, batch: int = 64) -> None:
        self._work = work
        self._interval = interval
        self._batch = batch
        self._cond = threading.Condition()
        self._items: list[Any] = []
        self._pending = 0
        self._waiters = 0
        self._thread: threading.Thread | None = None

    def put(self, root: Any) -> None:
        with self._cond:
            self._items.append(root)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="contextjudge-assembler", daemon=True)
                self._thread.start()
            elif len(self._items) >= self._batch or self._waiters:
                self._cond.notify_all()

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                if not self._items:
                    self._cond.wait(self._interval)
                items, self._items = self._items, []
                if not items:
                    if time.monotonic() - idle_since > 2.0:
                        self._thread = None
                        return
                    continue
            idle_since = time.monotonic()
            for root in items:
                try:
                    self._work(root)
                except Exception:  # noqa: BLE001 - _work logs its own failures; this keeps the thread alive
                    logger.exception("contextjudge: test-case assembly failed")
            with self._cond:
                self._pending -= len(items)
                self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None and threading.current_thread() is self._thread:
            return True  # called from work running here: nothing to wait for
        with self._cond:
            self._waiters += 1
            try:
                self._cond.notify_all()
                return self._cond.wait_for(lambda: self._pending == 0, timeout)
            finally:
                self._waiters -= 1


SHAPES = ("retriever runs (a BaseRetriever's invoke/ainvoke, as_retriever(), create_retriever_tool, "
          "compression and ensemble retrievers) and VectorStore searches (similarity_search, "
          "similarity_search_with_score, similarity_search_with_relevance_scores, max_marginal_relevance_search, "
          "similarity_search_by_vector and their async forms) in any chain, graph node, tool or agent; tools named "
          "in retrieval_tools=")


def _what_ran(root: Any, runs: list[Any]) -> dict[str, Any]:
    """What a root run ran, for the warning about calls with no retrieval (``CaptureSession.note_root``)."""
    nodes, tools, llms = [], [], 0
    for r in runs:
        if r.run_type in ("llm", "chat_model"):
            llms += 1
        elif r.run_type == "tool":
            tools.append(r.name)
        node = (r.metadata or {}).get("langgraph_node")
        if isinstance(node, str) and not node.startswith("__") and node not in nodes:
            nodes.append(node)
    seen: dict[str, Any] = {"chains": [root.name] if root.run_type not in ("llm", "chat_model") else []}
    if nodes:
        seen["graph nodes"] = nodes
    if tools:
        seen["tools"] = tools
    seen["LLM calls"] = llms
    return seen


def _call_keys(root: Any) -> dict[str, Any]:
    """What Sampling's filters read of a root run (``contextjudge.capture``'s metadata keys): the chain's name, and
    the tags and metadata the call was made with."""
    return {CHAIN_KEY: root.name, TAGS_KEY: list(root.tags or ()), RUN_METADATA_KEY: dict(root.metadata or {})}


def _name(serialized: Any, name: str | None) -> str | None:
    """The run's name as LangChain's own tracers show it: the given name, else the serialized class name."""
    if name:
        return name
    if isinstance(serialized, dict):
        if serialized.get("name"):
            return str(serialized["name"])
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return None


class _LazyPrompts(list):
    """A chat model's prompt as text, rendered only if the assembly needs it (most runs never are)."""

    def __init__(self, messages: list[list[Any]]) -> None:
        super().__init__()
        self._messages = messages
        self._rendered = False

    def render(self) -> list[str]:
        if not self._rendered:
            from langchain_core.messages import get_buffer_string  # noqa: PLC0415

            self.extend(get_buffer_string(m) for m in self._messages)
            self._rendered = True
        return list(self)


_vectorstores.register(handler_cls=ContextJudgeCallbackHandler)

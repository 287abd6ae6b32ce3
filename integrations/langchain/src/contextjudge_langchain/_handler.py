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
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import CallbackManager
from langchain_core.tracers.base import BaseTracer

from contextjudge import MetricResult
from contextjudge.capture import (
    CapturedCase,
    CaptureSession,
    result_event,
)

from . import _vectorstores
from ._roots import Assembler, RootCases
from ._runs import RunBook
from ._threads import Conversations

if TYPE_CHECKING:
    import os

    from contextjudge.store import ResultsStore

__all__ = ["METRIC_RESULT_EVENT", "ContextJudgeCallbackHandler"]

_in_retriever = _vectorstores.in_retriever

logger = logging.getLogger("contextjudge")

METRIC_RESULT_EVENT = "contextjudge/metric_result"
"""Name of the custom event that carries one metric result back into LangChain."""

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
        store: ResultsStore | str | os.PathLike[str] | None = None,
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
        session = session if session is not None else scorer
        self.session = session if session is not None else CaptureSession(
            metrics, model=model, goldens=goldens, mode=mode, store=store, **kwargs)  # type: ignore[arg-type]
        self.session.on_result.append(self._emit_result)
        self.session.add_drain(self._hand_over)
        self.session.add_sync(self._assembler_wait)
        self.session.handler = self
        self.emit_events = emit_events
        self.conversations = conversations
        # the open runs (RunBook); each finished root goes to the assembler thread, which makes its cases (RootCases)
        self._book = RunBook(lambda root: self._assembler.put(root))
        self._conversations = Conversations(self.session, idle=getattr(self.session, "conversation_idle", None),
                                            limit=lambda: self.max_conversations)
        self._roots = RootCases(self.session, self._book, self._conversations, SHAPES,
                                options=lambda: (self.retrieval_tools, self.conversations))
        self._assembler = Assembler(self._roots.capture)
        # the latest root runs that retrieved nothing: root run id -> what they ran (CaptureSession.note_root)
        self.roots_without_retrieval = self._roots.without_retrieval
        # vector stores called directly become retriever runs of this handler while it lives (_vectorstores)
        _vectorstores.acquire(self)
        self.session.add_close_hook(self.release_vector_stores)

    def acquire_vector_stores(self) -> None:
        """Capture direct vector store calls for this handler (done when it is made, and again by ``instrument()``
        and ``capture()``, so a handler released by ``uninstrument()`` captures them again when reused)."""
        _vectorstores.acquire(self)

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
    def case(self) -> Any:
        """The one test case captured, for ``assert_test`` (``CaptureSession.case``: an error when there are none or
        several)."""
        self._assembler.wait()
        return self.session.case

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
        return self._conversations.submit_all()

    # ------------------------------------------------------------------------------------------ run bookkeeping
    # (the callbacks below go to the run book directly; ``_vectorstores`` records direct searches through these)
    def _open(self, run_type: str, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None,
              metadata: dict[str, Any] | None, name: str | None, inputs: Any,
              tool_call_id: str | None = None) -> None:
        self._book.open(run_type, run_id, parent_run_id, tags, metadata, name, inputs, tool_call_id)

    def _close(self, run_id: UUID, outputs: Any = None, error: BaseException | None = None) -> None:
        self._book.close(run_id, outputs, error)

    def _persist_run(self, run: Any) -> None:
        """Required by BaseTracer; unused: finished roots go to ``RootCases.capture`` on the assembler thread."""

    # ------------------------------------------------------------------------------------------ results back
    def _emit_result(self, case: CapturedCase, result: MetricResult) -> None:
        if not self.emit_events or case.root_run_id is None:
            return
        target = self._book.target(case.root_run_id)
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
        self._book.open("llm", run_id, parent_run_id, tags, metadata, _name(serialized, name),
                   {"prompts": _LazyPrompts(messages)})

    def on_llm_start(self, serialized: Any, prompts: list[str], *, run_id: UUID, parent_run_id: UUID | None = None,
                     tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                     name: str | None = None, **kwargs: Any) -> None:
        self._book.open("llm", run_id, parent_run_id, tags, metadata, _name(serialized, name), {"prompts": prompts})

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        return None  # tokens add nothing a test case needs; the end event carries the whole text

    def on_retry(self, retry_state: Any, *, run_id: UUID, **kwargs: Any) -> None:
        return None

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._book.close(run_id, {"generations": response.generations})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._book.close(run_id, error=error)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                       run_type: str | None = None, name: str | None = None, **kwargs: Any) -> None:
        self._book.open(run_type or "chain", run_id, parent_run_id, tags, metadata, _name(serialized, name), inputs)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, inputs: Any = None, **kwargs: Any) -> None:
        self._book.close(run_id, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._book.close(run_id, error=error)

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                      tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                      name: str | None = None, inputs: Any = None, tool_call_id: str | None = None,
                      **kwargs: Any) -> None:
        self._book.open("tool", run_id, parent_run_id, tags, metadata, _name(serialized, name),
                   inputs if inputs is not None else {"input": input_str}, tool_call_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._book.close(run_id, {"output": output})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._book.close(run_id, error=error)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                           name: str | None = None, **kwargs: Any) -> None:
        self._book.open("retriever", run_id, parent_run_id, tags, metadata, _name(serialized, name) or "Retriever",
                   {"query": query})
        # the retriever's own vector store calls are not retrievals of their own (LangChain runs retriever
        # callbacks inline, in the retriever's context: this marks the rest of its call)
        _in_retriever.set(_in_retriever.get() + 1)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        _in_retriever.set(max(0, _in_retriever.get() - 1))
        self._book.close(run_id, {"documents": documents})

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        _in_retriever.set(max(0, _in_retriever.get() - 1))
        self._book.close(run_id, error=error)


SHAPES = ("retriever runs (a BaseRetriever's invoke/ainvoke, as_retriever(), create_retriever_tool, "
          "compression and ensemble retrievers) and VectorStore searches (similarity_search, "
          "similarity_search_with_score, similarity_search_with_relevance_scores, max_marginal_relevance_search, "
          "similarity_search_by_vector and their async forms) in any chain, graph node, tool or agent; tools named "
          "in retrieval_tools=")


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

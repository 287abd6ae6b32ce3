"""Per-engine capture: ``EvaluatedQueryEngine`` and ``EvaluatedChatEngine`` wrap an engine the app already has.

The wrapped object is called exactly as before and returns the same response objects; every other attribute passes
through to the engine. Only calls made through the wrapper are captured, into the wrapper's own scorer (even when
the global ``instrument()`` is on, so nothing is captured twice).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.chat_engine.types import BaseChatEngine

from contextjudge.capture import CapturedCase, CaptureSession, Mode
from contextjudge.cases.identity import new_case_id

from ._capture import router
from ._instrument import make_session
from ._record import Sink, current_sink
from ._sinks import CaseSink, ChatSession

if TYPE_CHECKING:
    import os

    from contextjudge.store import ResultsStore

__all__ = ["EvaluatedChatEngine", "EvaluatedQueryEngine"]


@contextmanager
def _routed(sink: Sink) -> Iterator[None]:
    token = current_sink.set(sink)
    try:
        yield
    finally:
        current_sink.reset(token)


class _ScorerAccess:
    """What both wrappers expose about their captured cases."""

    scorer: CaptureSession

    @property
    def results(self) -> list[Any]:
        """(CapturedCase, MetricResult) pairs scored so far."""
        return self.scorer.results

    @property
    def test_cases(self) -> list[Any]:
        return self.scorer.test_cases

    @property
    def cases(self) -> list[CapturedCase]:
        return self.scorer.cases


def _passthrough(self: Any, name: str) -> Any:
    engine = self.__dict__.get("_engine")
    if engine is None or name.startswith("__"):
        raise AttributeError(name)
    return getattr(engine, name)


class EvaluatedQueryEngine(_ScorerAccess, BaseQueryEngine):
    """A query engine whose every ``query``/``aquery`` becomes a scored test case.

    ``EvaluatedQueryEngine(index.as_query_engine(), metrics=[...], model=judge)`` is used exactly like the engine
    it wraps. The keyword arguments are those of ``instrument()``.
    """

    _contextjudge_transparent = True  # its own spans are not units: the wrapped engine's are

    def __init__(self, query_engine: Any, metrics: Sequence[Any] | None = None, *, model: Any = None,
                 goldens: Any = None, mode: Mode = "background", store: ResultsStore | str | os.PathLike[str] | None = None,
                 **scorer_options: Any) -> None:
        self._engine = query_engine
        super().__init__(callback_manager=getattr(query_engine, "callback_manager", None))
        self.scorer = make_session(metrics, model, goldens, mode, store, scorer_options)
        self._sink = CaseSink(self.scorer)
        router.acquire()
        self._release = weakref.finalize(self, router.release)

    @property
    def query_engine(self) -> Any:
        """The wrapped engine."""
        return self._engine

    def __getattr__(self, name: str) -> Any:
        return _passthrough(self, name)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {"query_engine": self._engine} if hasattr(self._engine, "get_prompts") else {}

    def query(self, str_or_query_bundle: Any) -> Any:
        with _routed(self._sink):
            return self._engine.query(str_or_query_bundle)

    async def aquery(self, str_or_query_bundle: Any) -> Any:
        with _routed(self._sink):
            return await self._engine.aquery(str_or_query_bundle)

    def _query(self, query_bundle: Any) -> Any:
        return self.query(query_bundle)

    async def _aquery(self, query_bundle: Any) -> Any:
        return await self.aquery(query_bundle)

    def retrieve(self, query_bundle: Any) -> Any:
        return self._engine.retrieve(query_bundle)

    async def aretrieve(self, query_bundle: Any) -> Any:
        return await self._engine.aretrieve(query_bundle)

    def synthesize(self, *args: Any, **kwargs: Any) -> Any:
        return self._engine.synthesize(*args, **kwargs)

    async def asynthesize(self, *args: Any, **kwargs: Any) -> Any:
        return await self._engine.asynthesize(*args, **kwargs)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every captured query is scored; False if ``timeout`` passed first."""
        return self.scorer.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        return await self.scorer.aflush(timeout)

    def close(self) -> None:
        """Flush, stop the scoring worker and detach from the dispatcher (also happens when garbage-collected)."""
        self.scorer.close()
        self._release()

    def __repr__(self) -> str:
        return f"EvaluatedQueryEngine({self._engine!r})"


class EvaluatedChatEngine(_ScorerAccess, BaseChatEngine):
    """A chat engine whose session becomes a ``ConversationalTestCase`` scored by the turn metrics.

    Each assistant turn carries the nodes retrieved for it; with the condense chat modes, the user turn records the
    rewritten standalone question that retrieval used (``additional_metadata["retrieval_query"]``). The session's
    conversation is submitted for scoring by ``reset()`` (which also starts a new session), ``end_session()``,
    ``flush()`` or ``aflush()``, and once it has had no call for ``conversation_idle`` seconds (default 300: a
    service that never ends its sessions); ``conversation`` shows it at any time.
    """

    _contextjudge_transparent = True

    def __init__(self, chat_engine: Any, metrics: Sequence[Any] | None = None, *, model: Any = None,
                 goldens: Any = None, mode: Mode = "background", store: ResultsStore | str | os.PathLike[str] | None = None,
                 **scorer_options: Any) -> None:
        self._engine = chat_engine
        self.scorer = make_session(metrics, model, goldens, mode, store, scorer_options)
        self._session = self._new_session()
        router.acquire()
        self._release = weakref.finalize(self, router.release)

    def _new_session(self) -> ChatSession:
        return ChatSession(self.scorer, new_case_id(), type(self._engine).__name__)

    @property
    def chat_engine(self) -> Any:
        """The wrapped engine."""
        return self._engine

    def __getattr__(self, name: str) -> Any:
        return _passthrough(self, name)

    # ------------------------------------------------------------------------------------------ chat interface
    def chat(self, *args: Any, **kwargs: Any) -> Any:
        with _routed(self._session):
            return self._engine.chat(*args, **kwargs)

    def stream_chat(self, *args: Any, **kwargs: Any) -> Any:
        with _routed(self._session):
            return self._engine.stream_chat(*args, **kwargs)

    async def achat(self, *args: Any, **kwargs: Any) -> Any:
        with _routed(self._session):
            return await self._engine.achat(*args, **kwargs)

    async def astream_chat(self, *args: Any, **kwargs: Any) -> Any:
        with _routed(self._session):
            return await self._engine.astream_chat(*args, **kwargs)

    def reset(self) -> None:
        """Submit this session's conversation, reset the engine, and start a new session."""
        self.end_session()
        self._engine.reset()
        self._session = self._new_session()

    @property
    def chat_history(self) -> Any:
        return self._engine.chat_history

    # ------------------------------------------------------------------------------------------ sessions
    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def conversation(self) -> Any:
        """The current session as a ``ConversationalTestCase`` (None before the first call), without submitting it."""
        case = self._session.build()
        return None if case is None else case.test_case

    def end_session(self) -> CapturedCase | None:
        """Submit the current session's conversation for scoring (if it has new turns); returns the case."""
        return self._session.end()

    def flush(self, timeout: float | None = None) -> bool:
        """Submit the current conversation, then wait until everything submitted is scored."""
        self.end_session()
        return self.scorer.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        self.end_session()
        return await self.scorer.aflush(timeout)

    def close(self) -> None:
        """Submit the conversation, flush, stop the scoring worker and detach from the dispatcher."""
        self.end_session()
        self.scorer.close()
        self._release()

    def __repr__(self) -> str:
        return f"EvaluatedChatEngine({self._engine!r})"

"""Global capture: ``instrument()`` makes every query, retrieval and chat call in the process a test case."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from contextjudge.capture import CaptureSession, Mode

from ._capture import router
from ._events import emit_result
from ._sinks import CaseSink

if TYPE_CHECKING:
    import os

    from contextjudge.store import ResultsStore

__all__ = ["aflush", "flush", "get_session", "instrument", "instrument_tags", "is_instrumented",
           "make_session", "uninstrument"]

# LlamaIndex's root dispatcher is process-global, so the global capture is too; this lock guards its swap.
_lock = threading.Lock()


def instrument(
    metrics: Sequence[Any] | None = None,
    model: Any = None,
    goldens: Any = None,
    mode: Mode = "background",
    store: ResultsStore | str | os.PathLike[str] | None = None,
    **scorer_options: Any,
) -> CaptureSession:
    """Capture every LlamaIndex query, retrieval and chat call in this process as a test case, and score it.

    Adds one span handler and one event handler to LlamaIndex's root dispatcher (once, however often this is
    called); no change to the app's code. ``metrics`` default to the four single-turn context metrics and turn
    relevancy, judged by ``model``. ``goldens`` (a list of dicts, or a JSONL/CSV path) fill ``expected_output``.
    ``mode`` is ``"background"`` (score on a worker thread), ``"deferred"`` (keep and store for later) or ``"off"``
    (capture only) or ``"worker"`` (only write the cases to ``store``, for ``contextjudge worker``). Results are sent
    back as ``ContextJudgeResultEvent`` through the dispatcher and written to ``store`` when one is given. Other
    keyword arguments go to ``CaptureSession`` (``sample_rate``, ``sampling``, ``budget``, ``max_kept``,
    ``warn_after_roots``...). ``retrieval_tools`` names an agent's tools whose output is the context it answers
    from (a web search, an MCP server's tool): each call's output becomes a retrieval of that tool, its items
    ranked nodes (a list split into items, search-result dicts giving their text and url/id, a string one node).

    Each case records what sampling filters on (``contextjudge.capture``'s metadata keys: the engine, the
    retriever, the instrument tags and the conversation) and, when the app traces with OpenTelemetry, the spans
    active when the call and its retrieval began (``provenance.OTEL_KEY``), for ``contextjudge.otel``.

    Calling it again replaces the configuration; it returns the ``CaptureSession`` that receives the cases (its
    ``flush()``, ``close()``, ``results`` and ``test_cases`` are what tests and scripts read), the same kind of
    object LangChain's ``instrument()`` returns.
    """
    retrieval_tools = scorer_options.pop("retrieval_tools", ())
    scorer = make_session(metrics, model, goldens, mode, store, scorer_options)
    with _lock:
        first = router.global_sink is None
        router.global_sink = CaseSink(scorer, retrieval_tools)
        if first:
            router.acquire()
    return scorer


def make_session(metrics: Any, model: Any, goldens: Any, mode: Mode, store: ResultsStore | str | os.PathLike[str] | None,
                 options: dict[str, Any]
                 ) -> CaptureSession:
    """A capture session with LlamaIndex's result events attached. Cases reach a background worker in batches
    (``handoff_delay``, 50 ms by default): the worker interrupts the app's thread once a batch, not once a query."""
    options.setdefault("handoff_delay", 0.05)
    session = CaptureSession(metrics, model=model, goldens=goldens, mode=mode, store=store, **options)
    session.on_result.append(functools.partial(emit_result, session=session))
    return session


def uninstrument() -> CaptureSession | None:
    """Stop the global capture; the handlers leave the root dispatcher once no engine wrapper needs them.

    Returns the session that was receiving cases (scoring already queued goes on; call its ``flush()`` to wait).
    """
    with _lock:
        sink = router.global_sink
        router.global_sink = None
        if sink is not None:
            router.release()
    return sink.scorer if isinstance(sink, CaseSink) else None


def is_instrumented() -> bool:
    """Whether the global capture is on."""
    return router.global_sink is not None


def get_session() -> CaptureSession | None:
    """The session of the global capture, or None when it is off."""
    sink = router.global_sink
    return sink.scorer if isinstance(sink, CaseSink) else None


def flush(timeout: float | None = None) -> bool:
    """Wait until every case captured globally is scored; False if ``timeout`` passed first."""
    scorer = get_session()
    return True if scorer is None else scorer.flush(timeout)


async def aflush(timeout: float | None = None) -> bool:
    """Async form of ``flush``."""
    scorer = get_session()
    return True if scorer is None else await scorer.aflush(timeout)


@contextmanager
def instrument_tags(tags: Mapping[str, Any] | None = None, *, golden_id: Any = None, conversation_id: Any = None
                    ) -> Iterator[None]:
    """Tag the LlamaIndex calls made inside the block, for capture (LlamaIndex's own ``instrument_tags``, nested).

    ``golden_id`` names the golden a captured call is scored against, whatever its input says::

        from contextjudge_llama_index import instrument_tags

        with instrument_tags(golden_id="pto-1"):
            engine.query("How many days of PTO do I get?")

    ``conversation_id`` makes an agent's (or workflow's) runs one conversation for the turn metrics, for apps that
    keep the conversation in a reused ``Context`` (``ctx=``) rather than a memory object passed as ``memory=``
    (which is followed on its own)::

        with instrument_tags(conversation_id=session_id):
            await agent.run(user_msg, ctx=ctx)

    ``tags`` adds any other tags; the tags already active outside the block are kept. Works in sync and async code
    (the tags live in a context variable, which tasks and workflow runs started inside the block inherit).
    """
    from llama_index.core.instrumentation.dispatcher import active_instrument_tags  # noqa: PLC0415

    from contextjudge.cases.identity import GOLDEN_ID_KEY  # noqa: PLC0415

    from ._record import CONVERSATION_TAG  # noqa: PLC0415

    merged = dict(active_instrument_tags.get() or {})
    merged.update(tags or {})
    if golden_id is not None:
        merged[GOLDEN_ID_KEY] = str(golden_id)
    if conversation_id is not None:
        merged[CONVERSATION_TAG] = str(conversation_id)
    token = active_instrument_tags.set(merged)
    try:
        yield
    finally:
        active_instrument_tags.reset(token)

"""Global capture: ``instrument()`` makes every query, retrieval and chat call in the process a test case."""

from __future__ import annotations

import threading
from typing import Any, Sequence

from contextjudge.capture import CaptureScorer, Mode

from ._capture import router
from ._results import CaseSink, LlamaIndexScorer, emit_result

__all__ = ["aflush", "flush", "get_scorer", "instrument", "is_instrumented", "uninstrument"]

# LlamaIndex's root dispatcher is process-global, so the global capture is too; this lock guards its swap.
_lock = threading.Lock()


def instrument(
    metrics: Sequence[Any] | None = None,
    model: Any = None,
    goldens: Any = None,
    mode: Mode = "background",
    store: Any = None,
    **scorer_options: Any,
) -> CaptureScorer:
    """Capture every LlamaIndex query, retrieval and chat call in this process as a test case, and score it.

    Adds one span handler and one event handler to LlamaIndex's root dispatcher (once, however often this is
    called); no change to the app's code. ``metrics`` default to the four single-turn context metrics and turn
    relevancy, judged by ``model``. ``goldens`` (a list of dicts, or a JSONL/CSV path) fill ``expected_output``.
    ``mode`` is ``"background"`` (score on a worker thread), ``"deferred"`` (keep and store for later) or ``"off"``
    (capture only). Results are sent back as ``ContextJudgeResultEvent`` through the dispatcher and written to
    ``store`` when one is given.

    Calling it again replaces the configuration; it returns the ``CaptureScorer`` that receives the cases (its
    ``flush()``, ``results`` and ``test_cases`` are what tests and scripts read).
    """
    scorer = LlamaIndexScorer(metrics, model=model, goldens=goldens, mode=mode, store=store, **scorer_options)
    scorer.on_result.append(emit_result)
    with _lock:
        first = router.global_sink is None
        router.global_sink = CaseSink(scorer)
        if first:
            router.acquire()
    return scorer


def uninstrument() -> CaptureScorer | None:
    """Stop the global capture; the handlers leave the root dispatcher once no engine wrapper needs them.

    Returns the scorer that was receiving cases (scoring already queued goes on; call its ``flush()`` to wait).
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


def get_scorer() -> CaptureScorer | None:
    """The scorer of the global capture, or None when it is off."""
    sink = router.global_sink
    return sink.scorer if isinstance(sink, CaseSink) else None


def flush(timeout: float | None = None) -> bool:
    """Wait until every case captured globally is scored; False if ``timeout`` passed first."""
    scorer = get_scorer()
    return True if scorer is None else scorer.flush(timeout)


async def aflush(timeout: float | None = None) -> bool:
    """Async form of ``flush``."""
    scorer = get_scorer()
    return True if scorer is None else await scorer.aflush(timeout)

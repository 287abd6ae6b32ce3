"""From metric results back into LlamaIndex as events.

``ContextJudgeResultEvent`` is sent through the dispatcher ``contextjudge_llama_index`` (a child of the root, so
every root handler sees it), from inside a short span whose parent is the query's span: an observability tool
attaches the score to the query it belongs to, and a user's own event handler receives it.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from typing import Any

from contextjudge import MetricResult
from contextjudge.capture import CapturedCase, CaptureSession, result_event

try:
    from llama_index_instrumentation.base import BaseEvent
    from llama_index_instrumentation.span import active_span_id
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.events.base import BaseEvent  # type: ignore[no-redef]
    from llama_index.core.instrumentation.span import active_span_id  # type: ignore[no-redef]

__all__ = ["DISPATCHER_NAME", "ContextJudgeResultEvent", "emit_result"]

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

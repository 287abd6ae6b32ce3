"""From captured records to test cases, and from metric results back into LlamaIndex as events.

``ContextJudgeResultEvent`` is sent through the dispatcher ``contextjudge_llama_index`` (a child of the root, so
every root handler sees it), from inside a short span whose parent is the query's span: an observability tool
attaches the score to the query it belongs to, and a user's own event handler receives it.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from typing import Any

from contextjudge import ConversationalTestCase, LLMTestCase, MetricResult, Turn
from contextjudge.capture import CapturedCase, CaptureScorer

try:
    from llama_index_instrumentation.base import BaseEvent
    from llama_index_instrumentation.span import active_span_id
except ImportError:  # pragma: no cover - older cores
    from llama_index.core.instrumentation.events.base import BaseEvent  # type: ignore[no-redef]
    from llama_index.core.instrumentation.span import active_span_id  # type: ignore[no-redef]

from ._capture import Record, Sink

__all__ = ["CaseSink", "ChatSession", "ContextJudgeResultEvent", "conversation_case", "emit_result",
           "record_to_case"]

logger = logging.getLogger("contextjudge")

DISPATCHER_NAME = "contextjudge_llama_index"


class ContextJudgeResultEvent(BaseEvent):
    """One metric's result on one captured query or conversation, sent back through LlamaIndex's dispatcher.

    ``query_span_id`` is the span of the query (or of the conversation's last chat call) that was scored; the
    event's own ``span_id`` is a short report span whose parent is that span.
    """

    metric: str
    score: float | None = None
    threshold: float = 0.5
    success: bool = False
    reason: str | None = None
    error: str | None = None
    case_id: str
    query_span_id: str | None = None
    input: str | None = None
    evaluation_model: str | None = None

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
    tc = LLMTestCase(input=inp, actual_output=record.output, retrieval_context=nodes, additional_metadata=meta)
    cmeta: dict[str, Any] = {"query_span_id": record.span_id}
    if user_message and user_message != inp:
        cmeta["chain_input"] = user_message  # goldens may be keyed on the user's own words
    if record.golden_index is not None:
        cmeta["golden_index"] = record.golden_index
    return CapturedCase(test_case=tc, source="llama_index", root_run_id=record.span_id, metadata=cmeta,
                        golden_id=record.golden_id)


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
    tc = ConversationalTestCase(turns=turns, additional_metadata={"source": "llama_index", "engine": engine,
                                                                  "session_id": session_id, "span_ids": span_ids})
    return CapturedCase(test_case=tc, source="llama_index", root_run_id=span_ids[-1],
                        metadata={"query_span_id": span_ids[-1], "session_id": session_id, "span_ids": span_ids})


class CaseSink(Sink):
    """Each finished call becomes one ``LLMTestCase`` handed to a scorer."""

    def __init__(self, scorer: CaptureScorer) -> None:
        self.scorer = scorer

    def deliver(self, record: Record) -> None:
        self.scorer.submit(record_to_case(record))


class ChatSession(Sink):
    """Collects one chat session's calls; ``end()`` turns them into one conversation for the scorer."""

    def __init__(self, scorer: CaptureScorer, session_id: str, engine: str) -> None:
        self.scorer = scorer
        self.session_id = session_id
        self.engine = engine
        self.records: list[Record] = []
        self._submitted = 0
        self._lock = threading.Lock()

    def deliver(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def ordered(self) -> list[Record]:
        with self._lock:
            return sorted(self.records, key=lambda r: r.started)

    def build(self) -> CapturedCase | None:
        recs = self.ordered()
        return conversation_case(recs, self.session_id, self.engine) if recs else None

    def end(self) -> CapturedCase | None:
        """Submit the conversation so far, if it has calls not yet submitted; returns what was submitted."""
        with self._lock:
            if len(self.records) == self._submitted:
                return None
            self._submitted = len(self.records)
        case = self.build()
        if case is not None:
            self.scorer.submit(case)
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


def emit_result(case: CapturedCase, result: MetricResult) -> None:
    """Send ``result`` through LlamaIndex's dispatcher, in a span whose parent is the scored query's span."""
    try:
        span = case.metadata.get("query_span_id")
        tc = case.test_case
        fields = {"metric": result.name, "score": result.score, "threshold": result.threshold,
                  "success": result.success, "reason": result.reason, "error": result.error,
                  "case_id": case.case_id, "query_span_id": span,
                  "input": getattr(tc, "input", None), "evaluation_model": getattr(result, "evaluation_model", None)}
        # A fresh context: no span or tags of whatever thread happens to deliver the result leak into the report.
        contextvars.Context().run(_report_in_context, span, fields)
    except Exception:  # noqa: BLE001
        logger.exception("contextjudge: could not send a ContextJudgeResultEvent")

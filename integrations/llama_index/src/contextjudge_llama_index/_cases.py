"""From captured records to test cases: one query, retrieval or chat call (``record_to_case``), an agent's tool call,
a chat session's calls or an agent's runs as one conversation, and a chat turn a golden matched."""

from __future__ import annotations

from typing import Any

from contextjudge import ConversationalTestCase, LLMTestCase, Turn
from contextjudge.capture import (
    CHAIN_KEY,
    RETRIEVER_NAME_KEY,
    RUN_METADATA_KEY,
    TAGS_KEY,
    THREAD_KEY,
    CapturedCase,
    no_retrieval_message,
)
from contextjudge.cases.identity import GOLDEN_ID_KEY
from contextjudge.cases.provenance import (
    AGENT_KEY,
    CHAIN_INPUT_KEY,
    GOLDEN_INDEX_KEY,
    MATCH_INPUTS_KEY,
    NO_RETRIEVAL_KEY,
    OTEL_KEY,
    short,
)
from contextjudge.otel import case_trace

from ._kinds import SHAPES
from ._record import AgentTurn, Record

__all__ = ["agent_conversation_case", "call_keys", "conversation_case", "record_to_case", "turn_case"]


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

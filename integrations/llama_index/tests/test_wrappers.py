"""EvaluatedQueryEngine and EvaluatedChatEngine: wrap an existing engine, call it exactly as before."""

from __future__ import annotations

import asyncio
import gc

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import Response
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.memory import ChatMemoryBuffer

import contextjudge_llama_index as cj
from contextjudge import ConversationalTestCase, LLMTestCase
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric, TurnContextualRelevancyMetric
from contextjudge_llama_index import _capture
from contextjudge_llama_index.testing import ReverseReranker

VACATION = "How many vacation days do employees get per year?"
FOLLOW_UP = "What about contractors?"
THIRD = "And how many days can employees work remotely?"


def _ours():
    return [h for h in get_dispatcher().span_handlers if type(h).__name__ == "ContextJudgeSpanHandler"]


def test_query_engine_wrapper_is_called_exactly_as_before(index, llm, judge):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    plain = engine.query(VACATION)
    wrapped = cj.EvaluatedQueryEngine(engine, metrics=[ContextualRelevancyMetric(model=judge)])

    response = wrapped.query(VACATION)
    assert type(response) is Response
    assert str(response) == str(plain)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in plain.source_nodes]
    assert isinstance(wrapped, BaseQueryEngine)
    assert wrapped.retriever is engine.retriever  # attribute passthrough
    assert wrapped.query_engine is engine
    assert [n.node.node_id for n in wrapped.retrieve(_bundle(VACATION))] == [n.node.node_id for n in plain.source_nodes]
    assert wrapped.flush(10)

    [case] = wrapped.cases
    assert case.test_case.input == VACATION and case.test_case.actual_output == str(plain)
    assert case.results and wrapped.results[0][1].name == "Contextual Relevancy"
    engine.query(VACATION)  # the unwrapped engine is not captured
    assert len(wrapped.cases) == 1


def _bundle(text):
    from llama_index.core.schema import QueryBundle

    return QueryBundle(text)


async def test_query_engine_wrapper_async_and_reranked(index, llm, judge):
    engine = index.as_query_engine(llm=llm, similarity_top_k=3, node_postprocessors=[ReverseReranker()])
    wrapped = cj.EvaluatedQueryEngine(engine, metrics=[ContextualRelevancyMetric(model=judge)])
    responses = await asyncio.gather(*(wrapped.aquery(f"{VACATION} #{i}") for i in range(5)))
    assert await wrapped.aflush(10)
    assert len(wrapped.cases) == 5
    for case in wrapped.cases:
        i = int(case.test_case.input.rsplit("#", 1)[1])
        assert [n.id for n in case.test_case.retrieval_context] == [n.node.node_id for n in responses[i].source_nodes]
        assert case.test_case.additional_metadata["reranked"] is True


def test_wrapper_takes_its_calls_even_when_global_capture_is_on(index, llm, judge):
    global_scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    wrapped = cj.EvaluatedQueryEngine(engine, metrics=[], mode="off", max_kept=None)
    wrapped.query(VACATION)
    engine.query(FOLLOW_UP)
    assert [c.test_case.input for c in wrapped.cases] == [VACATION]
    assert [c.test_case.input for c in global_scorer.cases] == [FOLLOW_UP]


def test_wrapper_detaches_from_the_dispatcher_when_closed_or_collected(index, llm):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    wrapped = cj.EvaluatedQueryEngine(engine, metrics=[], mode="off", max_kept=None)
    assert len(_ours()) == 1
    wrapped.close()
    assert _ours() == []
    cj.EvaluatedQueryEngine(engine, metrics=[], mode="off", max_kept=None)
    gc.collect()
    assert _ours() == []


def test_three_turn_chat_becomes_a_conversation_scored_by_turn_metrics(index, llm, judge):
    events = []

    class Collector(BaseEventHandler):
        def handle(self, event, **kwargs):
            if isinstance(event, cj.ContextJudgeResultEvent):
                events.append(event)

    get_dispatcher().add_event_handler(Collector())
    chat_engine = index.as_chat_engine(chat_mode="condense_plus_context", llm=llm, similarity_top_k=2)
    chat = cj.EvaluatedChatEngine(chat_engine, metrics=[TurnContextualRelevancyMetric(model=judge),
                                                        ContextualRelevancyMetric(model=judge)])
    assert isinstance(chat, BaseChatEngine)
    r1 = chat.chat(VACATION)
    r2 = chat.chat(FOLLOW_UP)
    r3 = chat.chat(THIRD)
    assert all(type(r) is AgentChatResponse for r in (r1, r2, r3))
    assert r2.response == "Contractors do not receive paid vacation days."
    assert len(chat.chat_history) == 6  # passthrough to the engine's memory

    conv = chat.conversation
    assert isinstance(conv, ConversationalTestCase)
    assert [t.role for t in conv.turns] == ["user", "assistant"] * 3
    assert [t.content for t in conv.turns[::2]] == [VACATION, FOLLOW_UP, THIRD]
    assert [t.content for t in conv.turns[1::2]] == [r1.response, r2.response, r3.response]
    for turn, response in zip(conv.turns[1::2], (r1, r2, r3), strict=True):
        assert [n.id for n in turn.retrieval_context] == [n.node.node_id for n in response.source_nodes]
    # condense_plus_context retrieved with a rewritten standalone question: it sits next to the user message
    assert conv.turns[0].additional_metadata is None
    standalone = conv.turns[2].additional_metadata["retrieval_query"]
    assert standalone != FOLLOW_UP and "contractor" in standalone.lower() and "vacation" in standalone.lower()
    assert conv.turns[3].additional_metadata["retrieval_query"] == standalone

    assert chat.flush(10)
    [case] = chat.cases
    [result] = case.results  # the single-turn metric does not apply to a conversation
    assert result.name == "Turn Contextual Relevancy"
    assert result.score is not None and result.error is None
    assert set(result.details["turn_scores"]) == {1, 3, 5}
    assert [(e.metric, e.case_id) for e in events] == [("Turn Contextual Relevancy", case.case_id)]
    assert events[0].origin_id == case.metadata["span_ids"][-1]
    assert chat.flush(60) and len(chat.cases) == 1  # nothing new: not submitted again


async def test_chat_wrapper_async_and_streaming_turns(index, llm, judge):
    # ChatMemoryBuffer: the default Memory keeps an aiosqlite connection bound to this test's event loop
    memory = ChatMemoryBuffer.from_defaults(token_limit=4000)
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="condense_plus_context", llm=llm,
                                                       similarity_top_k=2, memory=memory),
                                  metrics=[TurnContextualRelevancyMetric(model=judge)])
    r1 = await chat.achat(VACATION)
    assert type(r1) is AgentChatResponse
    stream = await chat.astream_chat(FOLLOW_UP)
    assert type(stream) is StreamingAgentChatResponse
    text = "".join([t async for t in stream.async_response_gen()])
    assert text == "Contractors do not receive paid vacation days."
    sync_stream = await asyncio.to_thread(chat.stream_chat, THIRD)
    assert type(sync_stream) is StreamingAgentChatResponse
    third = await asyncio.to_thread(lambda: "".join(sync_stream.response_gen))

    assert await chat.aflush(10)
    [case] = chat.cases
    turns = case.test_case.turns
    assert [t.content for t in turns[1::2]] == [r1.response, text, third]
    assert turns[3].additional_metadata["streamed"] is True
    assert turns[3].retrieval_context and turns[5].retrieval_context
    assert case.results[0].score is not None


def test_condense_question_mode_records_the_standalone_question(index, llm, judge):
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="condense_question", llm=llm,
                                                       similarity_top_k=2), metrics=[], mode="off", max_kept=None)
    chat.chat(VACATION)
    chat.chat(FOLLOW_UP)
    turns = chat.conversation.turns
    standalone = turns[2].additional_metadata["retrieval_query"]
    assert standalone != FOLLOW_UP and "contractor" in standalone.lower()
    assert turns[3].retrieval_context, "nodes of the inner query engine belong to the chat turn"


def test_reset_submits_the_session_and_starts_a_new_one(index, llm, judge):
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2),
                                  metrics=[TurnContextualRelevancyMetric(model=judge)],
                                  goldens=[{"input": VACATION, "expected_output": "25 days."}])
    first_session = chat.session_id
    chat.chat(VACATION)
    chat.reset()
    assert chat.session_id != first_session and chat.conversation is None and chat.chat_history == []
    chat.chat(FOLLOW_UP)
    assert chat.flush(10)
    # two conversations, and the turn a golden matches as a single-turn case for the single-turn metrics
    convs = [c.test_case for c in chat.cases if isinstance(c.test_case, ConversationalTestCase)]
    [turn] = [c for c in chat.cases if isinstance(c.test_case, LLMTestCase)]
    first, second = convs
    assert first.turns[1].expected_output == "25 days."  # goldens fill assistant turns by the user message
    assert [t.content for t in second.turns[::2]] == [FOLLOW_UP]
    assert turn.test_case.input == VACATION and turn.test_case.expected_output == "25 days."
    assert turn.test_case.actual_output == first.turns[1].content
    assert turn.results == []  # only a turn metric was asked for


def test_chat_wrapper_applies_single_turn_metrics_to_each_turn_with_a_golden(index, llm, judge):
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2),
                                  metrics=[TurnContextualRelevancyMetric(model=judge),
                                           ContextualPrecisionMetric(model=judge)],
                                  goldens=[{"id": "fu", "input": FOLLOW_UP, "expected_output": "No paid vacation."}])
    chat.chat(VACATION)
    chat.chat(FOLLOW_UP)
    assert chat.flush(10)
    conv = next(c for c in chat.cases if isinstance(c.test_case, ConversationalTestCase))
    [turn] = [c for c in chat.cases if isinstance(c.test_case, LLMTestCase)]  # only the turn with a golden
    assert [r.name for r in conv.results] == ["Turn Contextual Relevancy"]
    assert turn.golden_id == "fu" and turn.test_case.expected_output == "No paid vacation."
    assert turn.test_case.additional_metadata["user_message"] == FOLLOW_UP
    assert turn.test_case.retrieval_context == conv.test_case.turns[3].retrieval_context
    [precision] = turn.results
    assert precision.name == "Contextual Precision" and precision.error is None and precision.score is not None


def test_chat_wrapper_survives_a_failure_inside_capture(index, llm, judge, monkeypatch):
    engine = index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2)
    chat = cj.EvaluatedChatEngine(engine, metrics=[TurnContextualRelevancyMetric(model=judge)])

    def boom(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(_capture, "snapshot", boom)
    response = chat.chat(VACATION)
    assert response.response == "Employees get 25 vacation days per year."
    assert chat.flush(5)


def test_global_capture_of_a_chat_engine_makes_single_turn_cases(index, llm, judge):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2)
    engine.chat(VACATION)
    [case] = scorer.cases
    assert isinstance(case.test_case, LLMTestCase)
    assert case.test_case.input == VACATION
    assert case.test_case.additional_metadata["user_message"] == VACATION

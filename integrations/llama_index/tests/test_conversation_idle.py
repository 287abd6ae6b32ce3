"""A long-running service never closes its conversations: an agent's conversation (a memory, or the
``conversation_id`` instrument tag) and a wrapped chat engine's session are submitted once idle for the session's
``conversation_idle`` seconds, off the request path, in modes "worker" and "background"."""

from __future__ import annotations

import asyncio
import time
import warnings

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import QueryEngineTool

import contextjudge_llama_index as cj
from contextjudge import ConversationalTestCase
from contextjudge.capture import THREAD_KEY
from contextjudge.metrics import TurnContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge_llama_index.testing import ScriptedAgentLLM

USER = "How many vacation days do I get?"
SCRIPT = {
    USER: [[("policy_search", {"input": "vacation days employees"})], "You get 25 vacation days a year."],
    "And what about remote work?": [[("policy_search", {"input": "remote work days"})], "Two days a week."],
}


@pytest.fixture(autouse=True)
def _quiet_workflows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _agent(index, llm):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    tool = QueryEngineTool.from_defaults(engine, name="policy_search", description="Search the HR policies.")
    return FunctionAgent(tools=[tool], llm=ScriptedAgentLLM(SCRIPT))


async def test_mode_worker_writes_an_idle_conversation_without_close(index, llm, judge, tmp_path):
    path = tmp_path / "cj.db"
    session = cj.instrument(metrics=[TurnContextualRelevancyMetric()], model=judge, mode="worker",
                            store=str(path), conversation_idle=0.3)
    agent = _agent(index, llm)
    with cj.instrument_tags(conversation_id="user-42"):
        await agent.run(user_msg=USER)
        await agent.run(user_msg="And what about remote work?")
    store = open_store(path)

    def convs():
        if not session.run.begun:
            return []
        return [sc for sc in store.load_cases(session.run.id) if isinstance(sc.test_case, ConversationalTestCase)]

    assert _wait_for(lambda: convs())
    [conv] = convs()
    assert [t.content for t in conv.test_case.turns if t.role == "user"] == [USER, "And what about remote work?"]
    session.close(5)
    assert len(convs()) == 1  # not submitted again at close


async def test_a_memory_conversation_submitted_idle_keeps_its_id_when_it_goes_on(index, llm, judge):
    session = cj.instrument(metrics=[], mode="off", max_kept=None, conversation_idle=60)
    sink = cj._instrument.router.global_sink  # noqa: SLF001
    clock = sink._idle.clock = FakeClock()  # noqa: SLF001
    agent = _agent(index, llm)
    memory = ChatMemoryBuffer.from_defaults()
    await agent.run(user_msg=USER, memory=memory)
    await asyncio.sleep(0.3)  # the workflow's spans end just after the run returns
    assert len(sink._idle) == 1  # noqa: SLF001
    clock.now += 61
    assert sink._idle.run_due() == 1  # noqa: SLF001 - idle: submitted without flush or close
    assert sink._conversations == {}  # noqa: SLF001 - and forgotten
    await agent.run(user_msg="And what about remote work?", memory=memory)
    session.flush(10)
    convs = [c for c in session.ready_cases() if isinstance(c.test_case, ConversationalTestCase)]
    assert [len(c.test_case.turns) for c in convs] == [2, 2]
    assert convs[0].metadata[THREAD_KEY] == convs[1].metadata[THREAD_KEY]  # one conversation: sampled together
    session.close(5)


def test_a_wrapped_chat_engines_session_is_submitted_once_idle(index, llm, judge):
    chat = cj.EvaluatedChatEngine(index.as_chat_engine(chat_mode="condense_plus_context", llm=llm,
                                                       similarity_top_k=2),
                                  metrics=[TurnContextualRelevancyMetric(model=judge)], conversation_idle=0.3)
    chat.chat(USER)
    assert _wait_for(lambda: any(c.results for c in chat.cases))  # no flush, no end_session
    [case] = chat.cases
    assert isinstance(case.test_case, ConversationalTestCase) and case.results[0].score is not None
    chat.close()

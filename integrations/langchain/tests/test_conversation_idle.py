"""A long-running service never closes its conversations: a thread is submitted once it has been idle for the
session's ``conversation_idle`` seconds (off the request path), in modes "worker" and "background", sampled whole
with its turns; and at close."""

from __future__ import annotations

import time

import pytest

from contextjudge import ConversationalTestCase
from contextjudge.capture import RETRIEVER_NAME_KEY, THREAD_KEY, IdleConversations, Sampling
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import ContextualRelevancyMetric, TurnContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge_langchain import ContextJudgeCallbackHandler

QUESTIONS = ["Can I bring my dog to the office?", "How many days a week can I work remotely?"]


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


def _conversations(store, run_id):
    return [sc for sc in store.load_cases(run_id) if isinstance(sc.test_case, ConversationalTestCase)]


def test_mode_worker_writes_an_idle_thread_to_the_store_without_close(chain, judge, tmp_path):
    """The FastAPI case: requests with a thread_id, no close(); the conversation reaches the store once idle."""
    path = tmp_path / "cj.db"
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(), TurnContextualRelevancyMetric()],
                                          model=judge, mode="worker", store=str(path), conversation_idle=0.3)
    for q in QUESTIONS:
        chain.invoke(q, config={"callbacks": [handler], "configurable": {"thread_id": "user-7"}})
    store = open_store(path)
    run_id = handler.session.run.id
    assert _wait_for(lambda: handler.session.run.begun and _conversations(store, handler.session.run.id))
    (conv,) = _conversations(store, handler.session.run.id if run_id is None else run_id)
    assert [t.content for t in conv.test_case.turns if t.role == "user"] == QUESTIONS
    assert all(t.retrieval_context for t in conv.test_case.turns if t.role == "assistant")
    assert store.queue_counts(handler.session.run.id)["queued"] == 3  # two single turns and the conversation
    assert handler._conversations.threads == {}  # noqa: SLF001 - forgotten once submitted: memory stays bounded
    handler.close(5)
    assert len(_conversations(store, handler.session.run.id)) == 1  # close does not submit it again


def test_background_mode_judges_an_idle_thread_with_a_fake_clock(chain, judge):
    handler = ContextJudgeCallbackHandler(metrics=[TurnContextualRelevancyMetric()], model=judge,
                                          conversation_idle=120)
    clock = handler._conversations.idle.clock = FakeClock()  # noqa: SLF001
    for q in QUESTIONS:
        chain.invoke(q, config={"callbacks": [handler], "configurable": {"thread_id": "t-1"}})
    handler._assembler.wait()  # noqa: SLF001 - a turn counts when it is assembled (off the request path)
    clock.now += 60
    chain.invoke(QUESTIONS[0], config={"callbacks": [handler], "configurable": {"thread_id": "t-2"}})
    handler._assembler.wait()  # noqa: SLF001
    assert handler._conversations.idle.run_due() == 0  # noqa: SLF001 - nothing idle for 120 s yet
    clock.now += 61
    assert handler._conversations.idle.run_due() == 1  # noqa: SLF001 - t-1 (idle 121 s), not t-2 (idle 61 s)
    assert set(handler._conversations.threads) == {"t-2"}  # noqa: SLF001 - t-1 submitted and forgotten
    assert _wait_for(lambda: any(c.source == "thread:t-1" for c, _ in handler.session.results))
    [(case, result)] = [(c, r) for c, r in handler.session.results if c.source.startswith("thread:")]
    assert case.source == "thread:t-1" and result.score is not None
    assert case.metadata[RETRIEVER_NAME_KEY] == ["policy_retriever"]  # a retriever filter keeps it with its turns
    # the thread goes on after it was submitted: its new turns come back as a new case, at close at the latest
    chain.invoke(QUESTIONS[1], config={"callbacks": [handler], "configurable": {"thread_id": "t-1"}})
    handler.close(30)
    convs = [c for c, _ in handler.session.results if c.source.startswith("thread:")]
    assert sorted(c.source for c in convs) == ["thread:t-1", "thread:t-1", "thread:t-2"]
    assert sorted(len(c.test_case.turns) for c in convs if c.source == "thread:t-1") == [2, 4]


def test_an_idle_thread_is_sampled_whole_with_its_turns(chain, judge):
    sampling = Sampling(rate=0.5)
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(), TurnContextualRelevancyMetric()],
                                          model=judge, mode="off", max_kept=None, sampling=sampling,
                                          conversation_idle=60)
    clock = handler._conversations.idle.clock = FakeClock()  # noqa: SLF001
    for t in range(10):
        for q in QUESTIONS:
            chain.invoke(q, config={"callbacks": [handler], "configurable": {"thread_id": f"u{t}"}})
    handler._assembler.wait()  # noqa: SLF001
    clock.now += 61
    assert handler._conversations.idle.run_due() == 10  # noqa: SLF001
    kinds: dict[str, set[str]] = {}
    for c in handler.session.kept():
        kinds.setdefault(c.metadata[THREAD_KEY], set()).add(type(c.test_case).__name__)
    assert kinds and len(kinds) < 10  # some threads were left out...
    assert all(v == {"LLMTestCase", "ConversationalTestCase"} for v in kinds.values())  # ...the others whole
    assert handler.session.counters["seen"] == 10 * 3
    handler.close(5)


def test_at_most_max_conversations_threads_are_followed(chain, judge):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None, conversation_idle=None)
    handler.max_conversations = 2
    for t in range(4):
        chain.invoke(QUESTIONS[0], config={"callbacks": [handler], "configurable": {"thread_id": f"u{t}"}})
    handler._assembler.wait()  # noqa: SLF001
    assert list(handler._conversations.threads) == ["u2", "u3"]  # noqa: SLF001
    convs = [c.source for c in handler.session.kept() if isinstance(c.test_case, ConversationalTestCase)]
    assert convs == ["thread:u0", "thread:u1"]  # the least recently active ones, submitted as they were pushed out
    assert len(handler._conversations.idle) == 0  # noqa: SLF001 - conversation_idle=None: no watch
    handler.close(5)


def test_idle_watch_thread_stops_when_nothing_is_open_and_rejects_bad_values():
    seen = []
    watch = IdleConversations(seen.append, 0.05)
    watch.touch("a")
    assert _wait_for(lambda: seen == ["a"], 5)
    assert _wait_for(lambda: watch._thread is None, 5)  # noqa: SLF001
    with pytest.raises(ConfigurationError, match="conversation_idle"):
        ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None, conversation_idle=-1)

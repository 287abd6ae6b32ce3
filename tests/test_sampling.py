"""Sampling of captured cases: deterministic across processes, conversations whole, filters, counters."""

import json
import logging
import os
import subprocess
import sys

import pytest

from contextjudge import ConfigurationError, ConversationalTestCase, LLMTestCase
from contextjudge.capture import (
    CHAIN_KEY,
    RETRIEVER_NAME_KEY,
    RUN_METADATA_KEY,
    TAGS_KEY,
    THREAD_KEY,
    CapturedCase,
    CaptureSession,
    Sampling,
)
from contextjudge.capture._sampling import draw
from contextjudge.cases.testcase import Turn
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge


def _case(text, **meta):
    return CapturedCase(LLMTestCase(input=text, actual_output="30 days", retrieval_context=["Refunds: 30 days."]),
                        metadata=meta)


def _session(**kwargs):
    kwargs.setdefault("mode", "off")
    kwargs.setdefault("max_kept", None)
    return CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), **kwargs)


# ------------------------------------------------------------------------------------------------ the draw
def test_the_draw_is_the_same_in_another_process_and_lands_near_the_rate():
    keys = [f"question {i}" for i in range(10_000)]
    here = [draw(k) < 0.1 for k in keys]
    assert 0.09 <= sum(here) / len(here) <= 0.11
    code = ("import json, sys; from contextjudge.capture._sampling import draw; "
            "print(json.dumps([draw(f'question {i}') < 0.1 for i in range(10_000)]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # Python's own hash() would differ; ours must not
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == here
    # the same decisions through Sampling on captured cases, at another rate
    s = Sampling(rate=0.25)
    picked = [s.sampled(_case(f"Question {i}?")) for i in range(2000)]
    assert picked == [s.sampled(_case(f"question {i}")) for i in range(2000)]  # normalised: case and punctuation
    assert 0.22 <= sum(picked) / len(picked) <= 0.28


def test_rate_zero_and_one_and_wrong_rates():
    assert Sampling(rate=1).sampled(_case("a")) and not Sampling(rate=0).sampled(_case("a"))
    for bad in (1.5, -0.1, float("nan"), "0.1", True):
        with pytest.raises(ConfigurationError, match="sample_rate must be a number from 0 to 1"):
            Sampling(rate=bad)
    with pytest.raises(ConfigurationError, match="disagree"):
        _session(sample_rate=0.5, sampling=Sampling(rate=0.2))
    with pytest.raises(ConfigurationError, match="Sampling"):
        _session(sampling=0.5)
    with pytest.raises(ConfigurationError, match="empty"):
        Sampling(tags=[])
    assert _session(sample_rate=0.3, sampling=Sampling(rate=0.3, tags=["prod"])).sampling.tags == {"prod"}


def test_reruns_pick_the_same_cases():
    texts = [f"What is the refund window for order {i}?" for i in range(300)]
    picks = []
    for _ in range(2):
        session = _session(sample_rate=0.3)
        for t in texts:
            session.submit(_case(t))
        picks.append([c.test_case.input for c in session.kept()])
        session.close()
    assert picks[0] == picks[1] and 60 <= len(picks[0]) <= 120


# ------------------------------------------------------------------------------------------------ conversations
def test_a_conversation_is_judged_whole_or_not_at_all():
    session = _session(sample_rate=0.5)
    for turn in range(4):  # turns arrive interleaved across conversations, each with its own input
        for thread in range(60):
            session.submit(_case(f"turn {turn} of thread {thread}: question {turn * 7 + thread}",
                                 **{THREAD_KEY: f"thread-{thread}"}))
    kept: dict[str, int] = {}
    for c in session.kept():
        kept[c.metadata[THREAD_KEY]] = kept.get(c.metadata[THREAD_KEY], 0) + 1
    assert set(kept.values()) == {4}  # every kept conversation has all its turns
    assert 15 <= len(kept) <= 45  # and about half of them are kept
    assert session.counters["sampled"] == 4 * len(kept) and session.counters["unsampled"] == 4 * (60 - len(kept))
    session.close()


def test_a_conversational_case_is_keyed_by_its_thread_else_its_first_user_turn():
    s = Sampling(rate=0.5)

    def conv(first, thread=None):
        tc = ConversationalTestCase(turns=[Turn(role="user", content=first), Turn(role="assistant", content="ok")])
        return CapturedCase(tc, metadata={THREAD_KEY: thread} if thread else {})

    assert s.key_of(conv("Hello there!")) == "input:hello there"
    assert s.key_of(conv("Hello there!", thread="t-9")) == "thread:t-9"


def test_a_user_key_function_decides_and_none_falls_through(caplog):
    by_user = Sampling(rate=0.5, key=lambda c: c.metadata.get("user"))
    assert by_user.key_of(_case("q", user="u1")) == "key:u1"
    assert by_user.key_of(_case("q", **{THREAD_KEY: "t"})) == "thread:t"  # no user: the conversation
    users = [f"user-{i}" for i in range(200)]
    decisions = {u: {by_user.sampled(_case(f"question {j}", user=u)) for j in range(5)} for u in users}
    assert all(len(d) == 1 for d in decisions.values())  # one decision per user, whatever the question
    # a key function that raises: sampled by the default key instead, logged once, never raised into the app

    def broken(case):
        raise KeyError("user")

    session = _session(sampling=Sampling(rate=0.5, key=broken))
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        for i in range(20):
            session.submit(_case(f"question {i}"))
    assert sum("key function failed" in r.getMessage() for r in caplog.records) == 1
    c = session.counters
    assert c["seen"] == 20 and c["sampled"] + c["unsampled"] == 20
    assert [x.test_case.input for x in session.kept()] == [
        f"question {i}" for i in range(20) if Sampling(rate=0.5).sampled(_case(f"question {i}"))]
    session.close()


# ------------------------------------------------------------------------------------------------ filters
def test_filters_by_retriever_chain_tags_and_metadata():
    s = Sampling(retrievers=["docs"], chains=["support"], tags=["prod", "beta"], metadata={"tier": "free"})
    good = {RETRIEVER_NAME_KEY: "docs", CHAIN_KEY: "support", TAGS_KEY: ["prod", "x"],
            RUN_METADATA_KEY: {"tier": "free", "user": "u"}}
    assert s.decide(_case("q", **good)) == "sampled"
    assert s.decide(_case("q", **{**good, RETRIEVER_NAME_KEY: ["faq", "docs"]})) == "sampled"  # two retrievers
    assert s.decide(_case("q", **{**good, RUN_METADATA_KEY: {}, "tier": "free"})) == "sampled"  # case metadata
    for change in ({RETRIEVER_NAME_KEY: "faq"}, {CHAIN_KEY: "sales"}, {TAGS_KEY: ["dev"]}, {TAGS_KEY: None},
                   {RUN_METADATA_KEY: {"tier": "paid"}}, {RUN_METADATA_KEY: None}):
        assert s.decide(_case("q", **{**good, **change})) == "filtered", change
    assert s.decide(_case("q")) == "filtered"  # nothing recorded: a filter cannot pass it
    # filters first, then the draw
    half = Sampling(rate=0.5, tags=["prod"])
    draws = {half.decide(_case(f"q {i}", **{TAGS_KEY: ["prod"]})) for i in range(50)}
    assert draws == {"sampled", "unsampled"}


def test_counters_and_unsampled_cases_are_neither_kept_nor_stored(tmp_path):
    store = open_store(tmp_path / "cj.db")
    session = _session(mode="deferred", store=store, max_kept=100,
                       sampling=Sampling(rate=0.5, chains=["support"]))
    chains = ["support", "sales"]
    for i in range(200):
        session.submit(_case(f"question {i}", **{CHAIN_KEY: chains[i % 2]}))
    c = session.counters
    assert c["seen"] == 200 and c["filtered"] == 100 and c["sampled"] + c["unsampled"] == 100
    assert 30 <= c["sampled"] <= 70
    assert len(store.load_cases(session.run.id)) == c["sampled"]  # only sampled cases reach the store
    assert all(x.metadata[CHAIN_KEY] == "support" for x in session.kept())
    assert "sampled=" in repr(session) and "filtered=100" in repr(session)
    session.close()
    summary = store.run_info(session.run.id).summary
    assert summary["counters"]["filtered"] == 100


class LazyCase(CapturedCase):
    """A case whose test case and metadata exist only once assembled (as the LlamaIndex integration's)."""

    def __init__(self, text, meta):
        super().__init__(test_case=None, metadata={})  # type: ignore[arg-type]
        self.__dict__["_raw"] = (text, meta)
        self.__dict__["_ready"] = False
        self.__dict__["_callbacks"] = []
        self.__dict__["assembled_on"] = None

    @property
    def assembled(self):
        return self.__dict__["_ready"]

    def assemble(self):
        import threading

        if not self.__dict__["_ready"]:
            text, meta = self.__dict__["_raw"]
            self.test_case = LLMTestCase(input=text, actual_output="a", retrieval_context=["Refunds: 30 days."])
            self.metadata = dict(meta)
            self.__dict__["_ready"] = True
            self.__dict__["assembled_on"] = threading.current_thread().name
            for cb in self.__dict__["_callbacks"]:
                cb(self)
        return True

    def when_assembled(self, callback):
        if self.__dict__["_ready"]:
            callback(self)
        else:
            self.__dict__["_callbacks"].append(callback)


def test_a_lazy_case_is_sampled_at_its_assembly_off_the_apps_thread():
    got = []
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), sample_rate=0.5,
                             on_result=lambda c, r: got.append(c))
    cases = [LazyCase(f"question {i}", {THREAD_KEY: f"t{i % 10}"}) for i in range(40)]
    for c in cases:
        session.submit(c)
    assert session.flush(30)
    assert all(c.__dict__["assembled_on"] != "MainThread" for c in cases)
    sampled_threads = {f"t{i}" for i in range(10) if Sampling(rate=0.5).sampled(_case("x", **{THREAD_KEY: f"t{i}"}))}
    assert {c.metadata[THREAD_KEY] for c in got} == sampled_threads
    assert session.counters["sampled"] == 4 * len(sampled_threads) == session.counters["judged"]
    assert session.counters["unsampled"] == 40 - 4 * len(sampled_threads)
    session.close()

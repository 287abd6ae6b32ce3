"""Capture with a real ``ChatOpenAI`` judge on a loopback server: several ``capture()`` blocks in a row (sync and
async) and a handler reused across calls keep every result. Each block used to score on a loop of its own, and
langchain-openai's HTTP client, bound to the first loop, lost about 5% of results to "bound to a different event
loop" in the next blocks."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_openai")

from fault_server import FaultServer  # noqa: E402  (tests/fault_server.py, on sys.path by pytest's pythonpath)
from langchain_openai import ChatOpenAI  # noqa: E402

from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric  # noqa: E402
from contextjudge_langchain import ContextJudgeCallbackHandler, capture  # noqa: E402

QUESTIONS = ["How many vacation days do I get?", "How do I request vacation?", "What is the expense deadline?"]


@pytest.fixture(scope="module")
def server():
    with FaultServer(yes_words=["vacation", "expense"]) as srv:
        yield srv


@pytest.fixture()
def real_judge(server):
    return ChatOpenAI(model="judge-model", base_url=server.url, api_key="sk-test", temperature=0)


def _metrics(judge):
    return [ContextualRelevancyMetric(model=judge), ContextualPrecisionMetric(model=judge)]


def _all_scored(session, goldens_given: bool) -> None:
    assert len(session.cases) == len(QUESTIONS)
    for case in session.cases:
        names = {r.name for r in case.results}
        assert "Contextual Relevancy" in names, case.results
        for r in case.results:
            if r.name == "Contextual Precision" and case.test_case.expected_output is None:
                # no golden matched, so no expected output: an error result that says what to do, never a skip
                assert r.score is None and "golden" in r.error, r
                continue
            assert r.error is None, r.error
            assert 0.0 <= r.score <= 1.0


def test_three_capture_blocks_in_a_row(chain, real_judge, goldens):
    for _ in range(3):
        with capture(metrics=_metrics(real_judge), goldens=goldens) as session:
            chain.batch(QUESTIONS)
        _all_scored(session, True)


async def test_async_capture_blocks_after_sync_ones(chain, real_judge, goldens):
    with capture(metrics=_metrics(real_judge), goldens=goldens) as session:
        chain.batch(QUESTIONS)
    _all_scored(session, True)
    for _ in range(2):
        async with capture(metrics=_metrics(real_judge), goldens=goldens) as session:
            await chain.abatch(QUESTIONS)
        _all_scored(session, True)


def test_one_handler_many_calls(chain, real_judge):
    handler = ContextJudgeCallbackHandler(metrics=_metrics(real_judge))
    for q in QUESTIONS:
        chain.invoke(q, config={"callbacks": [handler]})
        assert handler.flush(60)
    _all_scored(handler, False)

"""The three ways of attaching the handler, and what a captured case contains."""

from __future__ import annotations

import pytest

from contextjudge import LLMTestCase
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge_langchain import ContextJudgeCallbackHandler, capture, current_handler, instrument, uninstrument

Q = "How many days of paid time off do full-time employees get each year?"


def check_case(case, question, answer):
    tc = case.test_case
    assert isinstance(tc, LLMTestCase)
    assert tc.input == question
    assert tc.actual_output == answer
    # named after the question (what a person looks for in a report), the retriever's name beside it
    assert tc.name == question and case.source == "policy_retriever"
    assert tc.additional_metadata["retriever"] == "policy_retriever"
    ids = [n.id for n in tc.retrieval_context]
    assert ids[0] == "pto-001" and len(ids) == 3
    assert tc.retrieval_context[0].metadata["title"] == "Paid time off"
    assert tc.retrieval_context[0].text.startswith("Full-time employees accrue 25 days")
    assert case.metadata["retriever_query"] == question
    assert case.metadata["answer_source"] == "llm:ExtractiveChatModel"


def test_config_callbacks(chain, judge):
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)])
    out = chain.invoke(Q, config={"callbacks": [handler]})
    assert handler.flush(30)
    [case] = handler.cases
    check_case(case, Q, out)
    [(c, r)] = handler.results
    assert c is case and r.name == "Contextual Relevancy" and r.score is not None


def test_capture_block_needs_no_chain_change(chain, judge):
    with capture(metrics=[ContextualRelevancyMetric(model=judge)]) as session:
        assert current_handler() is session
        out = chain.invoke(Q)
    assert current_handler() is None
    [case] = session.cases
    check_case(case, Q, out)
    assert len(session.results) == 1  # the block waited for the score
    chain.invoke(Q)  # outside the block: not captured
    assert len(session.cases) == 1


async def test_capture_block_async(chain, judge):
    async with capture(metrics=[ContextualRelevancyMetric(model=judge)]) as session:
        out = await chain.ainvoke(Q)
    [case] = session.cases
    check_case(case, Q, out)
    assert len(session.results) == 1


def test_capture_with_existing_handler(chain):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    with capture(handler=handler) as session:
        chain.invoke(Q, config={"callbacks": [handler]})  # attached twice: still one case
    assert session is handler and len(handler.cases) == 1
    with pytest.raises(TypeError):
        capture(metrics=[], handler=handler)


def test_instrument_whole_process(chain, judge):
    handler = instrument(metrics=[ContextualPrecisionMetric(model=judge)], mode="deferred", max_kept=None)
    try:
        out = chain.invoke(Q)
        chain.invoke("Can I bring my dog to the office?")
    finally:
        assert uninstrument() is handler
    chain.invoke(Q)
    assert len(handler.cases) == 2
    check_case(handler.cases[0], Q, out)
    assert uninstrument() is None


def test_instrument_replaces_previous(chain):
    first = instrument(metrics=[], mode="off", max_kept=None)
    second = instrument(metrics=[], mode="off", max_kept=None)
    try:
        chain.invoke(Q)
    finally:
        uninstrument()
    assert len(first.cases) == 0 and len(second.cases) == 1


def test_hooks_are_registered_once(chain):
    from langchain_core.tracers.context import _configure_hooks

    from contextjudge_langchain import _attach

    for _ in range(3):
        with capture(metrics=[], mode="off", max_kept=None):
            chain.invoke(Q)
        instrument(metrics=[], mode="off", max_kept=None)
        uninstrument()
    ours = [h for h in _configure_hooks if h[0] in (_attach._capture_var, _attach._process_slot)]
    assert len(ours) == 2

"""Concurrent runs never mix: abatch, batch with threads, plain threads, asyncio tasks, streaming."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge_langchain import ContextJudgeCallbackHandler


def questions(goldens, n=50):
    base = [g["input"] for g in goldens]
    return [f"{base[i % len(base)]} (request {i})" for i in range(n)]


def check_unmixed(handler, qs, outs, retriever):
    cases = {c.test_case.input: c for c in handler.cases}
    assert len(handler.cases) == len(qs) and len(cases) == len(qs)
    for q, out in zip(qs, outs, strict=True):
        tc = cases[q].test_case
        assert tc.actual_output == out
        expected_ids = [d.id for d in retriever.invoke(q)]
        assert [n.id for n in tc.retrieval_context] == expected_ids
        assert cases[q].metadata["retriever_query"] == q
    assert len({c.root_run_id for c in handler.cases}) == len(qs)


async def test_abatch_50_concurrent(chain, retriever, goldens, judge):
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=judge)])
    qs = questions(goldens)
    outs = await chain.abatch(qs, config={"callbacks": [handler], "max_concurrency": 50})
    assert await handler.aflush(60)
    check_unmixed(handler, qs, outs, retriever)
    assert len(handler.results) == 50
    assert handler._book.is_empty()  # noqa: SLF001 - nothing left behind


def test_batch_threads(chain, retriever, goldens):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    qs = questions(goldens, 40)
    outs = chain.batch(qs, config={"callbacks": [handler], "max_concurrency": 16})
    check_unmixed(handler, qs, outs, retriever)


def test_plain_threads(chain, retriever, goldens):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    qs = questions(goldens, 40)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda q: chain.invoke(q, config={"callbacks": [handler]}), qs))
    check_unmixed(handler, qs, outs, retriever)


async def test_asyncio_tasks(chain, retriever, goldens):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    qs = questions(goldens, 30)
    outs = await asyncio.gather(*(chain.ainvoke(q, config={"callbacks": [handler]}) for q in qs))
    check_unmixed(handler, qs, outs, retriever)


def test_stream(chain, retriever):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    q = "Can I bring my dog to the office?"
    chunks = list(chain.stream(q, config={"callbacks": [handler]}))
    assert len(chunks) > 3
    check_unmixed(handler, [q], ["".join(chunks)], retriever)


async def test_astream(chain, retriever):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    q = "How do I report a phishing email?"
    chunks = [c async for c in chain.astream(q, config={"callbacks": [handler]})]
    assert len(chunks) > 3
    check_unmixed(handler, [q], ["".join(chunks)], retriever)


async def test_astream_events(chain, retriever):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    q = "How much does the on-call rotation pay?"
    events = [e async for e in chain.astream_events(q, version="v2", config={"callbacks": [handler]})]
    out = next(e["data"]["output"] for e in reversed(events) if e["event"] == "on_chain_end")
    check_unmixed(handler, [q], [out], retriever)

"""Fault suite: the vector store wrappers under many threads and asyncio tasks while handlers come and go.

Each request is a real LCEL runnable that calls a vector store directly, inside its own ``capture()`` block (a new
handler, closed after it: each one puts the patch on and takes it off), while another thread keeps installing and
removing a process-wide handler with ``instrument()``/``uninstrument()``. The store answers each query with
documents named after it, some as lists and some as one-pass iterators, sync and async, yielding the GIL or the loop
in the middle of every search. Checked: every app call got exactly its own documents, every request's handler holds
exactly one case, of its own request, with those documents; every case the process-wide handlers caught is also
its own request's; and once all is closed no wrapper is left on any class.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import VectorStore

from contextjudge_langchain import ContextJudgeCallbackHandler, capture, instrument, uninstrument
from contextjudge_langchain import _vectorstores as vs

K = 3


def _docs(query: str, k: int) -> list[Document]:
    return [Document(f"{query} passage {j}", id=f"{query}#{j}") for j in range(k)]


class EchoStore(VectorStore):
    """Answers a query with documents named after it; every other call hands back a one-pass iterator."""

    def add_texts(self, texts, metadatas=None, **kwargs):
        raise NotImplementedError

    @classmethod
    def from_texts(cls, texts, embedding, metadatas=None, **kwargs):
        raise NotImplementedError

    def similarity_search(self, query, k=4, **kwargs):
        time.sleep(0)  # let another thread in mid-search
        docs = _docs(query, k)
        return iter(docs) if hash(query) % 2 else docs

    def similarity_search_with_score(self, query, k=4, **kwargs):
        time.sleep(0)
        return zip(_docs(query, k), [0.9, 0.8, 0.7, 0.6][:k], strict=False)

    async def asimilarity_search(self, query, k=4, **kwargs):
        await asyncio.sleep(0)  # let another task in mid-search
        docs = _docs(query, k)
        return (d for d in docs) if hash(query) % 2 else docs

    async def asimilarity_search_with_score(self, query, k=4, **kwargs):
        await asyncio.sleep(0)
        return zip(_docs(query, k), [0.9, 0.8, 0.7, 0.6][:k], strict=False)


STORE = EchoStore()


def _ids(result) -> list[str]:
    return [(x[0] if isinstance(x, tuple) else x).id for x in result]


CHECKED: list[str] = []


def _check_case(handler, question: str, problems: list[str]) -> None:
    CHECKED.append(question)
    cases = handler.cases
    if len(cases) != 1:
        problems.append(f"{question}: {len(cases)} cases in its own handler")
        return
    tc = cases[0].test_case
    got = [n.id for n in tc.retrieval_context or []]
    if tc.input != question or got != [f"{question}#{j}" for j in range(K)]:
        problems.append(f"{question}: case of {tc.input!r} with {got}")


def test_threads_and_tasks_each_get_and_record_their_own_documents_while_handlers_come_and_go():
    import gc  # noqa: PLC0415

    gc.collect()
    patched_before = vs.is_patched()  # another test's handler still alive in this process keeps the patch on
    problems: list[str] = []
    stop = threading.Event()
    global_cases: list = []

    def churn() -> None:  # a process-wide handler installed and removed over and over
        while not stop.is_set():
            session = instrument(metrics=[], mode="off", max_kept=None)
            time.sleep(0.002)
            uninstrument()
            session.handler.flush(10)
            global_cases.extend(session.cases)
            session.close(5)

    def thread_requests(t: int) -> None:
        rng = random.Random(t)
        for i in range(12):
            question = f"t{t}-r{i}"
            method = rng.choice(["similarity_search", "similarity_search_with_score"])
            fn = RunnableLambda(lambda q, m=method: list(getattr(STORE, m)(q, k=K)))
            handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
            try:
                with capture(handler=handler):
                    got = fn.invoke(question)
                if _ids(got) != [f"{question}#{j}" for j in range(K)]:
                    problems.append(f"{question}: the app got {_ids(got)}")
                _check_case(handler, question, problems)
            finally:
                handler.close(5)

    async def task_request(g: int, i: int) -> None:
        question = f"a{g}-r{i}"
        method = "asimilarity_search" if i % 2 else "asimilarity_search_with_score"

        async def search(q: str) -> list:
            return list(await getattr(STORE, method)(q, k=K))

        handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
        try:
            async with capture(handler=handler):
                got = await RunnableLambda(search).ainvoke(question)
            if _ids(got) != [f"{question}#{j}" for j in range(K)]:
                problems.append(f"{question}: the app got {_ids(got)}")
            _check_case(handler, question, problems)
        finally:
            handler.close(5)

    def loop_requests(g: int) -> None:
        async def main() -> None:
            await asyncio.gather(*(task_request(g, i) for i in range(12)))

        asyncio.run(main())

    churner = threading.Thread(target=churn)
    churner.start()
    workers = [threading.Thread(target=thread_requests, args=(t,)) for t in range(6)]
    workers += [threading.Thread(target=loop_requests, args=(g,)) for g in range(3)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
    finally:
        stop.set()
        churner.join(60)
    assert not any(w.is_alive() for w in workers) and not churner.is_alive()
    assert problems == [], problems[:10]
    assert len(CHECKED) == 6 * 12 + 3 * 12
    for case in global_cases:  # the process-wide handler's cases: each is one request's, with its documents
        tc = case.test_case
        assert [n.id for n in tc.retrieval_context] == [f"{tc.input}#{j}" for j in range(K)], tc.input
    gc.collect()
    if patched_before:
        return
    assert not vs.is_patched()
    todo, wrapped = [VectorStore], []
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        wrapped += [(cls.__name__, n) for n, v in vars(cls).items() if hasattr(v, "__contextjudge_wrapped__")]
    assert wrapped == []


def test_a_run_never_fails_when_uninstrument_empties_the_slot_between_langchains_two_reads(monkeypatch):
    """LangChain reads a configure hook's variable twice (``if var.get() is not None: var.get() or handle_class()``).
    The process-wide slot ``instrument()`` fills can be emptied by ``uninstrument()`` in another thread between the two
    reads (seen under load in the test above: a TypeError, ``'NoneType' object is not callable``, in the user's run).
    Here the slot answers a handler, then None, every time: the run goes through (it gets a handler that does nothing)."""
    from contextjudge_langchain import _attach

    _attach._ensure_hooks()
    installed = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    reads = iter([installed, None] * 50)
    monkeypatch.setattr(_attach._process_slot, "get", lambda default=None: next(reads))
    try:
        assert RunnableLambda(lambda q: q.upper()).invoke("x") == "X"
        assert asyncio.run(RunnableLambda(lambda q: q.upper()).ainvoke("y")) == "Y"
    finally:
        installed.close(5)

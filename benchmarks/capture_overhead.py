"""How much latency capture adds to each call of an app, with scoring in the background.

Each case builds a small RAG app with a fake model and an in-memory retriever (no network, no model download),
then calls it N times without capture and N times with it, interleaved so that drift hits both sides alike, and
reports the median per-call latency of each, the added milliseconds and the ratio. The target is at most 5%
added, or at most 0.3 ms.

    python benchmarks/capture_overhead.py            # every case, 1000 calls each
    python benchmarks/capture_overhead.py -n 500 --case langchain
    python benchmarks/capture_overhead.py --mode off  # capture only, no scoring (sets CJ_MODE for every case)
    python benchmarks/capture_overhead.py --worker    # mode "worker" at sample rates 1.0 and 0.1, next to a busy
                                                      # `contextjudge worker` process (embedded judge)

To add a framework, write a function ``bench_<name>(n: int) -> Measurement`` below and add it to ``CASES``.
The judge is contextjudge's FakeJudge: it answers in-process, so its CPU time competes with the app for the GIL,
which a remote judge would not; the figure is therefore on the pessimistic side.

``--worker`` measures the production set-up instead: the LangChain app with capture in mode "worker" (the app only
writes cases to a SQLite store, from its writer thread) at each ``--rates`` value, against the same app with no
capture at all, while a real ``contextjudge worker`` subprocess (``--worker-model``, the embedded judge by default;
its default CPU share: all cores but one, nice 10) is busy scoring a queue pre-filled with ``--prefill`` cases. It
checks that the worker was busy from the first measured call to the last (cases still queued at the end), and also
prints the app's median with no worker running, for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

TARGET_RATIO = 0.05
TARGET_MS = 0.3


@dataclass
class Measurement:
    case: str
    calls: int
    baseline_ms: float
    captured_ms: float
    cases_captured: int
    results_scored: int
    floor_ms: float | None = None
    """Latency added by a do-nothing callback/event handler in the same harness: the framework's own cost."""
    mean_added_ms: float | None = None
    """Mean (not median) added latency: background work done in bursts shows here, not in the median."""

    @property
    def added_ms(self) -> float:
        return self.captured_ms - self.baseline_ms

    @property
    def ratio(self) -> float:
        return self.added_ms / self.baseline_ms if self.baseline_ms else 0.0

    @property
    def within_target(self) -> bool:
        return self.ratio <= TARGET_RATIO or self.added_ms <= TARGET_MS


def interleaved_medians(plain: Callable[[int], object], captured: Callable[[int], object], n: int,
                        warmup: int = 50, means: list[tuple[float, float]] | None = None) -> tuple[float, float]:
    """Median milliseconds of ``plain(i)`` and ``captured(i)``, called alternately ``n`` times each.

    When ``means`` is a list, the two means are appended to it too.
    """
    for i in range(warmup):
        plain(i)
        captured(i)
    a: list[float] = []
    b: list[float] = []
    for i in range(n):
        first, second = (plain, captured) if i % 2 == 0 else (captured, plain)
        t0 = time.perf_counter()
        first(i)
        t1 = time.perf_counter()
        second(i)
        t2 = time.perf_counter()
        (a if first is plain else b).append(t1 - t0)
        (b if first is plain else a).append(t2 - t1)
    if means is not None:
        means.append((statistics.fmean(a) * 1000, statistics.fmean(b) * 1000))
    return statistics.median(a) * 1000, statistics.median(b) * 1000


def bench_langchain(n: int) -> Measurement:
    """An LCEL chain: in-memory vector retriever | prompt | offline chat model | parser; handler in background."""
    chain, questions = _langchain_app()
    return _bench_langchain_app("langchain", n, lambda q, cfg: chain.invoke(q, config=cfg), questions)


def bench_langchain_graph(n: int) -> Measurement:
    """LangChain's RAG tutorial: a LangGraph ``StateGraph`` whose ``retrieve`` node calls
    ``vector_store.similarity_search`` directly (no retriever), then ``generate``; handler in background."""
    graph, questions = _langchain_graph_app()
    return _bench_langchain_app("lc_graph", n, lambda q, cfg: graph.invoke({"question": q}, config=cfg), questions)


def bench_langchain_request(n: int) -> Measurement:
    """The LangChain chain's request-thread CPU (``time.thread_time``, immune to other processes) with no handler,
    a do-nothing handler and the contextjudge handler with assembly switched off, interleaved: how much of the
    request path is LangChain's cost of calling any handler and how much is contextjudge's own callbacks. Its
    baseline is the do-nothing handler; the no-handler figure is printed."""
    from contextjudge_langchain import ContextJudgeCallbackHandler

    chain, questions = _langchain_app()
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
    handler._assembler.put = lambda root: None  # noqa: SLF001 - the request path only
    configs = {"none": None, "noop": {"callbacks": [_do_nothing_handler()]}, "ours": {"callbacks": [handler]}}
    cpu: dict[str, list[float]] = {k: [] for k in configs}
    for i in range(n + 50):
        for k, cfg in configs.items():
            t0 = time.thread_time()
            chain.invoke(questions[i % len(questions)], config=cfg)
            cpu[k].append(time.thread_time() - t0)
    m = {k: statistics.median(v[50:]) * 1000 for k, v in cpu.items()}
    print(f"lc_request: request-thread CPU per call {m['none']:.3f} ms with no handler, {m['noop']:.3f} ms with a "
          f"do-nothing handler, {m['ours']:.3f} ms with contextjudge's", file=sys.stderr)
    handler.close(5)
    return Measurement("lc_request", n, m["noop"], m["ours"], 0, 0, floor_ms=m["noop"] - m["none"])


def _bench_langchain_app(name: str, n: int, call: Callable[[str, dict | None], object],
                         questions: list[str]) -> Measurement:
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge
    from contextjudge_langchain import ContextJudgeCallbackHandler

    mode = os.environ.get("CJ_MODE", "background")
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric(model=FakeJudge())], mode=mode,
                                          **_kept(mode))
    config = {"callbacks": [handler]}
    cpu: dict[bool, list[float]] = {False: [], True: []}  # this thread's CPU: immune to other processes

    def ask(i: int, cfg: dict | None = None) -> object:
        t0 = time.thread_time()
        try:
            return call(questions[i % len(questions)], cfg)
        finally:
            cpu[cfg is config].append(time.thread_time() - t0)

    means: list[tuple[float, float]] = []
    ours = _our_threads_cpu()
    baseline, captured = interleaved_medians(ask, lambda i, config=config: ask(i, config), n, means=means)
    handler.flush(120)
    _print_cpu(name, cpu[False], cpu[True], _our_threads_cpu(ours), len(handler.cases))
    noop = {"callbacks": [_do_nothing_handler()]}
    floor_base, floor = interleaved_medians(ask, lambda i: ask(i, noop), n)
    result = Measurement(name, n, baseline, captured, len(handler.cases), len(handler.results),
                         floor_ms=floor - floor_base, mean_added_ms=means[0][1] - means[0][0])
    handler.close(30)
    return result


def _kept(mode: str) -> dict[str, object]:
    """Modes that keep every case without a store need to be told so (``max_kept=None``)."""
    return {} if mode in ("background", "worker") else {"max_kept": None}


def _our_threads_cpu(since: dict[int, float] | None = None) -> dict[int, float]:
    """CPU seconds of each live contextjudge thread (``contextjudge-*``: assembly, the scoring loop, the judge's
    pools), by thread id; with ``since``, the CPU spent since then (threads that ended meanwhile are not counted)."""
    import threading

    out: dict[int, float] = {}
    for t in threading.enumerate():
        if t.name.startswith("contextjudge") and t.ident is not None:
            try:
                out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, AttributeError):  # not Linux, or the thread just ended
                continue
    if since is not None:
        out = {k: v - since.get(k, 0.0) for k, v in out.items()}
    return out


def _print_cpu(name: str, plain: list[float], captured: list[float], ours: dict[int, float] | float,
               cases: int) -> None:
    """The request thread's CPU per call with and without capture (immune to other processes on the machine;
    work a framework runs on its own threads, as an LCEL ``RunnableParallel`` does, is not in it), and what
    contextjudge's own threads (assembly, scoring with the in-process FakeJudge) spent per captured case: that CPU
    competes with the app for the GIL and lands on whichever call runs at that moment."""
    a, b = (statistics.median(x[50:]) * 1000 for x in (plain, captured))  # 50: the warm-up calls
    print(f"{name}: request-thread CPU per call {a:.3f} ms plain, {b:.3f} ms captured: {b - a:+.3f} ms "
          f"({(b - a) / a:+.1%})", file=sys.stderr)
    spent = sum(ours.values()) if isinstance(ours, dict) else ours
    print(f"{name}: contextjudge threads' CPU per captured case {spent / max(1, cases) * 1000:.3f} ms "
          "(assembly and scoring)", file=sys.stderr)


def bench_llama_index(n: int) -> Measurement:
    """A VectorStoreIndex query engine (keyword embedding, offline extractive LLM); instrument() in background.

    The capture handlers are attached to the root dispatcher only around the captured calls (attaching and
    detaching is counted on the captured side), so the baseline runs with no contextjudge handler at all.
    """
    import json as _json
    from importlib.resources import files

    from llama_index.core import VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.schema import TextNode

    import contextjudge_llama_index as cj
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge
    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    corpus = files("contextjudge") / "data/demo_corpus"
    docs = _json.loads((corpus / "docs.json").read_text("utf-8"))["documents"]
    questions = [g["input"] for g in _json.loads((corpus / "goldens.json").read_text("utf-8"))["goldens"]]
    index = VectorStoreIndex([TextNode(text=d["text"], id_=d["id"], metadata={"title": d["title"]}) for d in docs],
                             embed_model=KeywordEmbedding())
    engine = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=3)
    env = __import__("os").environ  # CJ_JUDGE_DELAY: seconds per judge call, to mimic a remote judge
    judge = FakeJudge(delay=float(env.get("CJ_JUDGE_DELAY", 0)))
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], mode=env.get("CJ_MODE", "background"),
                           **_kept(env.get("CJ_MODE", "background")))
    root = get_dispatcher()
    ours = ([h for h in root.span_handlers if type(h).__name__ == "ContextJudgeSpanHandler"],
            [h for h in root.event_handlers if type(h).__name__ == "ContextJudgeEventHandler"])
    plain_handlers = ([h for h in root.span_handlers if h not in ours[0]],
                      [h for h in root.event_handlers if h not in ours[1]])
    root.span_handlers, root.event_handlers = list(plain_handlers[0]), list(plain_handlers[1])

    cpu: dict[str, list[float]] = {"plain": [], "captured": []}  # this thread's CPU: immune to other processes

    def plain(i: int) -> object:
        t0 = time.thread_time()
        try:
            return engine.query(questions[i % len(questions)])
        finally:
            cpu["plain"].append(time.thread_time() - t0)

    def captured(i: int) -> object:
        t0 = time.thread_time()
        root.span_handlers, root.event_handlers = plain_handlers[0] + ours[0], plain_handlers[1] + ours[1]
        try:
            return engine.query(questions[i % len(questions)])
        finally:
            root.span_handlers, root.event_handlers = list(plain_handlers[0]), list(plain_handlers[1])
            cpu["captured"].append(time.thread_time() - t0)

    process_cpu = time.process_time()
    try:
        baseline, captured_ms = interleaved_medians(plain, captured, n)
        scorer.flush(300)
    finally:
        cj.uninstrument()
    process_cpu = time.process_time() - process_cpu
    a, b = (statistics.median(cpu[k][50:]) * 1000 for k in ("plain", "captured"))  # 50: the warm-up calls
    print(f"llama_index: request-thread CPU per call {a:.3f} ms plain, {b:.3f} ms captured: "
          f"{b - a:+.3f} ms ({(b - a) / a:+.1%})", file=sys.stderr)
    # What the other threads (assembly and scoring, with the in-process FakeJudge) spent, per captured case: it
    # competes with the app for the GIL, and lands on whichever call (plain or captured) runs at that moment.
    others = process_cpu - sum(cpu["plain"]) - sum(cpu["captured"])
    print(f"llama_index: other threads' CPU per captured case {others / max(1, len(scorer.cases)) * 1000:.3f} ms "
          f"(assembly and scoring)", file=sys.stderr)
    # No mean: the scoring thread's bursts land on plain and captured calls alike, so a difference of means
    # understates them (it can even be negative); the CPU line above is their full cost.
    return Measurement("llama_index", n, baseline, captured_ms, len(scorer.cases), len(scorer.results))


def bench_llama_retriever(n: int) -> Measurement:
    """A LlamaIndex retriever called by hand, outside any query engine (``index.as_retriever().retrieve``), then
    the offline LLM on its nodes; instrument() in background, attached only around the captured calls."""
    import json as _json
    from importlib.resources import files

    from llama_index.core import VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.schema import TextNode

    import contextjudge_llama_index as cj
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge
    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    corpus = files("contextjudge") / "data/demo_corpus"
    docs = _json.loads((corpus / "docs.json").read_text("utf-8"))["documents"]
    questions = [g["input"] for g in _json.loads((corpus / "goldens.json").read_text("utf-8"))["goldens"]]
    index = VectorStoreIndex([TextNode(text=d["text"], id_=d["id"], metadata={"title": d["title"]}) for d in docs],
                             embed_model=KeywordEmbedding())
    retriever = index.as_retriever(similarity_top_k=3)
    llm = ExtractiveLLM()
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=FakeJudge())],
                           mode=os.environ.get("CJ_MODE", "background"), **_kept(os.environ.get("CJ_MODE", "background")))
    root = get_dispatcher()
    ours = ([h for h in root.span_handlers if type(h).__name__ == "ContextJudgeSpanHandler"],
            [h for h in root.event_handlers if type(h).__name__ == "ContextJudgeEventHandler"])
    plain_handlers = ([h for h in root.span_handlers if h not in ours[0]],
                      [h for h in root.event_handlers if h not in ours[1]])
    root.span_handlers, root.event_handlers = list(plain_handlers[0]), list(plain_handlers[1])
    cpu: dict[str, list[float]] = {"plain": [], "captured": []}

    def app(i: int) -> object:
        q = questions[i % len(questions)]
        nodes = retriever.retrieve(q)
        return llm.complete("Context:\n" + "\n".join(nd.get_content() for nd in nodes) + f"\n\nQuestion: {q}")

    def plain(i: int) -> object:
        t0 = time.thread_time()
        try:
            return app(i)
        finally:
            cpu["plain"].append(time.thread_time() - t0)

    def captured(i: int) -> object:
        t0 = time.thread_time()
        root.span_handlers, root.event_handlers = plain_handlers[0] + ours[0], plain_handlers[1] + ours[1]
        try:
            return app(i)
        finally:
            root.span_handlers, root.event_handlers = list(plain_handlers[0]), list(plain_handlers[1])
            cpu["captured"].append(time.thread_time() - t0)

    ours_before = _our_threads_cpu()
    try:
        baseline, captured_ms = interleaved_medians(plain, captured, n)
        scorer.flush(300)
    finally:
        cj.uninstrument()
    _print_cpu("llama_retr", cpu["plain"], cpu["captured"], _our_threads_cpu(ours_before), len(scorer.cases))
    result = Measurement("llama_retr", n, baseline, captured_ms, len(scorer.cases), len(scorer.results))
    scorer.close(30)
    return result


def bench_vector_store_off(n: int) -> Measurement:
    """``similarity_search`` itself, called directly: before any handler exists (LangChain's own method), and
    with a handler live (the patched method) but the call outside any captured run, so the wrapper only looks and
    calls through. After ``close()`` the method is LangChain's own again, so capture off costs nothing; this
    measures the look-and-call-through that remains while a handler lives."""
    from contextjudge_langchain import ContextJudgeCallbackHandler, _vectorstores

    chain, questions = _langchain_app()
    store = chain.first.steps__["context"].first.vectorstore  # the chain's InMemoryVectorStore
    own = type(store).similarity_search
    times: dict[str, list[float]] = {"own": [], "patched": []}
    for block in range(2 * max(1, n // 50) + 2):  # blocks of 50 calls, alternating, so drift hits both alike
        side = "own" if block % 2 == 0 else "patched"
        handler = None
        if side == "patched":
            handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)
            assert _vectorstores.is_patched() and type(store).similarity_search is not own
        for i in range(50):
            t0 = time.perf_counter()
            store.similarity_search(questions[(block * 50 + i) % len(questions)], k=3)
            times[side].append(time.perf_counter() - t0)
        if handler is not None:
            handler.close(5)
            assert not _vectorstores.is_patched() and type(store).similarity_search is own
    a, b = (statistics.median(times[k][50:]) * 1000 for k in ("own", "patched"))
    return Measurement("vs_passthru", n, a, b, 0, 0)


# ---------------------------------------------------------------------------------------------- mode "worker"
def _langchain_app() -> tuple[object, list[str]]:
    """The LCEL chain the LangChain cases measure (an in-memory vector retriever | prompt | offline chat model |
    parser over the demo corpus) and the demo questions."""
    import json as _json
    from importlib.resources import files

    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    corpus = files("contextjudge") / "data/demo_corpus"
    docs = _json.loads((corpus / "docs.json").read_text("utf-8"))["documents"]
    questions = [g["input"] for g in _json.loads((corpus / "goldens.json").read_text("utf-8"))["goldens"]]
    store = InMemoryVectorStore(BagOfWordsEmbeddings(dim=256))
    store.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"]}) for d in docs])
    prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])
    chain = ({"context": store.as_retriever(search_kwargs={"k": 3})
              | (lambda ds: "\n\n".join(d.page_content for d in ds)),
              "question": RunnablePassthrough()} | prompt | ExtractiveChatModel() | StrOutputParser())
    return chain, questions


def _langchain_graph_app() -> tuple[object, list[str]]:
    """LangChain's RAG tutorial graph (part 1) over the demo corpus: ``retrieve`` calls
    ``vector_store.similarity_search(question, k=3)``, ``generate`` prompts the offline chat model."""

    from langchain_core.documents import Document
    from langchain_core.prompts import ChatPromptTemplate
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    from contextjudge_langchain.testing import ExtractiveChatModel

    chain, questions = _langchain_app()
    vector_store = chain.first.steps__["context"].first.vectorstore
    llm = ExtractiveChatModel()
    prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])

    # the tutorial's State class, spelled functionally: this module's annotations are strings
    State = TypedDict("State", {"question": str, "context": list[Document], "answer": str})  # noqa: N806, UP013

    def retrieve(state: dict):
        return {"context": vector_store.similarity_search(state["question"], k=3)}

    def generate(state: dict):
        docs_content = "\n\n".join(doc.page_content for doc in state["context"])
        return {"answer": llm.invoke(prompt.invoke({"question": state["question"], "context": docs_content})).content}

    builder = StateGraph(State).add_sequence([retrieve, generate])
    builder.add_edge(START, "retrieve")
    return builder.compile(), questions


def _do_nothing_handler() -> object:
    """A LangChain callback handler that does nothing: what LangChain's own calling of any handler costs."""
    from langchain_core.callbacks import BaseCallbackHandler

    class DoNothing(BaseCallbackHandler):
        run_inline = True

        def on_chat_model_start(self, *args: object, **kwargs: object) -> None:
            return None

    return DoNothing()


def _worker_metrics() -> list[object]:
    from contextjudge.metrics import ContextualRelevancyMetric, ContextUtilizationMetric

    return [ContextualRelevancyMetric(), ContextUtilizationMetric()]


def _prefill(store_path: str, questions: list[str], n: int) -> None:
    """Write ``n`` distinct cases for the worker (distinct inputs: its verdict cache cannot answer them)."""
    from contextjudge import LLMTestCase
    from contextjudge.capture import CapturedCase, CaptureSession

    session = CaptureSession(_worker_metrics(), mode="worker", store=store_path, run_name="prefill", batch=256)
    for i in range(n):
        q = f"{questions[i % len(questions)]} (prefill {i})"
        session.submit(CapturedCase(LLMTestCase(
            input=q, actual_output="Refunds are accepted within 30 days of purchase.",
            retrieval_context=["Refunds are accepted within 30 days of purchase with a receipt.",
                               f"Order {i} ships from the warehouse in Lyon.",
                               "Support answers within one business day."])))
    session.close(120)


def _queue(store_path: str) -> dict[str, int]:
    from contextjudge.store import open_store

    store = open_store(store_path)
    try:
        return store.queue_counts()
    finally:
        store.close()


def bench_worker(n: int, rates: list[float], worker_model: str, prefill: int, cpus: int | None) -> list[Measurement]:
    """The app with capture in mode "worker" at each rate, against no capture, next to a busy worker process."""
    import shutil
    import subprocess
    import tempfile

    from contextjudge_langchain import ContextJudgeCallbackHandler

    chain, questions = _langchain_app()
    tmp = tempfile.mkdtemp(prefix="cj-bench-worker-")
    store_path = os.path.join(tmp, "queue.db")
    counter = iter(range(10**9))

    def ask(_i: int, cfg: dict | None = None) -> object:  # every call a new input, as production traffic is
        k = next(counter)
        return chain.invoke(f"{questions[k % len(questions)]} (request {k})", config=cfg)

    _prefill(store_path, questions, prefill)
    cmd = [sys.executable, "-m", "contextjudge", "worker", "--store", store_path, "--model", worker_model, "--quiet"]
    if cpus is not None:
        cmd += ["--cpus", str(cpus)]
    print("worker: " + " ".join(cmd), file=sys.stderr)
    worker = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows: list[Measurement] = []
    try:
        deadline = time.monotonic() + 120
        while _queue(store_path).get("done", 0) < 8:  # busy: its judge loaded and scoring
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start scoring: {worker.stderr.read() if worker.stderr else ''}")
            time.sleep(0.2)
        for rate in rates:
            handler = ContextJudgeCallbackHandler(metrics=_worker_metrics(), mode="worker", store=store_path,
                                                  sample_rate=rate, run_name=f"bench-{rate}")
            config = {"callbacks": [handler]}
            before = _queue(store_path)
            means: list[tuple[float, float]] = []
            baseline, captured = interleaved_medians(ask, lambda i, config=config: ask(i, config), n, means=means)
            handler.session.close(60)
            after = _queue(store_path)
            counters = handler.session.counters
            if after.get("queued", 0) == 0 or worker.poll() is not None:
                print(f"worker: WARNING: the worker ran out of work (or stopped) during the rate {rate} measurement; "
                      "raise --prefill", file=sys.stderr)
            print(f"worker: rate {rate}: {counters['sampled']} of {counters['seen']} calls written for the worker; "
                  f"the worker judged {after.get('done', 0) - before.get('done', 0)} cases meanwhile "
                  f"({after.get('queued', 0)} still queued)", file=sys.stderr)
            rows.append(Measurement(f"worker@{rate:g}", n, baseline, captured, counters["written"], 0,
                                    mean_added_ms=means[0][1] - means[0][0]))
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    noop = {"callbacks": [_do_nothing_handler()]}
    quiet, floor = interleaved_medians(ask, lambda i: ask(i, noop), n)
    print(f"worker: after the worker stopped: the app alone {quiet:.3f} ms median; a do-nothing callback handler "
          f"adds {floor - quiet:.3f} ms (LangChain's own cost of calling any handler)", file=sys.stderr)
    for r in rows:
        r.floor_ms = floor - quiet
    return rows


CASES: dict[str, Callable[[int], Measurement]] = {
    "langchain": bench_langchain,
    "lc_graph": bench_langchain_graph,
    "lc_request": bench_langchain_request,
    "llama_index": bench_llama_index,
    "llama_retr": bench_llama_retriever,
    "vs_passthru": bench_vector_store_off,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--calls", type=int, default=1000, help="calls per side (at least 500 for a figure)")
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases")
    parser.add_argument("--mode", choices=("background", "deferred", "off"), default=None,
                        help="scoring mode of the captured side (default: $CJ_MODE, else background)")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument("--worker", action="store_true",
                        help='measure capture in mode "worker" next to a busy `contextjudge worker` process instead')
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 0.1], help="--worker: sample rates")
    parser.add_argument("--worker-model", default="local", help="--worker: the worker's judge (default: local)")
    parser.add_argument("--prefill", type=int, default=5000, help="--worker: cases queued before measuring")
    parser.add_argument("--cpus", type=int, default=None, help="--worker: the worker's --cpus (default: its own)")
    args = parser.parse_args(argv)
    if args.mode:
        os.environ["CJ_MODE"] = args.mode
    if args.worker:
        rows = bench_worker(args.calls, args.rates, args.worker_model, args.prefill, args.cpus)
    else:
        rows = [CASES[name](args.calls) for name in (args.case or CASES)]
    if args.json:
        print(json.dumps([asdict(r) | {"added_ms": r.added_ms, "ratio": r.ratio} for r in rows], indent=2))
    else:
        print(f"{'case':<12} {'calls':>6} {'baseline ms':>12} {'captured ms':>12} {'added ms':>9} {'added %':>8}  "
              "target")
        for r in rows:
            print(f"{r.case:<12} {r.calls:>6} {r.baseline_ms:>12.3f} {r.captured_ms:>12.3f} {r.added_ms:>9.3f} "
                  f"{r.ratio * 100:>7.1f}%  {'ok' if r.within_target else 'MISSED'} "
                  f"(<= {TARGET_RATIO:.0%} or <= {TARGET_MS} ms; {r.cases_captured} cases, {r.results_scored} scores)")
            if r.mean_added_ms is not None:
                print(f"{'':<12} mean added {r.mean_added_ms:.3f} ms (background assembly and scoring run in bursts, "
                      "so they weigh on the mean more than on the median)")
            if r.floor_ms is not None:
                print(f"{'':<12} a do-nothing handler adds {r.floor_ms:.3f} ms in the same harness (the framework's "
                      "own cost of calling any handler)")
    return 0 if all(r.within_target for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

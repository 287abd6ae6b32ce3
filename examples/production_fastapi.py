"""A production RAG service with contextjudge attached: capture in one line, 10% sampled, judged by a separate
worker process within a daily budget, scores back in the app and in the store.

    python examples/production_fastapi.py serve            # the service on :8000 and its worker process
    python examples/production_fastapi.py load -n 300      # send traffic: 300 questions in 60 conversations
    python examples/production_fastapi.py watch            # the scores as they arrive (GET /scores every 2 s)
    contextjudge trend --store production.db --html trend.html --fail-on-drop   # the days, and an alert

The app never judges: capture writes the sampled cases to the store (``mode="worker"``) and returns; a
``contextjudge worker`` process claims them, judges them with the embedded offline judge (leaving one core to the
app, within a daily budget of judge calls), and writes the results, which the app receives back as result events. With
several app processes or workers, point them all at one PostgreSQL store (``--store postgresql+psycopg://...``);
SQLite takes one worker.

Everything is offline: the retriever is an in-memory vector store with bag-of-words embeddings over the demo's
fictional company policies, and the "LLM" quotes the context (contextjudge-langchain's stand-ins). Replace them
with your own. Needs ``pip install fastapi uvicorn httpx`` and contextjudge with its LangChain integration.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from importlib.resources import files
from typing import Any

from pydantic import BaseModel

STORE = os.environ.get("CONTEXTJUDGE_STORE", "production.db")
SAMPLE_RATE = 0.1
DAILY_CALLS = 200_000  # the worker's judge budget per (UTC) day, in judge calls; cases past it are skipped and counted


# ---------------------------------------------------------------------------------------------------- the RAG app
def build_chain(degraded: bool = False) -> Any:
    """An LCEL RAG chain over the demo policies (offline stand-ins for the embeddings and the model). ``degraded``:
    a broken query-rewriting step sends the retriever the same unrelated query whatever the question (what a bad
    deploy looks like on `contextjudge trend`)."""
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    docs = json.loads((files("contextjudge") / "data/demo_corpus/docs.json").read_text("utf-8"))["documents"]
    vectors = InMemoryVectorStore(BagOfWordsEmbeddings())
    vectors.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"]}) for d in docs])
    retriever = vectors.as_retriever(search_kwargs={"k": 3}).with_config(run_name="policy_search")
    if degraded:
        from langchain_core.runnables import RunnableLambda

        retriever = RunnableLambda(lambda _question: "office plants and parking spaces") | retriever
    prompt = ChatPromptTemplate.from_template("Answer from the context only.\nContext:\n{context}\n\n"
                                              "Question: {question}")
    return ({"context": retriever | (lambda ds: "\n\n".join(d.page_content for d in ds)),
             "question": RunnablePassthrough()} | prompt | ExtractiveChatModel() | StrOutputParser()
            ).with_config(run_name="policy_rag")


class Ask(BaseModel):
    question: str
    session_id: str | None = None


class Scoreboard:
    """What the app hears back: each result event the worker's scores come back as, tallied per metric."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_metric: dict[str, list[float]] = {}
        self.errors = 0
        self.last: list[dict[str, Any]] = []

    def __call__(self, case: Any, result: Any) -> None:  # a CaptureSession on_result callback
        with self._lock:
            if result.score is None:
                self.errors += 1
            else:
                self.by_metric.setdefault(result.name, []).append(result.score)
            self.last = ([{"metric": result.name, "score": result.score,
                           "input": getattr(case.test_case, "input", None)}] + self.last)[:5]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"metrics": {k: {"n": len(v), "mean": round(sum(v) / len(v), 3)} for k, v in self.by_metric.items()},
                    "errors": self.errors, "latest": list(self.last)}


def create_app(store: str = STORE, sample_rate: float = SAMPLE_RATE, degraded: bool = False) -> Any:
    from fastapi import FastAPI

    from contextjudge_langchain import instrument, uninstrument

    chain = build_chain(degraded)
    scores = Scoreboard()
    # the one line: every retrieval becomes a case; 10% of conversations are written for the worker to judge
    session = instrument(mode="worker", store=store, sample_rate=sample_rate, on_result=scores)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):  # noqa: ANN202
        yield
        uninstrument()  # this process captures no more runs
        session.close(timeout=10)  # writes what is still queued for the worker; never judges

    app = FastAPI(title="policy assistant", lifespan=lifespan)

    @app.post("/ask")
    async def ask(body: Ask) -> dict[str, str]:
        config = {"configurable": {"thread_id": body.session_id}} if body.session_id else {}
        return {"answer": await chain.ainvoke(body.question, config=config)}

    @app.get("/scores")
    def scores_now() -> dict[str, Any]:
        return {"capture": dict(session.counters), **scores.snapshot()}

    app.state.capture = session
    return app


# ---------------------------------------------------------------------------------------------------- commands
def worker_command(store: str, metrics_port: int | None = None) -> list[str]:
    """The worker, as you would run it in its own container or service: the embedded judge (which spends no token
    budget: it is bounded by its CPUs), a daily budget in judge calls, and Prometheus metrics when asked for."""
    cmd = [sys.executable, "-m", "contextjudge", "worker", "--store", store, "--model", "local",
           "--budget-calls-per-day", str(DAILY_CALLS)]
    if metrics_port is not None:
        cmd += ["--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1"]
    return cmd


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    worker = None
    if not args.no_worker:
        cmd = worker_command(args.store, args.metrics_port)
        print("worker:", shlex.join(cmd), flush=True)
        worker = subprocess.Popen(cmd)
    try:
        uvicorn.run(create_app(args.store, args.sample_rate, args.degraded), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)  # the worker finishes or gives back what it holds, then exits
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
    return 0


QUESTIONS = [
    "How many days of paid time off do I get?", "Can I carry over unused vacation days?",
    "What is the per diem for meals on business travel?", "How do I book a flight for a work trip?",
    "How often must I change my password?", "What should I do if my laptop is stolen?",
    "How long is parental leave?", "Can I work from home on Fridays?", "Who approves expense reports?",
    "How do I report a security incident?",
]


def load(args: argparse.Namespace) -> int:
    import httpx

    rng = random.Random(args.seed)
    url = f"http://{args.host}:{args.port}/ask"
    t0 = time.perf_counter()
    latencies = []
    with httpx.Client(timeout=30) as client:
        for i in range(args.requests):
            session_id = f"user-{i % args.conversations}"
            t = time.perf_counter()
            client.post(url, json={"question": rng.choice(QUESTIONS), "session_id": session_id}).raise_for_status()
            latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    print(f"{args.requests} requests in {time.perf_counter() - t0:.1f}s; median {latencies[len(latencies) // 2]:.1f} ms "
          f"per request (client side)")
    return 0


def watch(args: argparse.Namespace) -> int:
    import httpx

    url = f"http://{args.host}:{args.port}/scores"
    deadline = time.monotonic() + args.seconds
    while True:
        body = httpx.get(url, timeout=10).json()
        c = body["capture"]
        means = ", ".join(f"{k} {v['mean']:.2f} (n={v['n']})" for k, v in sorted(body["metrics"].items())) or "-"
        print(f"seen {c.get('seen', 0)}, sampled {c.get('sampled', 0)}, written {c.get('written', 0)}, "
              f"dropped {c.get('dropped', 0)}, results back {c.get('results_received', 0)} | {means}", flush=True)
        if time.monotonic() >= deadline:
            return 0
        time.sleep(args.every)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("serve", "load", "watch"):
        s = sub.add_parser(name)
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--port", type=int, default=8000)
        if name == "serve":
            s.add_argument("--store", default=STORE, help=f"store path or URL (default {STORE})")
            s.add_argument("--sample-rate", type=float, default=SAMPLE_RATE)
            s.add_argument("--no-worker", action="store_true", help="run the worker yourself (see worker_command)")
            s.add_argument("--metrics-port", type=int, default=None,
                           help="the worker serves Prometheus metrics on this port (127.0.0.1)")
            s.add_argument("--degraded", action="store_true",
                           help="break the retriever's query rewriting (to see a drop on `contextjudge trend`)")
        elif name == "load":
            s.add_argument("-n", "--requests", type=int, default=300)
            s.add_argument("--conversations", type=int, default=60)
            s.add_argument("--seed", type=int, default=7)
        else:
            s.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
            s.add_argument("--every", type=float, default=2.0)
    args = p.parse_args(argv)
    return {"serve": serve, "load": load, "watch": watch}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

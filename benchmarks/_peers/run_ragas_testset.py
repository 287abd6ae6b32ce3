"""Run Ragas' TestsetGenerator on documents (executed inside Ragas' own venv), for benchmarks/goldens_cost.py.

Usage: python run_ragas_testset.py DOCS.json OUT.json --base-url URL --size N. DOCS.json is a list of
{"id", "text"}. The generator is Ragas' own (``TestsetGenerator.from_langchain`` with ``ChatOpenAI`` and
``OpenAIEmbeddings`` pointed at URL), every setting at its default. First ``generate_with_langchain_docs``, the call
the issue names; when Ragas refuses the documents (its default transforms raise ValueError for documents of 100
tokens or less), its error is recorded and ``generate_with_chunks`` (Ragas' road for documents already chunked, each
document one chunk, its default transforms for pre-chunked input) runs instead. The generator runs inside one event
loop (see ``in_one_loop``). Writes a JSON summary: samples made, which call made them, the refusal, seconds.
"""

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

os.environ["RAGAS_DO_NOT_TRACK"] = "true"
os.environ.setdefault("OPENAI_API_KEY", "sk-fake")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs")
    ap.add_argument("out")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--model", default="gpt-4o-mini")
    args = ap.parse_args()

    from langchain_core.documents import Document
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from ragas.testset import TestsetGenerator

    rows = json.loads(Path(args.docs).read_text())
    docs = [Document(page_content=r["text"], metadata={"source": r["id"]}) for r in rows]
    llm = ChatOpenAI(model=args.model, base_url=args.base_url, api_key="sk-fake", max_retries=0)
    # check_embedding_ctx_length=False: send the texts as they are (else it tokenizes them with tiktoken first)
    emb = OpenAIEmbeddings(model="text-embedding-3-small", base_url=args.base_url, api_key="sk-fake",
                           check_embedding_ctx_length=False)
    gen = TestsetGenerator.from_langchain(llm, emb)
    t0 = time.perf_counter()
    refusal = None

    def work() -> tuple:
        nonlocal gen, refusal
        try:
            return gen.generate_with_langchain_docs(docs, testset_size=args.size), "generate_with_langchain_docs"
        except ValueError as exc:
            refusal = f"{type(exc).__name__}: {exc}"
        gen = TestsetGenerator.from_langchain(llm, emb)
        return gen.generate_with_chunks(docs, testset_size=args.size), "generate_with_chunks"

    async def in_one_loop() -> tuple:
        # Ragas runs each step under asyncio.run, a new event loop each; the OpenAI client keeps its pooled
        # connections from the first loop, so the next step fails with "Event loop is closed" (Ragas issues #1718,
        # #1381). Inside one running loop Ragas applies nest_asyncio itself and every step shares it: the
        # workaround of #1718.
        return work()

    testset, road = asyncio.run(in_one_loop())
    samples = testset.to_list()
    Path(args.out).write_text(json.dumps({
        "goldens": len(samples), "road": road, "refusal": refusal, "seconds": time.perf_counter() - t0,
        "with_reference": sum(1 for s in samples if s.get("reference")),
        "synthesizers": sorted({str(s.get("synthesizer_name")) for s in samples}),
        "nodes": len(gen.knowledge_graph.nodes), "relationships": len(gen.knowledge_graph.relationships)}))


if __name__ == "__main__":
    main()

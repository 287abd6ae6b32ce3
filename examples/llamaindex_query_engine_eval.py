"""Score the retrieval of a LlamaIndex query engine and a chat engine, offline, with one line of capture.

A VectorStoreIndex over the demo corpus (a fictional company's policies) with a small deterministic keyword
embedding and an offline extractive LLM, both shipped in ``contextjudge_llama_index.testing``: no network, no API
key, no model download. The judge is contextjudge's embedded offline judge (``model="local"``) when it is
installed; otherwise a scripted FakeJudge, clearly labelled as such (its scores show the plumbing, not quality).

    pip install -e . -e integrations/llama_index
    python examples/llamaindex_query_engine_eval.py

Part 1 turns on ``instrument()``: the app's own code (a plain query engine with a reranker) is unchanged, every
query becomes a test case with expected_output from the goldens, and the scores come back as
``ContextJudgeResultEvent``s that the app's own LlamaIndex event handler receives. Part 2 wraps a chat engine in
``EvaluatedChatEngine``: a three-turn conversation becomes one ConversationalTestCase, scored by the turn metrics,
with the standalone questions the condense step wrote for retrieval.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from importlib.resources import files
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.schema import TextNode

import contextjudge_llama_index as cj
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    TurnContextualPrecisionMetric,
    TurnContextualRecallMetric,
    TurnContextualRelevancyMetric,
)
from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding, KeywordReranker

CORPUS = files("contextjudge") / "data/demo_corpus"


def pick_judge() -> tuple[Any, str]:
    """The embedded offline judge when it is installed, else a scripted FakeJudge (plumbing only)."""
    if importlib.util.find_spec("contextjudge.local") is not None:
        return "local", "contextjudge's embedded offline judge (model='local')"
    from contextjudge.testing import FakeJudge

    return FakeJudge(), ("FakeJudge -- a SCRIPTED TEST DOUBLE (word overlap), because contextjudge.local is not "
                         "installed; the scores below demonstrate the plumbing, not retrieval quality")


def load(name: str) -> Any:
    return json.loads((CORPUS / name).read_text("utf-8"))


def build_index() -> VectorStoreIndex:
    docs = load("docs.json")["documents"]
    # One node per policy, with the policy's id as the node id, so retrieved ids read as policy ids.
    nodes = [TextNode(text=d["text"], id_=d["id"], metadata={"title": d["title"], "category": d["category"]})
             for d in docs]
    return VectorStoreIndex(nodes, embed_model=KeywordEmbedding())


class ResultCounter(BaseEventHandler):
    """Stands in for the app's own observability: counts the scores LlamaIndex delivers to it."""

    seen: list = []

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, cj.ContextJudgeResultEvent):
            self.seen.append(event)


def short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def part1_query_engine(index: VectorStoreIndex, judge: Any) -> None:
    goldens = load("goldens.json")["goldens"]
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
               ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]
    counter = ResultCounter(seen=[])
    get_dispatcher().add_event_handler(counter)

    scorer = cj.instrument(metrics=metrics, goldens=goldens)  # <- the one line; the app below is unchanged

    engine = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=4,
                                   node_postprocessors=[KeywordReranker(top_n=3)])
    for g in goldens:
        engine.query(g["input"])
    scorer.flush(600)
    cj.uninstrument()

    print(f"\nPart 1: {len(scorer.cases)} queries captured through instrument(); retrieval judged per query\n")
    keys = ["Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization"]
    print(f"{'question':<52} {'hit':>3} {'rerank':>6} " + " ".join(f"{k.split()[-1][:9]:>9}" for k in keys))
    relevant = {g["id"]: set(g["relevant_ids"]) for g in goldens}
    totals: dict[str, list[float]] = {k: [] for k in keys}
    for case in scorer.cases:
        tc = case.test_case
        ids = [n.id for n in tc.retrieval_context or []]
        hit = "yes" if relevant.get(case.golden_id, set()) & set(ids) else "no"
        moved = "yes" if (tc.additional_metadata or {}).get("reranked") else "-"
        by_name = {r.name: r for r in case.results}
        cells = []
        for k in keys:
            r = by_name.get(k)
            if r is not None and r.score is not None:
                totals[k].append(r.score)
            cells.append(f"{r.score:>9.2f}" if r is not None and r.score is not None else f"{'-':>9}")
        print(f"{short(tc.input, 52):<52} {hit:>3} {moved:>6} " + " ".join(cells))
    print(f"{'mean':<52} {'':>3} {'':>6} "
          + " ".join(f"{sum(v) / len(v):>9.2f}" if v else f"{'-':>9}" for v in totals.values()))
    print(f"\nThe app's own LlamaIndex event handler received {len(counter.seen)} ContextJudgeResultEvents "
          f"for {len(scorer.results)} metric results.")
    worst = min(scorer.results, key=lambda cr: cr[1].score if cr[1].score is not None else 2.0, default=None)
    if worst is not None:
        case, r = worst
        print(f"Lowest score: {r.name} {r.score:.2f} on {short(case.test_case.input, 60)!r}\n  reason: {r.reason}")
    get_dispatcher().event_handlers.remove(counter)


def part2_chat_engine(index: VectorStoreIndex, judge: Any) -> None:
    conversation = load("conversation.json")
    turn_goldens = [{"input": t["input"], "expected_output": t["expected_output"]} for t in conversation["turns"]]
    chat_engine = index.as_chat_engine(chat_mode="condense_plus_context", llm=ExtractiveLLM(), similarity_top_k=3,
                                       memory=ChatMemoryBuffer.from_defaults(token_limit=4000))
    chat = cj.EvaluatedChatEngine(chat_engine, goldens=turn_goldens,
                                  metrics=[TurnContextualRelevancyMetric(model=judge),
                                           TurnContextualPrecisionMetric(model=judge),
                                           TurnContextualRecallMetric(model=judge)])

    print(f"\nPart 2: a {len(conversation['turns'])}-turn chat through EvaluatedChatEngine (condense_plus_context)\n")
    for t in conversation["turns"]:
        response = chat.chat(t["input"])  # called exactly as the wrapped engine
        print(f"user:      {t['input']}\nassistant: {response}")
    chat.flush(600)

    conv = chat.conversation
    for user, assistant in zip(conv.turns[::2], conv.turns[1::2], strict=False):
        rewritten = (user.additional_metadata or {}).get("retrieval_query")
        ids = [n.id for n in assistant.retrieval_context or []]
        print(f"\n  {short(user.content, 60)!r}\n    retrieved with: {rewritten or '(the message itself)'}\n"
              f"    nodes: {ids}")
    [case] = chat.cases
    print()
    for r in case.results:
        score = "error: " + str(r.error) if r.score is None else f"{r.score:.2f}"
        print(f"  {r.name:<28} {score}   {short(r.reason or '', 90)}")
    chat.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    judge, label = pick_judge()
    print(f"Judge: {label}")
    index = build_index()
    part1_query_engine(index, judge)
    part2_chat_engine(index, judge)


if __name__ == "__main__":
    main()

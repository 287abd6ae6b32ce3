"""One finished root run's test cases, one per top-level retrieval (``retrievals``): question, answer, nodes and
where each came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contextjudge import LLMTestCase
from contextjudge.cases.identity import GOLDEN_ID_KEY
from contextjudge.cases.provenance import (
    AGENT_KEY,
    CHAIN_INPUT_KEY,
    OTEL_KEY,
    RETRIEVER_KEY,
    RETRIEVER_RANKING_KEY,
    short,
)
from contextjudge.otel import case_trace

from ._agents import _agent_context, _agent_step, _call_order
from ._nodes import doc_id, node_of
from ._seen import _after_steps, _consumer, _docs_of, _ranking
from ._texts import final_answer, llm_text, question_of, text_of_output
from ._tree import THREAD_KEYS, metadata_of, walk


@dataclass
class Retrieval:
    """One top-level retriever run inside a root, made ready to become a test case."""

    case: LLMTestCase
    name: str
    query: str
    question: str | None
    answer_source: str
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    agent: dict[str, Any] | None = None


def _answer_of(context: tuple[str, Any] | None, consumer: Any, root_answer: str | None,
               root_text: str | None) -> tuple[str | None, str]:
    """The answer a retrieval's case is scored against, and where it came from (``answer_source``)."""
    answer: str | None
    if context is not None and root_answer is not None:
        answer, answer_source = root_answer, "agent_final"
    elif consumer is not None:
        answer, answer_source = llm_text(consumer), f"llm:{consumer.name}"
    else:
        answer, answer_source = root_text, "root_output"
    if answer is None:
        answer_source = "none"
    return answer, answer_source


def _case_metadata(root: Any, run: Any, root_meta: dict[str, Any], *, query: str, question: str | None,
                   answer_source: str, diagnostics: list[dict[str, Any]], ranking: list[Any] | None) -> dict[str, Any]:
    """The additional_metadata of a retrieval's case: where it came from in the root run, and how it was read."""
    meta = {
        RETRIEVER_KEY: run.name,
        "retriever_query": query,
        CHAIN_INPUT_KEY: question,
        "root_run_id": str(root.id),
        "retriever_run_id": str(run.id),
        "answer_source": answer_source,
    }
    meta.update({k: v for k, v in metadata_of(run).items() if k.startswith("ls_") and isinstance(v, str)})
    if metadata_of(run).get("contextjudge_tool_output"):
        meta["tool_output_retrieval"] = True  # a tool's output captured as a retrieval (retrieval_tools=)
    call = metadata_of(run).get("contextjudge_vector_store_call")
    if call:
        meta["vector_store_call"] = call  # a vector store method called directly (_vectorstores)
    if diagnostics:
        meta["sub_retrievals"] = diagnostics
    if ranking is not None:
        meta[RETRIEVER_RANKING_KEY] = [node_of(d).model_dump() for d in ranking]
    if root.error:
        meta["root_error"] = root.error[:300]
    where = case_trace(root.otel, run.otel)
    if where is not None:
        meta[OTEL_KEY] = where
    for key in (GOLDEN_ID_KEY, *THREAD_KEYS):
        if key in root_meta:
            meta[key] = root_meta[key]
    return meta


def retrievals(root: Any, thread_id: str | None = None,
               runs: list[tuple[Any, tuple[Any, ...]]] | None = None) -> list[Retrieval]:
    """The test cases of one finished root run, one per top-level retriever run (``runs``: ``walk(root)``, when the
    caller has it already)."""
    runs = walk(root) if runs is None else runs
    llms = [(r, a) for r, a in runs if r.run_type in ("llm", "chat_model") and not r.error]
    question = question_of(root.inputs)
    root_text = None if root.error else text_of_output(root.outputs)
    root_answer = None if root.error else final_answer(root.outputs)
    root_meta = metadata_of(root)
    tools = [r for r, a in runs if r.run_type == "tool" and r is not root
             and not any(x.run_type == "tool" and x is not root for x in a)]
    call_of = _call_order(root, tools)
    node_names: list[str] = []  # the graph nodes' retrievals so far: their call numbers, and " #2"
    out: list[Retrieval] = []
    for run, ancestors in runs:
        if run.run_type != "retriever" or any(a.run_type == "retriever" for a in ancestors):
            continue
        retrieved = _docs_of(run)
        if retrieved is None:
            continue
        query = (run.inputs or {}).get("query")
        query = query if isinstance(query, str) else str(query or "")
        # what the LLM saw: a compressor or filter wrapping one inner retriever, then LCEL steps after it
        subs = [(r, a) for r, a in runs if r.run_type == "retriever" and run in a]
        inside = [r for r, a in subs if next(x for x in reversed(a) if x.run_type == "retriever") is run]
        docs = _after_steps(run, retrieved, runs)
        ranking = _ranking(retrieved, docs, inside)
        consumer = _consumer(run, docs, llms)
        context = _agent_context(run, ancestors, root)
        answer, answer_source = _answer_of(context, consumer, root_answer, root_text)
        diagnostics = [
            {"name": r.name, "query": (r.inputs or {}).get("query"),
             "ids": [doc_id(d) for d in ((r.outputs or {}).get("documents") or [])]}
            for r, _ in subs
        ]
        meta = _case_metadata(root, run, root_meta, query=query, question=question, answer_source=answer_source,
                              diagnostics=diagnostics, ranking=ranking)
        case_input = question or query
        if not case_input.strip():
            continue
        agent = None
        if context is not None:
            agent, label, nth = _agent_step(context, root, query, tools, call_of, node_names, thread_id)
            name = f"{label}{f' #{nth}' if nth > 1 else ''}: {short(case_input, 60)}"
            meta[AGENT_KEY] = agent
        else:
            name = short(case_input, 80)
        scored = run.outputs.get("scores")  # a vector store's *_with_score call: one score per document
        by_doc = ({id(d): sc for d, sc in zip(retrieved, scored, strict=False)} if isinstance(scored, list) else {})
        case = LLMTestCase(input=case_input, actual_output=answer,
                           retrieval_context=[node_of(d, by_doc.get(id(d))) for d in docs],
                           name=name, additional_metadata=meta)
        out.append(Retrieval(case=case, name=run.name, query=query, question=question,
                             answer_source=answer_source, diagnostics=diagnostics, agent=agent))
    return out

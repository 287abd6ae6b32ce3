"""Turning one finished LangChain run tree into test cases: which retrievals, which question, which answer.

The rules, applied when a root run ends:

- A *retrieval* is a retriever run with no retriever above it. Retrievers nested inside another retriever
  (the parts of an ensemble or of a multi-query retriever) are kept as diagnostics on the outer one's case, because
  the outer retriever's fused list is what the app used.
- The *question* is the chain input when it is recognisably the user's question (a string, a dict with a
  ``question``/``input``/``query`` string, or the last human message); otherwise the retriever's own query.
- The *answer* is the text of the first LLM or chat-model run that starts after the retrieval ended, is not part of
  it, and whose prompt contains one of the retrieved documents; failing that, the first such run at all; failing
  that, the root output when it is text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from contextjudge import LLMTestCase, RetrievedNode
from contextjudge.cases.identity import GOLDEN_ID_KEY
from ._images import node_from_image_metadata

THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
_QUESTION_KEYS = ("question", "input", "query", "user_input", "q", "prompt")
_OUTPUT_KEYS = ("answer", "output", "result", "response", "text", "content")
_SCORE_KEYS = ("score", "relevance_score", "similarity_score", "similarity", "_score", "distance")


class RunRecord:
    """What the handler keeps of one LangChain run: enough to assemble test cases, and cheap to make."""

    __slots__ = ("id", "parent_run_id", "root_id", "run_type", "name", "inputs", "tags", "metadata", "start",
                 "end", "outputs", "error", "child_runs")

    def __init__(self, id: Any, parent_run_id: Any, root_id: Any, run_type: str, name: str, inputs: Any,
                 tags: list[str] | None, metadata: dict[str, Any] | None, start: int) -> None:
        self.id = id
        self.parent_run_id = parent_run_id
        self.root_id = root_id
        self.run_type = run_type
        self.name = name
        self.inputs = inputs
        self.tags = tags
        self.metadata = metadata or {}
        self.start = start
        self.end: int | None = None
        self.outputs: Any = None
        self.error: str | None = None
        self.child_runs: list[RunRecord] = []

    def __repr__(self) -> str:
        return f"RunRecord({self.run_type}:{self.name} {self.id})"


@dataclass
class Retrieval:
    """One top-level retriever run inside a root, made ready to become a test case."""

    case: LLMTestCase
    name: str
    query: str
    question: str | None
    answer_source: str
    diagnostics: list[dict[str, Any]] = field(default_factory=list)


def walk(root: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """Every run of the tree with its ancestors, in start order (the tracer's dotted order)."""
    out: list[tuple[Any, tuple[Any, ...]]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        run, ancestors = stack.pop()
        out.append((run, ancestors))
        for child in getattr(run, "child_runs", None) or ():
            stack.append((child, ancestors + (run,)))
    out.sort(key=lambda pair: pair[0].start)
    return out


def metadata_of(run: Any) -> dict[str, Any]:
    return run.metadata or {}


def thread_id_of(runs: Iterable[Any]) -> str | None:
    for run in runs:
        meta = metadata_of(run)
        for key in THREAD_KEYS:
            value = meta.get(key)
            if isinstance(value, (str, int)) and str(value):
                return str(value)
    return None


def message_text(message: Any) -> str | None:
    content = getattr(message, "content", None)
    if content is None and isinstance(message, dict):
        content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, (str, dict))]
        return "".join(parts)
    return None


def question_of(inputs: Any) -> str | None:
    """The user's question in a chain input, when it is recognisable; None otherwise."""
    if isinstance(inputs, dict) and set(inputs) == {"input"}:
        inputs = inputs["input"]  # the tracer wraps non-dict inputs as {"input": x}
    if isinstance(inputs, str):
        return inputs if inputs.strip() else None
    if isinstance(inputs, dict):
        for key in _QUESTION_KEYS:
            value = inputs.get(key)
            if isinstance(value, str) and value.strip():
                return value
        messages = inputs.get("messages")
        if isinstance(messages, list):
            for m in reversed(messages):
                role = getattr(m, "type", None) or (m.get("role") if isinstance(m, dict) else None)
                if role in ("human", "user"):
                    return message_text(m)
    if isinstance(inputs, list) and inputs:
        for m in reversed(inputs):
            if getattr(m, "type", None) == "human":
                return message_text(m)
    return None


def text_of_output(outputs: Any) -> str | None:
    """The text of a chain output, when it is text (a string, a message, or a dict with an answer string)."""
    if isinstance(outputs, dict) and set(outputs) == {"output"}:
        outputs = outputs["output"]
    if isinstance(outputs, str):
        return outputs
    text = message_text(outputs) if hasattr(outputs, "content") else None
    if text is not None:
        return text
    if isinstance(outputs, dict):
        for key in _OUTPUT_KEYS:
            value = outputs.get(key)
            if isinstance(value, str):
                return value
            if hasattr(value, "content"):
                return message_text(value)
        messages = outputs.get("messages")
        if isinstance(messages, list) and messages:
            return message_text(messages[-1])
    return None


def llm_text(run: Any) -> str | None:
    outputs = run.outputs or {}
    gens = outputs.get("generations") or []
    for batch in gens:
        for g in batch or ():
            text = g.get("text") if isinstance(g, dict) else getattr(g, "text", None)
            if text:
                return text
    return None


def _prompt_text(run: Any) -> str:
    inputs = run.inputs or {}
    prompts = inputs.get("prompts")
    if hasattr(prompts, "render"):
        prompts = prompts.render()
    if isinstance(prompts, list):
        return "\n".join(p for p in prompts if isinstance(p, str))
    return str(inputs.get("messages", ""))


def node_of(doc: Any) -> RetrievedNode:
    meta = dict(getattr(doc, "metadata", None) or {})
    text = getattr(doc, "page_content", None)
    if text is None:
        text = str(doc)
    doc_id = getattr(doc, "id", None) or meta.get("id") or meta.get("doc_id")
    if doc_id is None:
        doc_id = "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
    score = None
    for key in _SCORE_KEYS:
        value = meta.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            score = float(value)
            break
    # a document whose metadata points to an image (image_url, image_path, ...) becomes an image node
    return node_from_image_metadata(text, _jsonable(meta), id=str(doc_id), score=score)


def _jsonable(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in meta.items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v)
    return out


def _snippets(docs: list[Any]) -> list[str]:
    """The start of each document's text, to look for in prompts (documents are usually pasted in verbatim)."""
    out = []
    for d in docs:
        text = (getattr(d, "page_content", None) or "").strip()
        if len(text) >= 12:
            out.append(text[:60])
    return out


def _consumer(retriever: Any, docs: list[Any], llms: list[tuple[Any, tuple[Any, ...]]]) -> Any:
    after = [run for run, ancestors in llms
             if retriever not in ancestors and retriever.end is not None and run.start > retriever.end]
    if not after:
        return None
    snippets = _snippets(docs)
    if snippets:
        for run in after:
            prompt = _prompt_text(run)
            if any(s in prompt for s in snippets):
                return run
    return after[0]


def retrievals(root: Any) -> list[Retrieval]:
    """The test cases of one finished root run, one per top-level retriever run."""
    runs = walk(root)
    llms = [(r, a) for r, a in runs if r.run_type in ("llm", "chat_model") and not r.error]
    question = question_of(root.inputs)
    root_text = None if root.error else text_of_output(root.outputs)
    root_meta = metadata_of(root)
    out: list[Retrieval] = []
    for run, ancestors in runs:
        if run.run_type != "retriever" or any(a.run_type == "retriever" for a in ancestors):
            continue
        if run.error or not isinstance(run.outputs, dict) or "documents" not in run.outputs:
            continue
        docs = list(run.outputs["documents"] or [])
        query = (run.inputs or {}).get("query")
        query = query if isinstance(query, str) else str(query or "")
        consumer = _consumer(run, docs, llms)
        if consumer is not None:
            answer, answer_source = llm_text(consumer), f"llm:{consumer.name}"
        else:
            answer, answer_source = root_text, "root_output"
        if answer is None:
            answer_source = "none"
        diagnostics = [
            {"name": r.name, "query": (r.inputs or {}).get("query"),
             "ids": [node_of(d).id for d in ((r.outputs or {}).get("documents") or [])]}
            for r, a in runs if r.run_type == "retriever" and run in a
        ]
        meta = {
            "retriever": run.name,
            "retriever_query": query,
            "chain_input": question,
            "root_run_id": str(root.id),
            "retriever_run_id": str(run.id),
            "answer_source": answer_source,
        }
        meta.update({k: v for k, v in metadata_of(run).items() if k.startswith("ls_") and isinstance(v, str)})
        if diagnostics:
            meta["sub_retrievals"] = diagnostics
        if root.error:
            meta["root_error"] = root.error[:300]
        for key in (GOLDEN_ID_KEY, *THREAD_KEYS):
            if key in root_meta:
                meta[key] = root_meta[key]
        case_input = question or query
        if not case_input.strip():
            continue
        case = LLMTestCase(input=case_input, actual_output=answer, retrieval_context=[node_of(d) for d in docs],
                           name=run.name, additional_metadata=meta)
        out.append(Retrieval(case=case, name=run.name, query=query, question=question,
                             answer_source=answer_source, diagnostics=diagnostics))
    return out

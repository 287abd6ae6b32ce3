"""What the LLM saw of a retrieval: the documents after the steps that changed the retriever's list, the
retriever's own ranking when they differ, and the LLM run that used them."""

from __future__ import annotations

from typing import Any

from contextjudge.capture import prompt_snippets, reader_of

from ._nodes import doc_id
from ._texts import _prompt_text


def _consumer(retriever: Any, docs: list[Any], llms: list[tuple[Any, tuple[Any, ...]]]) -> Any:
    after = [run for run, ancestors in llms
             if retriever not in ancestors and retriever.end is not None and run.start > retriever.end]
    # documents are pasted into prompts verbatim: the first call whose prompt holds the start of one read them
    return reader_of(after, prompt_snippets(getattr(d, "page_content", None) or "" for d in docs), _prompt_text)


def _docs_of(run: Any) -> list[Any] | None:
    if run.error or not isinstance(run.outputs, dict) or "documents" not in run.outputs:
        return None
    return list(run.outputs["documents"] or [])


def _unwrap(value: Any, key: str) -> Any:
    return value[key] if isinstance(value, dict) and set(value) == {key} else value


def _same_docs(a: Any, b: list[Any]) -> bool:
    return isinstance(a, list) and len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _is_docs(value: Any) -> bool:
    return isinstance(value, list) and all(hasattr(d, "page_content") for d in value)


def _after_steps(retriever: Any, docs: list[Any], runs: list[tuple[Any, tuple[Any, ...]]]) -> list[Any]:
    """The documents after the chain steps that took the retriever's list and returned documents (a filter, a
    compressor in LCEL: ``retriever | keep_relevant``), in order; ``docs`` when there is no such step."""
    if not docs or retriever.end is None:
        return docs
    used: set[int] = set()
    start = retriever.end
    for _ in range(8):  # a few steps at most; each must start after the one before
        step = next((r for r, ancestors in runs
                     if r.start > start and r.id.int not in used and not r.error and retriever not in ancestors
                     and r.run_type not in ("retriever", "llm", "chat_model", "tool")
                     and _same_docs(_unwrap(r.inputs, "input"), docs) and _is_docs(_unwrap(r.outputs, "output"))),
                    None)
        if step is None:
            break
        used.add(step.id.int)
        start = step.start
        docs = list(_unwrap(step.outputs, "output"))
        if not docs:
            break
    return docs


def _ids(docs: list[Any]) -> list[str]:
    return [doc_id(d) for d in docs]


def _ranking(retrieved: list[Any], docs: list[Any], inside: list[Any]) -> list[Any] | None:
    """The documents in the order the retriever ranked them, when the LLM saw another list (a compressor or filter
    over one inner retriever, or LCEL steps after it); None when it saw the retriever's own list."""
    retrieved_ids = _ids(retrieved)
    ranking = None
    if len(inside) == 1:
        inner = _docs_of(inside[0])
        if inner is not None and _ids(inner) != retrieved_ids:
            ranking = inner
    if ranking is None and docs is not retrieved and _ids(docs) != retrieved_ids:
        ranking = retrieved
    return ranking

"""Which LLM call read a retrieval: the rule both the LangChain handler (over its run tree) and the trace reader
(over an app's spans, ``traces``) use to find a case's answer, in one place.

Documents are usually pasted into the prompt verbatim, so the first LLM call after the retrieval whose prompt holds
the start of one of them read it; with none, the first LLM call after the retrieval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

__all__ = ["prompt_snippets", "reader_of"]

T = TypeVar("T")


def prompt_snippets(texts: Iterable[str]) -> list[str]:
    """The start (60 characters) of each retrieved text of 12 characters or more, stripped: what a prompt that
    pasted the documents in holds."""
    out = []
    for text in texts:
        text = (text or "").strip()
        if len(text) >= 12:
            out.append(text[:60])
    return out


def reader_of(after: Sequence[T], snippets: Sequence[str], prompt_of: Callable[[T], str]) -> T | None:
    """Of the LLM calls that ran after a retrieval (``after``, in start order), the first whose prompt
    (``prompt_of``) holds one of the retrieval's ``snippets``, else the first; None when no call ran after it."""
    if not after:
        return None
    if snippets:
        for call in after:
            prompt = prompt_of(call)
            if any(s in prompt for s in snippets):
                return call
    return after[0]

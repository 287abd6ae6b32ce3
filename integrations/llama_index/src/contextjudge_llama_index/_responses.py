"""What a call returned: its answer's text, and streamed answers wrapped so the capture learns when they end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

__all__ = ["response_text", "wrap_agen", "wrap_gen"]

def response_text(result: Any) -> str | None:
    if result is None:
        return None
    resp = getattr(result, "response", None)
    if isinstance(resp, str):
        return resp
    if resp is not None:
        dump = getattr(resp, "model_dump_json", None)
        return dump() if callable(dump) else str(resp)
    if isinstance(result, str):
        return result
    return None


def wrap_gen(gen: Iterator[str], on_done: Callable[[str, bool], None]) -> Iterator[str]:
    """Yield what ``gen`` yields; when it ends (or is closed), report the text it produced."""
    parts: list[str] = []
    completed = False
    try:
        for token in gen:
            parts.append(token)
            yield token
        completed = True
    finally:
        on_done("".join(parts), completed)


async def wrap_agen(agen: AsyncIterator[str], on_done: Callable[[str, bool], None]) -> AsyncIterator[str]:
    """Yield what ``agen`` yields; when it ends (or is closed), report the text it produced."""
    parts: list[str] = []
    completed = False
    try:
        async for token in agen:
            parts.append(token)
            yield token
        completed = True
    finally:
        on_done("".join(parts), completed)

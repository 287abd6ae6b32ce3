"""Asking the question writer for one chunk's questions (``_ask_chunk``) and reading its answer (``_read_questions``):
an unreadable answer asked once more, a refusal dropped with the reason."""

from __future__ import annotations

import re
from typing import Any

from ...errors import BudgetExhaustedError, JudgeError
from ._chunks import Chunk
from ._prompts import STYLES, UNANSWERED, _prompt

_REFUSAL = re.compile(r"\b(i can(?:no|')t|i am unable|i'm unable|i won't|cannot help|as an ai)\b", re.I)


def _read_questions(text: str, styles: list[str]) -> tuple[list[dict[str, Any]] | None, str]:
    """The question items of a generator's answer, or (None, why) when it holds none readable."""
    from ...judges import extract_json_candidates  # noqa: PLC0415

    for cand in extract_json_candidates(text or ""):
        items = cand.get("questions") if isinstance(cand, dict) else cand if isinstance(cand, list) else None
        if isinstance(items, list):
            good = [q for q in items if isinstance(q, dict) and isinstance(q.get("question"), str)
                    and q["question"].strip() and isinstance(q.get("answer"), str)]
            if good:
                return good, ""
            if not items:
                return None, "refused"
    if not (text or "").strip() or _REFUSAL.search(text or ""):
        return None, "refused"  # an empty answer is a refusal (OpenAI's own refusals come with no content)
    return None, "unreadable"


async def _ask_chunk(client: Any, chunk: Chunk, styles: list[str], second: Chunk | None, dropped: list[dict],
                     stop: list[str]) -> list[dict[str, Any]]:
    if stop:
        dropped.append({"reason": "budget", "chunk_id": chunk.id, "styles": styles})
        return []
    prompt = _prompt(chunk, styles, second)
    why = ""
    for _attempt in range(2):  # an unreadable answer is asked once more
        try:
            text, _usage = await client.complete_text(prompt)
        except BudgetExhaustedError as exc:
            stop.append(str(exc))
            dropped.append({"reason": "budget", "chunk_id": chunk.id, "styles": styles})
            return []
        except JudgeError as exc:
            dropped.append({"reason": "model error", "chunk_id": chunk.id, "error": str(exc)[:300]})
            return []
        items, why = _read_questions(text, styles)
        if items is not None:
            break
        if why == "refused":
            break
    else:
        items = None
    if items is None:
        dropped.append({"reason": why, "chunk_id": chunk.id})
        return []
    out = []
    for k, q in enumerate(items):
        style = q.get("style") if q.get("style") in STYLES else styles[k] if k < len(styles) else styles[-1]
        answer = " ".join(str(q["answer"]).split())
        question = " ".join(q["question"].split())
        unanswerable = style == "unanswerable" or answer.strip().upper().rstrip(".") == UNANSWERED
        if not re.search(r"[^\W\d_]{2,}", question) or not re.search(r"[^\W\d_]{2,}", answer):
            dropped.append({"reason": "unreadable", "chunk_id": chunk.id, "question": question})  # "..." echoed
            continue
        if _REFUSAL.search(question) or (not unanswerable and _REFUSAL.search(answer)):
            dropped.append({"reason": "refused", "chunk_id": chunk.id, "question": question})
            continue
        ids = [chunk.id] + ([second.id] if style == "two_chunks" and second is not None else [])
        out.append({"question": question, "answer": answer, "style": "unanswerable" if unanswerable else style,
                    "chunks": [chunk] + ([second] if style == "two_chunks" and second is not None else []),
                    "ids": ids})
    return out

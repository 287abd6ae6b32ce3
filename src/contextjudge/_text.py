"""Deterministic sentence splitting: the statements of recall and relevancy are ours, not the judge's.

The split is rule-based so the denominator of a score never depends on how a judge feels about punctuation:
sentence ends are ``.``, ``!``, ``?`` (and their CJK forms) followed by white space and a capital letter, digit or
quote, and line breaks; common abbreviations, initials and decimal numbers do not end a sentence.
"""

from __future__ import annotations

import functools
import re

__all__ = ["shorten", "shown", "split_sentences"]

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "inc", "ltd", "co", "corp",
    "no", "fig", "approx", "dept", "est", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
    "nov", "dec", "u.s", "u.k", "mt", "ft", "gen", "col", "lt", "sgt", "rev", "vol", "pp", "al",
}

# A candidate boundary: terminal punctuation (plus closing quotes/brackets), white space, then a likely start.
_BOUNDARY = re.compile(r"([.!?…]+[\"'”’)\]]*)(\s+)(?=[\"'“‘(\[]?[A-Z0-9À-ÖØ-Þ])")
_CJK_BOUNDARY = re.compile(r"([。！？])")
_MIN_CHARS = 2


def _is_abbreviation(text_before: str) -> bool:
    m = re.search(r"(\S+)$", text_before)
    if not m:
        return False
    word = m.group(1).rstrip(".").lower().lstrip("(\"'“")
    if word in _ABBREVIATIONS:
        return True
    # a single initial such as "J." in "J. R. R. Tolkien"
    return len(word) == 1 and word.isalpha()


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, deterministically. Empty or whitespace-only text gives ``[]``.

    The last 4096 splits are kept: a node's sentences serve every metric and turn window that judges it, and the
    gold scores, so each text is split once however many ask."""
    if not text or not text.strip():
        return []
    return list(_split(text))


@functools.lru_cache(maxsize=4096)
def _split(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=\s*[-*•\d]+[.)]?\s)|\r?\n", text):
        block = block.strip()
        if not block:
            continue
        pieces: list[str] = []
        start = 0
        for m in _BOUNDARY.finditer(block):
            end = m.end(1)
            if m.group(1).startswith(".") and len(m.group(1)) == 1 and _is_abbreviation(block[start:m.start(1)]):
                continue
            pieces.append(block[start:end])
            start = m.end(2)
        pieces.append(block[start:])
        for piece in pieces:
            for sub in _CJK_BOUNDARY.split(piece):
                if sub in ("。", "！", "？") and out:
                    out[-1] += sub
                elif sub.strip():
                    out.append(sub.strip())
    merged: list[str] = []
    for s in out:
        if merged and len(s) < _MIN_CHARS:
            merged[-1] = f"{merged[-1]} {s}"
        else:
            merged.append(s)
    return tuple(merged)


def shorten(text: str | None, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut only between words (never inside a word or a number
    such as 0.81) and ended with an ellipsis when cut. ``textwrap.shorten`` would do the same but ends with
    " [...]" and drops a first word longer than the limit altogether; a reason quoting a node keeps its first word."""
    flat = " ".join((text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space > 0:
        cut = cut[:space]
    return cut.rstrip(" ,;:-(") + "…"


# Characters a terminal obeys rather than shows: C0 and C1 controls and DEL (escape sequences, carriage return,
# backspace, bell), the bidirectional overrides and isolates (text that reads in another order than it is stored),
# and the line and paragraph separators.
_OBEYED = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")


def shown(text: object, keep: str = "") -> str:
    """``text`` with every character a terminal would obey (``_OBEYED``) written out as ``\\u001b`` instead, so
    captured end-user text is shown, not obeyed (an erase-line, a cursor move or a window title stays inert). The
    characters in ``keep`` (``"\\n\\t"`` for whole messages) pass as they are. The form is a valid JSON string
    escape, so JSON printed through it still parses to the same value."""
    value = str(text)
    return _OBEYED.sub(lambda m: m.group() if m.group() in keep else f"\\u{ord(m.group()):04x}", value)

"""Deterministic sentence splitting: the statements of recall and relevancy are ours, not the judge's.

The split is rule-based so the denominator of a score never depends on how a judge feels about punctuation:
sentence ends are ``.``, ``!``, ``?`` (and their CJK forms) followed by white space and a capital letter, digit or
quote, and line breaks; common abbreviations, initials and decimal numbers do not end a sentence.

``split_statements`` goes one step further for the statements of an expected output (recall): a sentence that joins
two clauses ("A, and B"; "A; B"; "A, but B") is two statements, so a half-supported reference scores 1 of 2, not 0
of 1. Only where both sides are clauses of their own (at least ``_CLAUSE_WORDS`` words each): a list ("pears, apples,
and plums") stays one statement.
"""

from __future__ import annotations

import functools
import re

__all__ = ["escape_unstorable", "escape_unstorable_in", "shorten", "shown", "split_sentences", "split_statements"]

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


# A clause boundary inside a sentence: a comma and a coordinating conjunction, or a semicolon.
_CLAUSE = re.compile(r"\s*(?:,\s+(?:and|but|while|whereas|so|yet)\s+|;\s+(?:and\s+|but\s+)?)", re.I)
_CLAUSE_WORDS = 4


def split_statements(text: str) -> list[str]:
    """The statements of ``text``: its sentences (``split_sentences``), each split again at clause boundaries where
    both sides have at least four words ("Staff get 25 days of leave, and 5 days carry over." is two statements:
    "Staff get 25 days of leave." and "5 days carry over."). Deterministic, like the sentence split."""
    out: list[str] = []
    for sentence in split_sentences(text):
        out.extend(_clauses(sentence))
    return out


@functools.lru_cache(maxsize=4096)
def _clauses(sentence: str) -> tuple[str, ...]:
    pieces: list[str] = []
    start = 0
    for m in _CLAUSE.finditer(sentence):
        left, right = sentence[start:m.start()], sentence[m.end():]
        if len(left.split()) < _CLAUSE_WORDS or len(_CLAUSE.split(right)[0].split()) < _CLAUSE_WORDS:
            continue
        pieces.append(left)
        start = m.end()
    if not pieces:
        return (sentence,)
    pieces.append(sentence[start:])
    end = re.search(r"[.!?…]+[\"'”’)\]]*$", sentence)
    stop = end.group(0) if end else ""
    out = []
    for i, piece in enumerate(pieces):
        piece = piece.strip()
        if i < len(pieces) - 1 and stop:
            piece = piece.rstrip(",;") + stop[0]
        out.append(piece[:1].upper() + piece[1:] if i else piece)
    return tuple(out)


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


# Characters no store takes as text: lone surrogates (UTF-8 cannot encode them; any end user can send one as the JSON
# escape "\udce9", and bytes decoded with ``surrogateescape`` hold them) and NUL (PostgreSQL refuses it in text).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def escape_unstorable(text: str) -> str:
    """``text`` with each character no store takes (``_UNSTORABLE``: a lone surrogate, NUL) written as its escape
    (``\\udce9``, ``\\u0000``: the JSON string escape, as ``shown`` writes), so the text is kept, readable and
    storable everywhere (UTF-8, SQLite, PostgreSQL, HTTP bodies). Text without one is returned as it is."""
    if text.isascii() and "\x00" not in text:
        return text
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def escape_unstorable_in(value: object, path: str = "", found: list[str] | None = None) -> tuple[object, list[str]]:
    """``value`` (JSON-like data: str, list, tuple, dict, anything else left as is) with ``escape_unstorable``
    applied to every string and mapping key, and the paths where one changed (``input``, ``turns[2].content``,
    ``additional_metadata.note``). Containers are copied only where something changed."""
    found = [] if found is None else found
    if isinstance(value, str):
        out = escape_unstorable(value)
        if out is not value:
            found.append(path or "text")
        return out, found
    if isinstance(value, (list, tuple)):
        items = [escape_unstorable_in(v, f"{path}[{i}]", found)[0] for i, v in enumerate(value)]
        changed = any(a is not b for a, b in zip(items, value, strict=True))
        return (type(value)(items) if isinstance(value, tuple) else items) if changed else value, found
    if isinstance(value, dict):
        pairs = []
        changed = False
        for k, v in value.items():
            nk = escape_unstorable(k) if isinstance(k, str) else k
            sub = f"{path}.{nk}" if path else str(nk)
            nv = escape_unstorable_in(v, sub, found)[0]
            if nk is not k:
                found.append(sub)
            changed = changed or nk is not k or nv is not v
            pairs.append((nk, nv))
        return (dict(pairs) if changed else value), found
    return value, found

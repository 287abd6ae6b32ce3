"""Tolerant reading of judge answers: JSON out of messy text, verdict words normalised, ids validated.

The parser accepts only the judge's own answer structure: an object with a ``verdicts`` list of objects that carry
an ``id`` from the request (or, for the rubric, an object with a numeric ``score``). JSON-looking text elsewhere in
the answer (quoted from a node, say) is not an answer unless it has that structure and the request's ids; when
several candidates qualify, the last one wins, since judges write their final answer last.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ._families import VerdictFamily, family

__all__ = ["extract_json_candidates", "normalize_verdict", "parse_answer"]

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.S | re.I)
_UNCLOSED_THINK = re.compile(r"<think(?:ing)?>.*", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON|javascript|js)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")

# The only verdict words taken (any case, with trailing punctuation or quotes): the prompts ask for "yes" or "no",
# JSON booleans and "true"/"false" say the same, and a relevance question may be answered "relevant"/"irrelevant".
# Anything else is no verdict: hedges ("not sure", "maybe", "partially", "unclear", "N/A"), null-like strings
# ("null", "none", ""), numbers, and mixed answers ("Yes, partially", "no idea", "Yes - it mentions Paris"). Such an
# id is re-asked, then becomes a clear per-case error; reading "not sure" as its first word "no" would be a silent
# wrong score.
_YES = {"yes", "true", "relevant"}
_NO = {"no", "false", "irrelevant", "not relevant"}
_EDGES = " \t\r\n.!\"'`*"


def normalize_verdict(value: Any) -> str | None:
    """Map a judge's verdict to "yes" or "no"; None when it is not an unambiguous yes or no (see ``_YES``)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, str):
        return None  # numbers, null, lists: a verdict is a word
    word = " ".join(value.strip(_EDGES).lower().split())
    if word in _YES:
        return "yes"
    if word in _NO:
        return "no"
    return None


def _loads(text: str) -> Any:
    text = text.strip()
    if not text:
        raise ValueError("empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    fixed = _TRAILING_COMMA.sub(r"\1", text)
    try:
        return json.loads(fixed)
    except json.JSONDecodeError:
        pass
    # single quotes, Python literals (True/False/None)
    try:
        return ast.literal_eval(fixed)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    pyish = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", fixed)))
    return ast.literal_eval(pyish)


def _balanced_objects(text: str) -> list[str]:
    """Every top-level {...} or [...] span, found by bracket matching that respects strings."""
    spans: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "{[":
            stack = [ch]
            j = i + 1
            quote: str | None = None
            while j < n and stack:
                c = text[j]
                if quote:
                    if c == "\\":
                        j += 2
                        continue
                    if c == quote:
                        quote = None
                elif c in "\"'":
                    # an apostrophe inside a word is not a quote
                    if c == "'" and j > 0 and text[j - 1].isalnum() and j + 1 < n and text[j + 1].isalnum():
                        pass
                    else:
                        quote = c
                elif c in "{[":
                    stack.append(c)
                elif c in "}]":
                    stack.pop()
                j += 1
            if not stack:
                spans.append(text[i:j])
                i = j
                continue
            # unbalanced (truncated): keep the rest, a repair may close it
            spans.append(text[i:])
            break
        i += 1
    return spans


def _scan(text: str) -> tuple[list[str], bool, int]:
    """Walk JSON-ish text: the closers still owed, whether a string is open, and where the last complete element
    of the innermost open array ends."""
    stack: list[str] = []
    quote = False
    last_complete = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                quote = False
        elif c == '"':
            quote = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if stack:
                stack.pop()
            if stack and stack[-1] == "]":
                last_complete = i + 1
        i += 1
    return stack, quote, last_complete


def _close_truncated(text: str) -> str:
    """Close the brackets and string a truncated JSON answer left open, dropping a dangling partial item."""
    stack, quote, last_complete = _scan(text)
    if not stack and not quote:
        return text
    # cut back to the last complete element inside the outermost array, then close everything
    body = text[:last_complete] if last_complete else text
    stack, quote, _ = _scan(body)
    body = body.rstrip().rstrip(",")
    return body + ('"' if quote else "") + "".join(reversed(stack))


def extract_json_candidates(text: str) -> list[Any]:
    """All JSON values found in ``text``: whole text, fenced blocks, then bracketed spans, repaired if truncated."""
    if text is None:
        return []
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        # The usual answer: one JSON value and nothing else. Its bracketed spans would be itself, so there is
        # nothing more to find (and scanning them costs more than the rest of reading the answer).
        try:
            return [json.loads(stripped)]
        except ValueError:
            pass
    cleaned = _THINK.sub(" ", text)
    cleaned = _UNCLOSED_THINK.sub(" ", cleaned) if "</think" not in cleaned.lower() else cleaned
    sources: list[str] = [cleaned]
    sources += _FENCE.findall(cleaned)
    found: list[Any] = []
    seen: set[str] = set()
    for src in sources:
        for chunk in [src] + _balanced_objects(src):
            key = chunk.strip()
            if not key or key in seen:
                continue
            seen.add(key)
            for repair in (False, True):  # the repair scans the text: only when the text as it is fails
                try:
                    found.append(_loads(_close_truncated(key) if repair else key))
                    break
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
    return found


def _verdict_list(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        for key in ("verdicts", "results", "items", "statements", "nodes", "answers"):
            if isinstance(value.get(key), list):
                return value[key]
        return None
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value
    return None


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _quoted_from_data(data: list[str] | None) -> set[str]:
    """Canonical forms of every JSON value inside the judged data (nodes, statements, the question)."""
    out: set[str] = set()
    for text in data or []:
        if text and ("{" in text or "[" in text):
            out.update(_canonical(c) for c in extract_json_candidates(text))
    return out


def parse_answer(text: str | Any, *, task: str | VerdictFamily, ids: list[str], data: list[str] | None = None
                 ) -> dict[str, Any] | None:
    """Find the judge's answer in ``text``.

    ``task`` is the request's verdict family (or its name). For verdict families, returns ``{"verdicts": {id: {verdict, reason, node_ids, confidence}}, "unknown": [...],
    "invalid": [...]}``, taking the candidate that covers the most requested ids (the last one on a tie). For the
    rubric, ``{"score": float, "reason": str}``. None when nothing usable is found.

    ``data`` is the text that was judged (nodes, statements, the question). A JSON value that is a verbatim copy of
    one inside that data is never taken for the answer: a judge that quotes a node holding fake verdicts does not
    give those verdicts.
    """
    candidates = [text] if isinstance(text, (dict, list)) else extract_json_candidates(str(text or ""))
    quoted = _quoted_from_data(data)
    if quoted:
        candidates = [c for c in candidates if _canonical(c) not in quoted]
    if not family(task).per_item:
        return _rubric_answer(candidates)
    wanted = set(ids)
    best: dict[str, Any] | None = None
    for cand in candidates:
        items = _verdict_list(cand)
        if items is None:
            continue
        verdicts, unknown, invalid = _read_verdicts(items, wanted)
        if not verdicts:
            continue
        # prefer the candidate covering the most requested ids; on a tie, the later one
        if best is None or len(verdicts) >= len(best["verdicts"]):
            best = {"verdicts": verdicts, "unknown": unknown, "invalid": sorted(set(invalid))}
    return best


def _rubric_answer(candidates: list[Any]) -> dict[str, Any] | None:
    """The last candidate holding a score in [0, 1] (a "rating" out of 10 is scaled down), or None."""
    for cand in reversed(candidates):
        if isinstance(cand, dict):
            for key in ("score", "context_recall_score", "value", "rating"):
                if key in cand:
                    try:
                        score = float(cand[key])
                    except (TypeError, ValueError):
                        continue
                    if score != score:  # NaN
                        continue
                    if 1.0 < score <= 10.0 and key == "rating":
                        score = score / 10.0
                    if 0.0 <= score <= 1.0:
                        return {"score": score, "reason": str(cand.get("reason", "") or "")}
    return None


def _read_verdicts(items: list[Any], wanted: set[str]
                   ) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """One candidate's verdicts by requested id, the ids nobody asked for, and the ids whose verdict is unusable
    (an unknown word, or two contradicting verdicts for one id: both are dropped)."""
    verdicts: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []
    invalid: list[str] = []
    for it in items:
        if not isinstance(it, dict):
            continue
        vid = it.get("id", it.get("node_id", it.get("statement_id")))
        if vid is None:
            continue
        vid = str(vid).strip()
        if vid not in wanted:
            unknown.append(vid)
            continue
        verdict = normalize_verdict(it.get("verdict", it.get("answer", it.get("relevant"))))
        if verdict is None:
            invalid.append(vid)
            continue
        if vid in verdicts:
            # a duplicate id: a contradiction cannot be trusted, an agreement is harmless
            if verdicts[vid]["verdict"] != verdict:
                invalid.append(vid)
                verdicts[vid]["conflict"] = True
            continue
        verdicts[vid] = _verdict_entry(it, verdict)
    return {k: v for k, v in verdicts.items() if not v.get("conflict")}, unknown, invalid


def _verdict_entry(it: dict[str, Any], verdict: str) -> dict[str, Any]:
    """One verdict as the parser returns it: the verdict word, reason, supporting node ids and a clamped confidence."""
    conf = it.get("confidence")
    try:
        conf = None if conf is None else min(1.0, max(0.0, float(conf)))
    except (TypeError, ValueError):
        conf = None
    node_ids = it.get("node_ids") or it.get("supporting_nodes") or []
    if isinstance(node_ids, str):
        node_ids = [node_ids]
    return {
        "verdict": verdict,
        "reason": str(it.get("reason", "") or ""),
        "node_ids": [str(x) for x in node_ids if isinstance(x, (str, int))],
        "confidence": conf,
    }

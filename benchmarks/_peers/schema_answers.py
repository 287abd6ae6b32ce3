"""Plausible JSON answers to another library's structured prompts, built from the schema the prompt asks for AND the
input it gives, for benchmarks/goldens_cost.py's loopback server (runs in the main venv, inside ``FaultServer``).

Ragas' prompts write their output schema (a JSON schema) and then ``input: {...}`` and ``Output:``; its pipeline
feeds one step's answer into the next (the personas named in one answer are the keys of a later mapping, the themes
extracted are the concepts to combine), so an answer of fixed strings (``FaultServer.generic_answer``) leaves it with
nothing to generate from. Here each field is filled from the input: a string with one of the input's sentences, a
list of strings with distinct phrases of the input's text, a mapping keyed by the input's names; numbers at the top of
the range asked for. The content is plausible, not a model's quality: the figures count calls and tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

_WORDS = re.compile(r"[A-Za-z][A-Za-z0-9\-']+")
_STOP_WORDS = ("the a an of to in on for and or with by at is are be this that from as it its their your you per up "
               "into than any each all can may must will not no more")
_STOP = frozenset(_STOP_WORDS.split())


def _input_of(prompt: str) -> Any:
    """The last ``input: {...}`` JSON object of a Ragas-style prompt, else None."""
    k = prompt.rfind("input: ")
    if k < 0:
        return None
    text = prompt[k + len("input: "):]
    end = text.rfind("Output:")
    try:
        return json.loads(text[:end] if end > 0 else text)
    except ValueError:
        return None


def _strings(obj: Any) -> list[str]:
    """Every string inside ``obj``, in order."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _sentences(texts: list[str]) -> list[str]:
    out = []
    for t in texts:
        out += [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(t.split())) if len(s.split()) >= 4]
    return out


def _phrases(texts: list[str], n: int) -> list[str]:
    """Up to ``n`` distinct two-word phrases of content words from ``texts``."""
    seen: list[str] = []
    for t in texts:
        words = [w for w in _WORDS.findall(t) if w.lower() not in _STOP and len(w) > 2]
        for a, b in zip(words, words[1:], strict=False):
            p = f"{a} {b}"
            if p.lower() not in (s.lower() for s in seen):
                seen.append(p)
            if len(seen) >= n:
                return seen
    return seen or ["general policy"]


class SchemaAnswerer:
    """``answer(prompt)``: a JSON answer for a prompt that embeds a JSON schema and an ``input:`` object, else None."""

    def __init__(self, embedded_schema: Any) -> None:
        self._schema_of = embedded_schema  # fault_server._embedded_schema
        self.answered = 0

    def answer(self, prompt: str) -> Any:
        schema = self._schema_of(prompt)
        data = _input_of(prompt)
        if schema is None or data is None:
            return None
        # the passage the prompt is about (its "context" or "text"), else every string of the input
        main = data.get("context") or data.get("text") if isinstance(data, dict) else None
        texts = [re.sub(r"<\d+-hop>", " ", t) for t in _strings(main)] or _strings(data)
        self.answered += 1
        return self._fill(schema, schema.get("$defs") or {}, data, texts, "", 0)

    def _fill(self, schema: dict[str, Any], defs: dict[str, Any], data: Any, texts: list[str], name: str,
              depth: int) -> Any:
        if depth > 8:
            return None
        if "$ref" in schema:
            return self._fill(defs.get(schema["$ref"].split("/")[-1], {}), defs, data, texts, name, depth + 1)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                opts = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
                return self._fill(opts[0], defs, data, texts, name, depth + 1)
        if "enum" in schema:
            return schema["enum"][0]
        typ = schema.get("type")
        if typ == "object" or "properties" in schema or "additionalProperties" in schema:
            props = schema.get("properties") or {}
            if props:
                return {k: self._fill(v, defs, data, texts, k, depth + 1) for k, v in props.items()}
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):  # a mapping: keyed by the names the input lists
                names = [d["name"] for d in _dicts(data) if isinstance(d.get("name"), str)] or _phrases(texts, 2)
                return {n: self._fill(extra, defs, data, texts, "themes", depth + 1) for n in names}
            return {}
        if typ == "array":
            items = schema.get("items") or {"type": "string"}
            n = max(int(schema.get("minItems", 0)), min(3, int(schema.get("maxItems", 3))))
            if items.get("type") == "array":  # combinations: one item of each of the input's lists
                lists = [x for x in _lists(data) if x and all(isinstance(s, str) for s in x)]
                if len(lists) >= 2:
                    return [[lists[0][k % len(lists[0])], lists[1][k % len(lists[1])]] for k in range(2)]
                return [_phrases(texts, 2)]
            if items.get("type", "string") == "string" and "properties" not in items and "$ref" not in items:
                themes = [s for x in _lists(data) for s in x if isinstance(s, str) and len(s.split()) <= 4]
                return (themes or _phrases(texts, n))[:n]
            return [self._fill(items, defs, data, texts, name, depth + 1) for _ in range(n)]
        if typ == "integer":
            return int(schema.get("maximum", 5))
        if typ == "number":
            return float(schema.get("maximum", 1.0))
        if typ == "boolean":
            return True
        sents = _sentences(texts)
        low = name.lower()
        if low in ("name",):
            return "Reader of " + _phrases(texts, 1)[0] + f" #{self.answered}"
        if low in ("query", "question"):
            term = data.get("term") if isinstance(data, dict) and isinstance(data.get("term"), str) else None
            return "What does the policy say about " + (term or _phrases(texts, 1)[0]).lower() + "?"
        return sents[(self.answered + depth) % len(sents)] if sents else (texts[0] if texts else "Not stated.")


def _dicts(obj: Any) -> list[dict[str, Any]]:
    if isinstance(obj, dict):
        return [obj] + [d for v in obj.values() for d in _dicts(v)]
    if isinstance(obj, list):
        return [d for v in obj for d in _dicts(v)]
    return []


def _lists(obj: Any) -> list[list[Any]]:
    if isinstance(obj, list):
        return [obj] + [x for v in obj for x in _lists(v)]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _lists(v)]
    return []

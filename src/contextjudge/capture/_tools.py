"""A retrieval tool's output read the same way in every integration: the items of a list (or of a JSON list in a
string, or of a search API's dict), and a search-result dict's text, id and metadata."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

LIST_KEYS = ("results", "documents", "items", "data")
"""The keys under which a search API's dict holds its list of results."""
ID_KEYS = ("id", "url", "link", "uri", "source", "doc_id")
"""A search result's id, first found first."""


def tool_output_items(raw: Any) -> list[Any]:
    """The ranked items of a tool's output: a list as it is; a string that holds JSON read first; a dict with a list
    under one of ``LIST_KEYS`` that list, another dict one item; anything else one item."""
    if isinstance(raw, str):
        stripped = raw.strip()
        if stripped[:1] in ("[", "{"):
            try:
                raw = json.loads(stripped)
            except ValueError:
                pass
    if isinstance(raw, dict):
        listed = next((raw[k] for k in LIST_KEYS if isinstance(raw.get(k), list)), None)
        raw = listed if listed is not None else [raw]
    return list(raw) if isinstance(raw, (list, tuple)) else [raw]


def search_result(item: dict[str, Any], text_keys: Sequence[str]) -> tuple[str, str | None, dict[str, Any]]:
    """A search-result dict as (text, id, metadata): the first non-empty string under ``text_keys`` (else the dict as
    JSON), the first id under ``ID_KEYS``, and every other field as metadata."""
    text = next((item[k] for k in text_keys if isinstance(item.get(k), str) and item[k]), None)
    nid = next((item[k] for k in ID_KEYS if isinstance(item.get(k), (str, int)) and item[k]), None)
    meta = {k: v for k, v in item.items() if v is not text}
    return (text if text is not None else json.dumps(item, default=str, ensure_ascii=False),
            None if nid is None else str(nid), meta)

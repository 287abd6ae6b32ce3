"""A LangChain ``Document`` as a ``RetrievedNode``: its id, its score and its metadata."""

from __future__ import annotations

import hashlib
from typing import Any

from contextjudge import RetrievedNode
from contextjudge.cases.images import may_point_to_image
from contextjudge.cases.provenance import SOURCE_DOC_KEY
from contextjudge.cases.testcase import jsonable

from .._images import node_from_image_metadata

_SCORE_KEYS = ("score", "relevance_score", "similarity_score", "similarity", "_score", "distance")


def doc_id(doc: Any) -> str:
    """A Document's id as a node's: ``Document.id``, else an ``id``/``doc_id`` in its metadata, else a hash of its
    text."""
    found = getattr(doc, "id", None)
    if not found:
        meta = getattr(doc, "metadata", None) or {}
        found = meta.get("id") or meta.get("doc_id")
    if found is None:
        text = getattr(doc, "page_content", None)
        text = str(doc) if text is None else text
        return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
    return str(found)


def node_of(doc: Any, score: Any = None) -> RetrievedNode:
    """A Document as a node: its id (``doc_id``), the score the vector store gave it (``score``, else a score in its
    metadata) and its metadata (with ``provenance.SOURCE_DOC_KEY`` when it names its source document)."""
    meta = dict(getattr(doc, "metadata", None) or {})
    text = getattr(doc, "page_content", None)
    if text is None:
        text = str(doc)
    nid = doc_id(doc)
    source = meta.get("source")  # the loader's source document (a URL, a path), beside the chunk's own id
    if isinstance(source, (str, int)) and str(source) and str(source) != nid:
        meta.setdefault(SOURCE_DOC_KEY, str(source))
    if not (isinstance(score, (int, float)) and not isinstance(score, bool)):
        score = None
        for key in _SCORE_KEYS:
            value = meta.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                score = value
                break
    score = None if score is None else float(score)
    if may_point_to_image(meta):
        # a document whose metadata points to an image (image_url, image_path, ...) becomes an image node
        return node_from_image_metadata(text, _jsonable(meta), id=nid, score=score)
    # the usual text document: every field is already of its type, so no validation is needed
    return RetrievedNode.model_construct(text=text, id=nid, score=score, metadata=jsonable(meta))


def _jsonable(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in meta.items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v)
    return out

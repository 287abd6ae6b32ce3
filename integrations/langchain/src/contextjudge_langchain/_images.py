"""Image documents as retrieved nodes: a LangChain ``Document`` whose metadata points to an image becomes an image
node (read by ``contextjudge.cases.images.image_from_metadata``)."""

from __future__ import annotations

from typing import Any

from contextjudge import RetrievedNode
from contextjudge.cases.images import image_from_metadata

__all__ = ["node_from_image_metadata"]


def node_from_image_metadata(text: str | None, metadata: dict[str, Any] | None = None, *, id: Any = None,
                             score: float | None = None):
    """A ``RetrievedNode`` for a retrieved document; an image node when its metadata points to an image.

    For capture integrations: call it for each LangChain ``Document`` (``doc.page_content, doc.metadata``). A
    document whose metadata has no image pointer becomes a plain text node, so it is safe to call for every one.
    """
    meta = dict(metadata or {})
    img = image_from_metadata(meta)
    if score is None and isinstance(meta.get("score"), (int, float)):
        score = float(meta["score"])
    return RetrievedNode(text or "", id=id, score=score, metadata=meta, images=[img] if img else None)

"""LlamaIndex image nodes as retrieved nodes: an ``ImageNode`` (or a node with an ``image_resource``) keeps its
image, read through ``contextjudge.cases.images.image_from_metadata``; duck-typed, so nothing of LlamaIndex is
imported here."""

from __future__ import annotations

from typing import Any

from contextjudge import RetrievedNode
from contextjudge.cases.images import ALT_TEXT_KEYS, image_from_metadata

__all__ = ["node_from_llama_image_node"]


def node_from_llama_image_node(node: Any, score: float | None = None):
    """A ``RetrievedNode`` for a LlamaIndex node, keeping its image when it is an ``ImageNode``.

    Duck-typed (no LlamaIndex import): reads ``image`` (base64), ``image_url``, ``image_path``, ``image_mimetype``
    or a newer node's ``image_resource``, with the node's text as the caption. A node without an image becomes a
    plain text node. Never raises on an unreadable image: it is logged and the text is kept.
    """
    text = ""
    try:
        text = node.get_content() if hasattr(node, "get_content") else str(getattr(node, "text", "") or "")
    except Exception:  # noqa: BLE001 - a node that cannot render its content keeps its raw text
        text = str(getattr(node, "text", "") or "")
    meta = dict(getattr(node, "metadata", None) or {})
    node_id = getattr(node, "node_id", None) or getattr(node, "id_", None)
    ptr: dict[str, Any] = {}
    res = getattr(node, "image_resource", None)
    if res is not None:
        ptr = {"image_base64": _resource_data(getattr(res, "data", None)), "image_url": getattr(res, "url", None),
               "image_path": getattr(res, "path", None), "image_mime_type": getattr(res, "mimetype", None)}
    else:
        ptr = {"image_base64": getattr(node, "image", None), "image_url": getattr(node, "image_url", None),
               "image_path": getattr(node, "image_path", None),
               "image_mime_type": getattr(node, "image_mimetype", None)}
    ptr = {k: (str(v) if k in ("image_url", "image_path") and v is not None else v) for k, v in ptr.items() if v}
    for k in ALT_TEXT_KEYS:
        if isinstance(meta.get(k), str):
            ptr.setdefault(k, meta[k])
    img = image_from_metadata(ptr)
    if img is not None and not img.alt and text.strip():
        img.alt = " ".join(text.split())[:300]
    return RetrievedNode(text, id=node_id, score=score, metadata=meta, images=[img] if img else None)


def _resource_data(data: Any) -> Any:
    if isinstance(data, (bytes, bytearray)):
        try:  # LlamaIndex keeps media data base64-encoded as bytes
            return bytes(data).decode("ascii")
        except UnicodeDecodeError:
            return bytes(data)
    return data

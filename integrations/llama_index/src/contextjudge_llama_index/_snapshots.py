"""Copies of what a call retrieved, made on the request path, and the ``RetrievedNode`` objects made from them later.

A ``Snapshot`` holds each node's text, id, score and metadata as they were when the retrieval (or rerank, or the
call) ended: later postprocessors and the app may change the nodes in place. Only cheap copies are made here; an
image node's image is read, and ``RetrievedNode`` objects built, when the test case is assembled (``to_nodes``).
"""

from __future__ import annotations

from typing import Any

from contextjudge import RetrievedNode
from contextjudge.capture import search_result, tool_output_items
from contextjudge.cases.provenance import SOURCE_DOC_KEY

from ._images import node_from_llama_image_node

__all__ = ["Snapshot", "as_text", "node_text", "query_text", "snapshot", "to_nodes", "tool_snapshot"]

_IMAGE_ATTRS = ("image", "image_url", "image_path", "image_resource")
_image_fields_by_class: dict[type, tuple[str, ...]] = {}


def _image_fields(cls: type) -> tuple[str, ...]:
    """The image attributes a node class declares (looked up once per class: reading a missing attribute of a
    pydantic model is slow, and this runs on the request path for every node)."""
    found = _image_fields_by_class.get(cls)
    if found is None:
        declared = getattr(cls, "model_fields", None) or {}
        found = _image_fields_by_class[cls] = tuple(a for a in _IMAGE_ATTRS if a in declared)
    return found


Snapshot = list[tuple[str, "str | None", "float | None", dict[str, Any], Any]]
"""(text, id, score, metadata, image node or None) per NodeWithScore, as it was when the snapshot was taken."""


def snapshot(nodes: Any) -> Snapshot:
    """Copy now what later postprocessors (or the app) may change in place: each node's text, id, score and metadata.

    Only cheap copies happen here, on the request path; turning them into ``RetrievedNode`` objects (and reading an
    image node's image, which may mean reading a file) waits until the test case is assembled (``to_nodes``).
    """
    out = []
    for n in nodes or ():
        inner = getattr(n, "node", n)
        text = node_text(inner)
        meta = getattr(inner, "metadata", None)
        meta = dict(meta) if meta else {}
        nid = getattr(inner, "node_id", None)
        try:  # the user's document the chunk came from (Document(id_=...)), beside the chunk's own id
            source = inner.ref_doc_id
        except Exception:  # noqa: BLE001 - a node type without relationships
            source = None
        if source is not None and source != nid:
            meta[SOURCE_DOC_KEY] = source
        image = None
        fields = _image_fields(type(inner))
        if fields and any(getattr(inner, a, None) for a in fields):
            image = _freeze_image_node(inner, meta)
        out.append((text, nid, getattr(n, "score", None), meta, image))
    return out


_ITEM_TEXT_KEYS = ("text", "content", "snippet", "body", "description", "result")


def tool_snapshot(raw: Any) -> Snapshot:
    """A tool's output as a snapshot of ranked items: nodes as nodes; a list (or a JSON list in a string) split
    into items, a search-result dict giving its text and its url/id; anything else one item."""
    out: Snapshot = []
    for item in tool_output_items(raw):
        if hasattr(item, "get_content") or hasattr(getattr(item, "node", None), "get_content"):
            out.extend(snapshot([item]))
        elif isinstance(item, dict):
            text, nid, meta = search_result(item, _ITEM_TEXT_KEYS)
            out.append((text, nid, None, meta, None))
        elif item is not None and str(item).strip():
            out.append((as_text(item) or "", None, None, {}, None))
    return out


def node_text(node: Any) -> str:
    try:
        return node.get_content()
    except Exception:  # noqa: BLE001 - an exotic node type; fall back to its text attribute
        return str(getattr(node, "text", ""))


def _freeze_image_node(node: Any, meta: dict[str, Any]) -> Any:
    """A shallow copy of an ImageNode (and of its image resource) that later changes to the node do not reach."""
    try:
        update: dict[str, Any] = {"metadata": meta}
        res = getattr(node, "image_resource", None)
        if res is not None and hasattr(res, "model_copy"):
            update["image_resource"] = res.model_copy()
        return node.model_copy(update=update)
    except Exception:  # noqa: BLE001 - not a pydantic node: read it when assembling, as it is then
        return node


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def to_nodes(snap: Snapshot) -> list[RetrievedNode]:
    """RetrievedNodes (rank = list order) from a snapshot of NodeWithScores.

    Built with ``model_construct``: every field is already of its declared type here, and validation would only
    cost time. An image node's image is read here (into the metadata the judge client turns into image blocks).
    """
    out = []
    for text, nid, score, meta, image in snap:
        if image is not None:
            meta = node_from_llama_image_node(image).metadata
        out.append(RetrievedNode.model_construct(text=str(text), id=None if nid is None else str(nid),
                                                 score=None if score is None else float(score),
                                                 metadata={str(k): _jsonable(v) for k, v in meta.items()}))
    return out


def query_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return getattr(value, "query_str", None) or str(value)



def as_text(value: Any) -> str | None:
    """The text of a user message, a chat message, an agent output or a response."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    for attr in ("response", "content", "text", "message", "result"):
        inner = getattr(value, attr, None)
        if inner is not None and inner is not value:
            return as_text(inner)
    return str(value)

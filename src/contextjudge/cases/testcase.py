"""Test cases: what one evaluation judges.

``LLMTestCase`` is one question with its ranked retrieval; ``ConversationalTestCase`` is a conversation whose
assistant turns may each carry their own retrieval. ``RetrievedNode`` is one ranked item of a retrieval; plain
strings are accepted wherever a node is and become nodes. Ranks are the list order.

Images (``contextjudge.multimodal.MLLMImage``) may appear inside any text field as f-string tokens, as the items of
a list given for a text field (DeepEval's multimodal list form), as separate ``retrieval_context`` items, or as a
``RetrievedNode(text, images=[...])``.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticSerializationError

from .._text import escape_unstorable_in
from ..errors import InvalidTestCaseError
from .images import IMAGE_ALTS_KEY, IMAGES_KEY, MLLMImage, find_images, join_images, to_image

__all__ = ["ConversationalTestCase", "LLMTestCase", "RetrievedNode", "Turn", "dump_json", "escape_unstorable_fields",
           "jsonable"]


_MAX_DEPTH = 32


def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` as plain JSON data, for the free-form fields of test cases and nodes (metadata).

    numpy scalars and arrays become numbers and lists, tuples and sets become lists (sets sorted), bytes become text
    (UTF-8, undecodable bytes replaced), dates and times ISO 8601 strings, enums their value, mapping keys strings;
    anything else becomes its ``str()``. So one odd value in a retriever's metadata never aborts a run, a store
    write or an export.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _depth > _MAX_DEPTH:
        return str(value)
    d = _depth + 1
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(jsonable(k, d)): jsonable(v, d) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, d) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, d) for v in value]
        return sorted(items, key=lambda x: (type(x).__name__, json.dumps(x, sort_keys=True, default=str)))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return jsonable(value.value, d)
    if isinstance(value, BaseModel):
        try:
            return jsonable(value.model_dump(mode="python"), d)
        except Exception:  # noqa: BLE001 - a model that cannot dump itself is shown as text
            return str(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:  # a numpy (or similar) scalar
        try:
            return jsonable(item(), d)
        except Exception:  # noqa: BLE001
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # a numpy array, a pandas series
        try:
            return jsonable(tolist(), d)
        except Exception:  # noqa: BLE001
            pass
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - even str() can fail
        return f"<{type(value).__name__}>"


def dump_json(model: BaseModel, **kwargs: Any) -> Any:
    """``model.model_dump(mode="json")``, even when a value was put into a metadata dict after construction
    (``node.metadata["x"] = np.float32(1)``), which the conversion at construction cannot see."""
    try:
        return model.model_dump(mode="json", **kwargs)
    except PydanticSerializationError:
        return jsonable(model.model_dump(mode="python", **kwargs))


def escape_unstorable_fields(model: BaseModel, path: str = "") -> list[str]:
    """Escape, in place, every character no store takes (a lone surrogate such as an end user's JSON "\\udce9",
    NUL; see ``_text.escape_unstorable``) in the text of a test case, a turn or a node and in their metadata; returns
    the fields changed (``input``, ``retrieval_context[1].text``, ``turns[0].content``), empty when none was."""
    found: list[str] = []
    for name in type(model).model_fields:
        value = getattr(model, name, None)
        where = f"{path}.{name}" if path else name
        if isinstance(value, BaseModel):
            found += escape_unstorable_fields(value, where)
        elif isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
            for i, v in enumerate(value):
                if isinstance(v, BaseModel):
                    found += escape_unstorable_fields(v, f"{where}[{i}]")
                elif isinstance(v, str):
                    new, got = escape_unstorable_in(v, f"{where}[{i}]")
                    if got:
                        value[i] = new
                        found += got
        elif isinstance(value, (str, list, tuple, dict)):
            new, got = escape_unstorable_in(value, where)
            if got:
                setattr(model, name, new)
                found += got
    return found


def _metadata(v: Any) -> Any:
    return v if v is None or not isinstance(v, dict) else jsonable(v)


class RetrievedNode(BaseModel):
    """One retrieved item: its text, and optionally the id, score and metadata the retriever gave it.

    ``metadata`` may hold any values: they are converted to plain JSON data when the node is made (see
    ``jsonable``), so numpy numbers, bytes, sets and arbitrary objects never break a run, the store or an export.
    """

    model_config = ConfigDict(extra="forbid")

    text: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, text: str | None = None, /, **data: Any) -> None:
        if text is not None:
            data["text"] = text
        images = data.pop("images", None)
        if images:
            data["metadata"] = _with_images(data.get("metadata"), images)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _friendly(exc, "RetrievedNode") from None

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, v: Any) -> Any:
        return None if v is None else str(v)

    @field_validator("score", mode="before")
    @classmethod
    def _score(cls, v: Any) -> Any:
        item = getattr(v, "item", None)
        return item() if callable(item) and not isinstance(v, (int, float)) else v

    @field_validator("metadata", mode="before")
    @classmethod
    def _meta(cls, v: Any) -> Any:
        return _metadata(v)

    def __str__(self) -> str:
        return self.text

    def images_from_metadata(self) -> list[MLLMImage]:
        """The images attached to this node in its metadata (``images=`` or capture), as ``MLLMImage`` objects."""
        srcs = self.metadata.get(IMAGES_KEY) if self.metadata else None
        if not isinstance(srcs, list) or not srcs:
            return []
        alts = self.metadata.get(IMAGE_ALTS_KEY) or []
        out = []
        for i, src in enumerate(srcs):
            img = to_image(src)
            alt = alts[i] if i < len(alts) else None
            if alt and not img.alt:
                img.alt = alt
            out.append(img)
        return out

    @property
    def images(self) -> list[MLLMImage]:
        """Every image of this node: those in its metadata, then those written into its text."""
        return [*self.images_from_metadata(), *find_images(self.text)]


def _with_images(metadata: Any, images: Any) -> dict[str, Any]:
    """``metadata`` plus ``images`` under the keys the metrics read (URLs or data URLs, and their alt texts)."""
    if not isinstance(images, (list, tuple)):
        images = [images]
    try:
        imgs = [to_image(i) for i in images]
    except ValueError as exc:
        raise InvalidTestCaseError(f"RetrievedNode.images: {exc}", field="images") from None
    meta = dict(metadata or {})
    srcs = list(meta.get(IMAGES_KEY) or [])
    alts = list(meta.get(IMAGE_ALTS_KEY) or [None] * len(srcs))
    srcs += [i.src for i in imgs]
    alts += [i.alt for i in imgs]
    meta[IMAGES_KEY] = srcs
    if any(alts):
        meta[IMAGE_ALTS_KEY] = alts
    return meta


def _is_image(value: Any) -> bool:
    return isinstance(value, MLLMImage)


def _friendly(exc: ValidationError, owner: str) -> InvalidTestCaseError:
    err = exc.errors()[0]
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, InvalidTestCaseError):
        return original
    field = ".".join(str(p) for p in err.get("loc", ())) or "?"
    got = err.get("input")
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    msg = f"{owner}.{field}: {err.get('msg', 'invalid value')} (got {shown})."
    hints = {
        "retrieval_context": " Pass a list of strings or RetrievedNode objects, in rank order.",
        "role": " A turn's role is 'user' or 'assistant'.",
        "input": " Pass the user's question as a non-empty string.",
        "turns": " Pass a list of Turn(role=..., content=...) objects.",
    }
    top = field.split(".")[0]
    msg += hints.get(top, "")
    return InvalidTestCaseError(msg, field=field)


def _to_nodes(value: Any, field: str) -> list[RetrievedNode] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidTestCaseError(
            f"{field} must be a list of strings or RetrievedNode objects, in rank order, "
            f"not {type(value).__name__}. Wrap a single passage in a list.",
            field=field,
        )
    nodes: list[RetrievedNode] = []
    for i, item in enumerate(value):
        if isinstance(item, RetrievedNode):
            nodes.append(item)
        elif _is_image(item):  # an image on its own: a node with no text of its own (its alt text travels with it)
            nodes.append(RetrievedNode("", images=[item]))
        elif isinstance(item, str):
            nodes.append(RetrievedNode(item))
        elif isinstance(item, dict) and "text" in item:
            nodes.append(RetrievedNode(**item))
        elif hasattr(item, "page_content"):  # a LangChain Document, accepted as a courtesy
            meta = dict(getattr(item, "metadata", {}) or {})
            nodes.append(RetrievedNode(item.page_content, id=getattr(item, "id", None), score=meta.get("score"),
                                       metadata=meta))
        else:
            raise InvalidTestCaseError(
                f"{field}[{i}] must be a string or a RetrievedNode, not {type(item).__name__}.", field=f"{field}[{i}]"
            )
    return nodes


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except InvalidTestCaseError:
            raise
        except ValidationError as exc:
            raise _friendly(exc, type(self).__name__) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """An assignment is validated like the constructor, and fails with the same error naming the field."""
        try:
            super().__setattr__(name, value)
        except InvalidTestCaseError:
            raise
        except ValidationError as exc:
            raise _friendly(exc, type(self).__name__) from None

    @field_validator("additional_metadata", mode="before", check_fields=False)
    @classmethod
    def _additional_metadata(cls, v: Any) -> Any:
        return _metadata(v)


def _check_text(v: Any, field: str, *, required: bool) -> Any:
    if _is_image(v):
        return str(v)
    if isinstance(v, (list, tuple)) and any(_is_image(p) for p in v) and \
            all(isinstance(p, str) or _is_image(p) for p in v):
        return " ".join(str(p) for p in v)  # DeepEval's multimodal list form: text and images in order
    if v is None:
        if required:
            raise InvalidTestCaseError(f"{field} is required: pass a non-empty string.", field=field)
        return v
    if not isinstance(v, str):
        raise InvalidTestCaseError(f"{field} must be a string, not {type(v).__name__}.", field=field)
    return v


class LLMTestCase(_Base):
    """One question, the answer the app gave, the answer it should give, and the ranked retrieval."""

    input: str
    actual_output: str | None = None
    expected_output: str | None = None
    retrieval_context: list[RetrievedNode] | None = None
    context: list[str] | None = None
    name: str | None = None
    id: str | None = None
    additional_metadata: dict[str, Any] | None = None
    tags: list[str] | None = None
    # What the retriever should have returned, for the judge-free ranking metrics: chunk ids or source document
    # ids (a list; a dict gives each a graded relevance, 0 = not relevant). Matched against each node's id and its
    # metadata's source document id (``provenance.SOURCE_DOC_KEY``).
    expected_context_ids: list[str] | dict[str, float] | None = None

    @field_validator("expected_context_ids", mode="before")
    @classmethod
    def _expected_ids(cls, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, dict):
            out: dict[str, float] = {}
            for k, g in v.items():
                if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
                    raise InvalidTestCaseError(
                        f"expected_context_ids[{k!r}] must be a finite relevance grade >= 0 (e.g. 1, 2, 3; 0 = not "
                        f"relevant), got {g!r}. Give it a number (a NaN or missing grade is not read as 0), or "
                        "leave the id out.", field="expected_context_ids")
                out[str(k)] = float(g)
            return out
        if isinstance(v, (str, int)):
            v = [v]
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, (str, int)) for x in v):
            raise InvalidTestCaseError("expected_context_ids must be a list of ids (strings) or a dict of id -> "
                                       "relevance grade.", field="expected_context_ids")
        return [str(x) for x in v]

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, v: Any) -> Any:
        v = _check_text(v, "input", required=True)
        if not v.strip():
            raise InvalidTestCaseError("input is empty: pass the user's question as a non-empty string.", field="input")
        return v

    @field_validator("actual_output", "expected_output", mode="before")
    @classmethod
    def _outputs(cls, v: Any, info: Any) -> Any:
        return _check_text(v, info.field_name, required=False)

    @field_validator("retrieval_context", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        return _to_nodes(v, "retrieval_context")

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, v: Any) -> Any:
        nodes = _to_nodes(v, "context")
        if nodes is None:
            return None
        return [join_images(n.text, n.images_from_metadata()) for n in nodes]

    def fingerprint(self) -> str:
        """A stable hash of the judged content, used to recognise the same case across runs."""
        # expected_context_ids only when set, so every case written before it existed keeps its fingerprint
        drop = {"name", "id", "tags", "additional_metadata"} | (
            {"expected_context_ids"} if self.expected_context_ids is None else set())
        payload = dump_json(self, exclude=drop)
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


class Turn(_Base):
    """One message of a conversation. Assistant turns may carry the retrieval they were answered from."""

    role: Literal["user", "assistant"]
    content: str
    retrieval_context: list[RetrievedNode] | None = None
    expected_output: str | None = None
    additional_metadata: dict[str, Any] | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, v: Any) -> Any:
        if v not in ("user", "assistant"):
            raise InvalidTestCaseError(f"Turn.role must be 'user' or 'assistant', not {v!r}.", field="role")
        return v

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, v: Any) -> Any:
        return _check_text(v, "content", required=True)

    @field_validator("retrieval_context", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        return _to_nodes(v, "retrieval_context")


class ConversationalTestCase(_Base):
    """A conversation: its turns in order, and optionally the outcome it should reach."""

    turns: list[Turn]
    expected_outcome: str | None = None
    scenario: str | None = None
    name: str | None = None
    id: str | None = None
    additional_metadata: dict[str, Any] | None = None
    tags: list[str] | None = None

    @field_validator("turns", mode="before")
    @classmethod
    def _turns(cls, v: Any) -> Any:
        if not isinstance(v, (list, tuple)) or not v:
            raise InvalidTestCaseError("turns must be a non-empty list of Turn objects.", field="turns")
        out = []
        for i, t in enumerate(v):
            if isinstance(t, Turn):
                out.append(t)
            elif isinstance(t, dict):
                out.append(Turn(**t))
            else:
                raise InvalidTestCaseError(f"turns[{i}] must be a Turn, not {type(t).__name__}.", field=f"turns[{i}]")
        return out

    @model_validator(mode="after")
    def _outcome(self) -> ConversationalTestCase:
        _check_text(self.expected_outcome, "expected_outcome", required=False)
        return self

    @property
    def exchanges(self) -> int:
        """How many exchanges (a user message and the answer to it) the conversation has: the number the report and
        the turn metrics count in ("exchange 1, 2 ..."). ``len(turns)`` counts messages: twice as many."""
        users, last = 0, 0
        for t in self.turns:
            if t.role == "user":
                users += 1
            elif t.role == "assistant":
                last = max(1, users)  # the exchange this answer closes, numbered as the turn metrics number it
        return last or users

    def fingerprint(self) -> str:
        """A stable hash of the judged content, used to recognise the same conversation across runs."""
        payload = dump_json(self, exclude={"name", "id", "tags", "additional_metadata"})
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

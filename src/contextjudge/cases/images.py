"""Images in test cases: ``MLLMImage``, the placeholder token it leaves in f-strings, and reading an image from a
document's metadata.

Write an image into any text field the way DeepEval users do::

    LLMTestCase(input=f"Which landmark is this? {MLLMImage(url='https://example.com/tower.jpg')}", ...)

``str(image)`` (and so an f-string) gives a placeholder token, ``[[contextjudge:image:...]]``, that carries the
image itself (its URL or data URL, and its alt text), so a string keeps its images wherever it goes: through
pydantic, the results store, pickling or a copy. ``split_images(text)`` finds the tokens again and returns the text
with readable markers (``[image 1]``, ``[image 1: alt text]``) and the images. An image can also be a separate
``retrieval_context`` item, or a ``RetrievedNode(text, images=[...])``. How judges receive images is
``contextjudge.judges._images``; the capture integrations build image nodes from their frameworks' documents.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import mimetypes
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import ConfigurationError

__all__ = ["ALT_TEXT_KEYS", "IMAGES_KEY", "IMAGE_ALTS_KEY", "IMAGE_MARKER", "MLLMImage", "find_images", "has_images",
           "image_from_metadata", "join_images", "marker_alt_texts", "may_point_to_image", "split_images",
           "text_without_markers", "to_image"]

logger = logging.getLogger("contextjudge")


IMAGES_KEY = "_contextjudge_images"
"""RetrievedNode metadata key: the node's images, as URLs or data URLs (what ``Item.images`` carries)."""


IMAGE_ALTS_KEY = "_contextjudge_image_alts"
"""RetrievedNode metadata key: the alt text or caption of each image in ``IMAGES_KEY`` (same order; may be None)."""


_TOKEN = re.compile(r"\[\[contextjudge:image:([A-Za-z0-9_\-]+=*)\]\]")


# The readable marker that replaces a token in judge prompts: [image 1], [image Q2], [image 1: alt text].
IMAGE_MARKER = re.compile(r"\[image (?:[A-Z]?\d+)(?:: ([^\]\n]*))?\]")


_SCHEMES = ("http://", "https://", "data:")


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)


_IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".svg", ".heic", ".avif"}


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    head = data[:256].lstrip().lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in data[:1024].lower()):
        return "image/svg+xml"
    return None


def _looks_like_base64_image(text: str) -> bytes | None:
    if len(text) < 16 or any(c.isspace() for c in text[:64]):
        return None
    try:
        raw = base64.b64decode(text[:344] + "=" * (-len(text[:344]) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if _sniff(raw) else None


class MLLMImage:
    """An image in a test case: an http(s) URL, a local file, or base64 data.

    ``MLLMImage(url="https://.../a.png")`` keeps the URL (it is never fetched here; the judge receives the URL).
    ``MLLMImage(url="./a.png", local=True)`` (or any existing file path, or a ``file://`` URL) reads the file and
    becomes a base64 data URL. ``MLLMImage(url="data:image/png;base64,...")``, ``MLLMImage(data=b"...")`` or
    ``MLLMImage(data="<base64>", mime_type="image/png")`` take the bytes directly. ``alt`` (or ``caption``) is the
    image's text description: a text-only judge reads it, and the marker shows it.

    ``str(image)`` is the placeholder token to use inside f-strings.
    """

    __slots__ = ("alt", "filename", "local", "mime_type", "path", "src", "url")

    def __init__(self, url: str | os.PathLike[str] | None = None, local: bool = False, *,
                 data: bytes | str | None = None, mime_type: str | None = None, alt: str | None = None,
                 caption: str | None = None, dataBase64: str | None = None,  # noqa: N803 - DeepEval's spelling
                 mimeType: str | None = None, filename: str | None = None) -> None:  # noqa: N803
        mime_type = mime_type or mimeType
        self.filename = filename  # DeepEval's field: the image's file name, kept, not used
        if data is None and dataBase64 is not None:
            data = dataBase64
        self.alt: str | None = (alt if alt is not None else caption) or None
        self.path: str | None = None
        self.local = False
        self.mime_type: str | None = None
        if data is not None:
            if url is not None:
                raise ConfigurationError("MLLMImage: pass either url= or data=, not both.")
            self.url = None
            self.src, self.mime_type = _data_url(data, mime_type)
            return
        if url is None:
            raise ConfigurationError("MLLMImage needs url= (an http(s) URL, a data URL or a local file path) or "
                                     "data= (bytes or base64).")
        text = os.fspath(url)
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError(f"MLLMImage: url must be a non-empty string or path, got {url!r}.")
        text = text.strip()
        self.url = text
        lower = text.lower()
        if lower.startswith("file://"):
            local, text = True, unquote(urlparse(text).path)
        if not local and lower.startswith(_SCHEMES):
            self.src = text
            self.mime_type = mime_type or _mime_of_url(text)
            return
        if not local and not Path(text).expanduser().exists():
            raw = _looks_like_base64_image(text)
            if raw is not None:  # bare base64 of an image
                self.url = None
                self.src, self.mime_type = _data_url(text, mime_type or _sniff(raw))
                return
            raise ConfigurationError(
                f"MLLMImage: {text[:80]!r} is not an http(s) URL, a data URL, base64 image data or an existing "
                "file. Pass a full URL, or a path to a file that exists (with local=True).")
        path = Path(text).expanduser()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"MLLMImage: cannot read the local image {str(path)!r} ({exc}). Check the "
                                     "path.") from exc
        self.local = True
        self.path = str(path)
        self.mime_type = mime_type or _sniff(raw) or mimetypes.guess_type(path.name)[0] or "image/png"
        self.src = f"data:{self.mime_type};base64,{base64.b64encode(raw).decode('ascii')}"

    # ----------------------------------------------------------------------------------------- conversions
    @property
    def token(self) -> str:
        """The placeholder token that stands for this image inside a string."""
        payload: dict[str, str] = {"s": self.src}
        if self.alt:
            payload["a"] = self.alt
        if self.path:
            payload["p"] = self.path
        if self.mime_type:
            payload["m"] = self.mime_type
        raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return f"[[contextjudge:image:{base64.urlsafe_b64encode(raw).decode('ascii')}]]"

    @classmethod
    def from_token(cls, token: str) -> MLLMImage:
        """The image a placeholder token stands for."""
        m = _TOKEN.fullmatch(token.strip())
        if not m:
            raise ConfigurationError(f"{token[:80]!r} is not a contextjudge image token: pass the text of "
                                     "str(image) (it starts with '[[contextjudge:image:').")
        return _decode(m.group(1))

    @property
    def is_data(self) -> bool:
        """True when the image travels as base64 data (a local file or bytes), not as a URL to fetch."""
        return self.src.startswith("data:")

    @property
    def base64(self) -> str | None:
        """The base64 data of a data-URL image, else None."""
        if not self.is_data:
            return None
        return self.src.partition(",")[2]

    def to_content_block(self, style: str = "standard") -> dict[str, Any]:
        """This image as a LangChain content block.

        ``"standard"`` is LangChain 1.x's provider-agnostic block (``{"type": "image", "url": ...}`` or
        ``{"type": "image", "base64": ..., "mime_type": ...}``); ``"openai"`` is the Chat Completions form
        (``{"type": "image_url", "image_url": {"url": ...}}``), which LangChain also accepts for most providers.
        """
        if style == "openai":
            return {"type": "image_url", "image_url": {"url": self.src}}
        if self.is_data:
            return {"type": "image", "base64": self.base64 or "", "mime_type": self.mime_type or "image/png"}
        return {"type": "image", "url": self.src}

    def marker(self, label: str = "1") -> str:
        """The readable stand-in for this image in a judge prompt: ``[image 1]`` or ``[image 1: alt text]``."""
        alt = " ".join((self.alt or "").replace("]", ")").split())
        return f"[image {label}: {alt}]" if alt else f"[image {label}]"

    def __str__(self) -> str:
        return self.token

    def __format__(self, spec: str) -> str:
        return format(self.token, spec)

    def __repr__(self) -> str:
        shown = self.path or self.url or (self.src[:40] + "...")
        if self.url and len(self.url) > 80:
            shown = self.url[:77] + "..."
        return f"MLLMImage({shown!r}{', local=True' if self.local else ''}{f', alt={self.alt!r}' if self.alt else ''})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MLLMImage) and (self.src, self.alt) == (other.src, other.alt)

    def __hash__(self) -> int:
        return hash((self.src, self.alt))

    def __reduce__(self):  # pickles by its token, so no file is read again
        return (MLLMImage.from_token, (self.token,))


def _mime_of_url(url: str) -> str | None:
    if url.lower().startswith("data:"):
        return url[5:].split(";", 1)[0].split(",", 1)[0] or None
    return mimetypes.guess_type(urlparse(url).path)[0]


def _data_url(data: bytes | str, mime_type: str | None) -> tuple[str, str]:
    if isinstance(data, str):
        if data.startswith("data:"):
            return data, mime_type or _mime_of_url(data) or "image/png"
        try:
            raw = base64.b64decode(data + "=" * (-len(data) % 4), validate=False)
        except (binascii.Error, ValueError) as exc:
            raise ConfigurationError(f"MLLMImage: data= is not valid base64 ({exc}). Pass the image's bytes, or "
                                     "their base64 text.") from exc
        mime = mime_type or _sniff(raw) or "image/png"
        return f"data:{mime};base64,{data}", mime
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        mime = mime_type or _sniff(raw) or "image/png"
        return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}", mime
    raise ConfigurationError(f"MLLMImage: data= must be bytes or a base64 string, not {type(data).__name__}.")


def _decode(payload: str) -> MLLMImage:
    obj = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode("utf-8"))
    img = MLLMImage.__new__(MLLMImage)
    img.src = obj["s"]
    img.alt = obj.get("a")
    img.path = obj.get("p")
    img.mime_type = obj.get("m")
    img.local = img.path is not None
    img.url = None if img.src.startswith("data:") else img.src
    return img


# ------------------------------------------------------------------------------------------------- finding images
def has_images(text: Any) -> bool:
    """True when ``text`` is a string that holds at least one image token."""
    return isinstance(text, str) and "[[contextjudge:image:" in text and _TOKEN.search(text) is not None


def find_images(text: str) -> list[MLLMImage]:
    """The images whose tokens appear in ``text``, in order."""
    if not has_images(text):
        return []
    return [_decode(m.group(1)) for m in _TOKEN.finditer(text)]


def split_images(text: str, *, prefix: str = "", start: int = 1) -> tuple[str, list[MLLMImage]]:
    """Replace each image token in ``text`` by a readable marker and return ``(text_with_markers, images)``.

    Markers are numbered from ``start`` with an optional ``prefix``: ``[image 1]``, ``[image Q1: alt text]``.
    Text without tokens comes back unchanged with an empty list.
    """
    if not has_images(text):
        return text, []
    images: list[MLLMImage] = []

    def repl(m: re.Match[str]) -> str:
        img = _decode(m.group(1))
        images.append(img)
        return img.marker(f"{prefix}{start + len(images) - 1}")

    return _TOKEN.sub(repl, text), images


def join_images(text: str, images: Iterable[MLLMImage]) -> str:
    """``text`` followed by the tokens of ``images``, each on its own line (so each becomes its own sentence)."""
    tokens = [img.token for img in images]
    if not tokens:
        return text
    return "\n".join([text, *tokens]) if text else "\n".join(tokens)


def to_image(value: Any) -> MLLMImage:
    """An ``MLLMImage`` from an ``MLLMImage``, a token, a URL/data URL/path string or a LangChain image block."""
    if isinstance(value, MLLMImage):
        return value
    if isinstance(value, str) and value.startswith("[[contextjudge:image:"):
        return MLLMImage.from_token(value)
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            url = value.get("image_url")
            return MLLMImage(url=url.get("url") if isinstance(url, dict) else url)
        if value.get("type") == "image":
            if value.get("base64"):
                return MLLMImage(data=value["base64"], mime_type=value.get("mime_type"))
            if value.get("url"):
                return MLLMImage(url=value["url"])
    if isinstance(value, (str, os.PathLike)):
        return MLLMImage(url=value)
    raise ConfigurationError(f"not an image: {type(value).__name__}. Pass MLLMImage(...) objects or image URLs.")


def marker_alt_texts(text: str) -> list[str]:
    """The alt texts written in the image markers of a judge prompt's text (``[image 1: alt]`` gives ``alt``)."""
    return [m.group(1).strip() for m in IMAGE_MARKER.finditer(text or "") if m.group(1) and m.group(1).strip()]


def text_without_markers(text: str) -> str:
    """``text`` for a judge that reads only text: ``[image 1: alt]`` becomes ``alt``; ``[image 1]`` is dropped."""
    out = IMAGE_MARKER.sub(lambda m: (m.group(1) or "").strip(), text or "")
    return " ".join(out.split())


# ------------------------------------------------------------------------------------------------ capture helpers
_URL_KEYS = ("image_url", "img_url", "image_uri", "image_link")


_PATH_KEYS = ("image_path", "img_path", "image_file", "image_filepath")


_DATA_KEYS = ("image_base64", "image_b64", "img_base64", "image_data")


_MIME_KEYS = ("image_mime_type", "image_mimetype", "mime_type", "mimetype")


ALT_TEXT_KEYS = ("alt_text", "alt", "image_alt", "caption", "image_caption", "image_description")


_GENERIC_KEYS = ("image", "source", "file_path", "path", "url")


def _is_image_ref(value: str) -> bool:
    low = value.lower()
    if low.startswith("data:image/"):
        return True
    return Path(urlparse(value).path if low.startswith(("http://", "https://", "file://")) else value).suffix.lower() \
        in _IMAGE_EXTENSIONS


_POINTER_KEYS = frozenset(_URL_KEYS + _PATH_KEYS + _DATA_KEYS + _GENERIC_KEYS)


def may_point_to_image(metadata: dict[str, Any] | None) -> bool:
    """False when ``metadata`` has none of the keys ``image_from_metadata`` reads an image from: then it finds
    none, and a capture integration can skip it (it runs for every retrieved document)."""
    return metadata is not None and bool(metadata) and not _POINTER_KEYS.isdisjoint(metadata)


def image_from_metadata(metadata: dict[str, Any] | None) -> MLLMImage | None:
    """The image a document's metadata points to, or None.

    Looks at, in order: base64 data (``image_base64``, ...), URLs (``image_url``, ...), paths (``image_path``, ...),
    then ``image``/``source``/``file_path``/``path``/``url`` when they name an image file or data URL. The MIME type
    comes from ``image_mime_type``/``mime_type`` and the alt text from ``alt_text``/``alt``/``caption``. Never
    raises: a pointer that cannot be read is logged and skipped.
    """
    if not metadata:
        return None
    mime = next((metadata[k] for k in _MIME_KEYS if isinstance(metadata.get(k), str)), None)
    if mime and not mime.startswith("image/"):
        mime = None
    alt = next((metadata[k] for k in ALT_TEXT_KEYS if isinstance(metadata.get(k), str) and metadata[k].strip()), None)
    candidates: list[tuple[str, Any]] = []
    candidates += [("data", metadata[k]) for k in _DATA_KEYS if metadata.get(k)]
    candidates += [("url", metadata[k]) for k in _URL_KEYS + _PATH_KEYS if metadata.get(k)]
    candidates += [("url", metadata[k]) for k in _GENERIC_KEYS
                   if isinstance(metadata.get(k), str) and _is_image_ref(metadata[k])]
    for kind, value in candidates:
        try:
            if isinstance(value, MLLMImage):
                img = value
            elif kind == "data":
                img = MLLMImage(data=value, mime_type=mime)
            else:
                img = MLLMImage(url=os.fspath(value), mime_type=mime)
        except (ValueError, TypeError) as exc:
            logger.debug("contextjudge: image pointer %r in metadata skipped: %s", str(value)[:80], exc)
            continue
        if alt and not img.alt:
            img.alt = alt
        return img
    return None

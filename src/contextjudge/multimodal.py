"""The public spelling of images in test cases and judge requests, by layer since 0.2:

- the image value and its placeholder token: ``contextjudge.cases.images`` (``MLLMImage``, ``split_images``...);
- how judges receive images: ``contextjudge.judges.images`` (``judge_supports_images``...);
- node builders for framework documents: the integrations (``contextjudge_langchain.node_from_image_metadata``,
  ``contextjudge_llama_index.node_from_llama_image_node``). Their old names here still work for one release, with
  a ``DeprecationWarning``, when the integration is installed.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .cases.images import (
    IMAGE_ALTS_KEY,
    IMAGES_KEY,
    MLLMImage,
    find_images,
    has_images,
    image_from_metadata,
    join_images,
    marker_alt_texts,
    split_images,
    text_without_markers,
    to_image,
)
from .judges.images import ImageRequests, judge_supports_images, judge_view, prepare_request, text_judge_note

__all__ = [
    "IMAGES_KEY",
    "IMAGE_ALTS_KEY",
    "MLLMImage",
    "find_images",
    "has_images",
    "image_from_metadata",
    "judge_supports_images",
    "marker_alt_texts",
    "split_images",
    "text_judge_note",
    "text_without_markers",
]

_MOVED = {"node_from_image_metadata": "contextjudge_langchain",
          "node_from_llama_image_node": "contextjudge_llama_index"}

# names kept importable from here, but not advertised
_ = (ImageRequests, judge_view, prepare_request, join_images, to_image)


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'contextjudge.multimodal' has no attribute {name!r}")
    try:
        module = importlib.import_module(where)
    except ImportError as exc:
        raise AttributeError(f"{name} moved to {where} in 0.2: pip install {where.replace('_', '-')}") from exc
    warnings.warn(f"contextjudge.multimodal.{name} moved to {where}.{name} in 0.2; this old name goes in the next "
                  "release.", DeprecationWarning, stacklevel=2)
    return getattr(module, name)

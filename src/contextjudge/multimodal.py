"""The public spelling of images in test cases and judge requests, by layer since 0.2:

- the image value and its placeholder token: ``contextjudge.cases.images`` (``MLLMImage``, ``split_images``...);
- how judges receive images: ``contextjudge.judges._images`` (``judge_supports_images``...);
- node builders for framework documents: the integrations (``contextjudge_langchain.node_from_image_metadata``,
  ``contextjudge_llama_index.node_from_llama_image_node``).
"""

from __future__ import annotations

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
from .judges import ImageRequests, judge_supports_images, judge_view, prepare_request, text_judge_note

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

# names kept importable from here, but not advertised
_ = (ImageRequests, judge_view, prepare_request, join_images, to_image)

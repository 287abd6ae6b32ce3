"""How judges receive images: every metric replaces the image tokens in what it sends with markers and attaches the
images to the judge request, so a multimodal LangChain chat model receives them as image content blocks. A judge
that cannot take images is refused before any call (see ``judge_supports_images`` for the rule). The embedded judge
takes image requests but reads only text: it judges the text around an image and its alt text or caption
(``text_judge_note``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..cases.images import (
    IMAGE_ALTS_KEY,
    IMAGE_MARKER,
    IMAGES_KEY,
    MLLMImage,
    find_images,
    has_images,
    join_images,
    marker_alt_texts,
    split_images,
)

__all__ = ["ImageRequests", "judge_supports_images", "judge_view", "prepare_request", "text_judge_note"]

logger = logging.getLogger("contextjudge")


def text_judge_note(text: str, images: int) -> str | None:
    """What a judge that reads only text should add to its reason about an item's images, or None when none.

    For the embedded judge: it judged the text around the image, plus the alt text or caption when there is one.
    """
    alts = marker_alt_texts(text)
    if not images and not IMAGE_MARKER.search(text or ""):
        return None
    if alts:
        shown = "; ".join(f"'{a}'" for a in alts[:3])
        return f"The image was not seen; it was judged by its alt text/caption ({shown}) and the text around it."
    return "The image was not seen and has no alt text or caption; only the text around it was judged."


# ---------------------------------------------------------------------------------------------- judge capability
# Name patterns of chat models that take image input, for judges whose LangChain profile does not say.
_VISION_NAMES = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|(?:^|[^a-z])o1(?!-mini)|(?:^|[^a-z])o3"
    r"|o4-mini|claude-3|claude-(?:sonnet|opus|haiku)-4|claude-.*-4|gemini|llava|bakllava|-vl|vl-|vision|pixtral"
    r"|gemma3|gemma-3|minicpm-v|moondream|llama-?4|mistral-small-?3\.[12]|mistral-medium|qwen2\.5vl|qwen3-vl"
    r"|phi-4-multimodal",
    re.I,
)


def _model_names(model: Any) -> list[str]:
    names = []
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        v = getattr(model, attr, None)
        if isinstance(v, str) and v:
            names.append(v)
    return names


def judge_supports_images(model: Any, override: bool | None = None) -> bool:
    """Whether ``model`` can be sent images. The rule, first answer wins:

    1. ``override`` (the metric's ``judge_supports_images=`` option), when not None;
    2. the judge's own ``supports_images`` attribute, when it is a bool (``FakeJudge``, the embedded judge, or
       your own subclass);
    3. the judge's LangChain model profile, ``model.profile["image_inputs"]`` (langchain-core 1.1+, filled in by
       provider packages such as langchain-openai);
    4. a known vision-capable model name (gpt-4o, gpt-4.1, gpt-5, o1/o3/o4-mini, claude-3 and 4, gemini, llava,
       qwen-vl, pixtral, gemma3, llama4, ...);
    5. otherwise False: an unknown judge is treated as text-only, and the metric says how to override that.
    """
    if override is not None:
        return bool(override)
    own = getattr(model, "supports_images", None)
    if isinstance(own, bool):
        return own
    profile = getattr(model, "profile", None)
    if isinstance(profile, dict) and isinstance(profile.get("image_inputs"), bool):
        return profile["image_inputs"]
    return any(_VISION_NAMES.search(n) for n in _model_names(model))


# ---------------------------------------------------------------------------------------------- judge requests
def judge_view(test_case: Any) -> tuple[Any, list[tuple[str, str, MLLMImage]]]:
    """The test case as the metrics send it to a judge, and where its images are.

    Nodes whose images travel in metadata (``RetrievedNode(images=...)``, capture) get their image tokens appended
    to their text on lines of their own, so every metric (relevancy too, which judges sentences) sees them in
    place. Returns ``(view, [(field, where, image)])``: ``field`` is the test-case field ("input",
    "retrieval_context", "turns", ...) and ``where`` names the spot for error messages, e.g.
    "retrieval_context rank 2 (node id 'doc-7')". A case without images comes back as it is, with ``[]``.
    """
    from ..cases.testcase import ConversationalTestCase, LLMTestCase  # noqa: PLC0415

    found: list[tuple[str, str, MLLMImage]] = []
    if isinstance(test_case, LLMTestCase):
        for f in ("input", "actual_output", "expected_output"):
            found += [(f, f, img) for img in find_images(getattr(test_case, f) or "")]
        for k, text in enumerate(test_case.context or [], start=1):
            found += [("context", f"context[{k - 1}]", img) for img in find_images(text)]
        nodes, changed = _view_nodes(test_case.retrieval_context, "retrieval_context", found)
        if changed:
            test_case = test_case.model_copy(update={"retrieval_context": nodes})
        return test_case, found
    if isinstance(test_case, ConversationalTestCase):
        turns = []
        any_changed = False
        for i, turn in enumerate(test_case.turns):
            found += [("turns", f"turns[{i}].content", img) for img in find_images(turn.content)]
            found += [("turns", f"turns[{i}].expected_output", img) for img in find_images(turn.expected_output or "")]
            nodes, changed = _view_nodes(turn.retrieval_context, f"turns[{i}].retrieval_context", found)
            any_changed |= changed
            turns.append(turn.model_copy(update={"retrieval_context": nodes}) if changed else turn)
        found += [("expected_outcome", "expected_outcome", img)
                  for img in find_images(test_case.expected_outcome or "")]
        if any_changed:
            test_case = test_case.model_copy(update={"turns": turns})
        return test_case, found
    return test_case, found


def _view_nodes(nodes: Any, field: str, found: list[tuple[str, str, MLLMImage]]) -> tuple[Any, bool]:
    if not nodes:
        return nodes, False
    out = []
    changed = False
    top = field.split("[")[0] if "." not in field else "turns"
    for k, node in enumerate(nodes, start=1):
        meta_imgs = node.images_from_metadata()
        in_text = find_images(node.text)
        if not meta_imgs and not in_text:  # the common case: nothing to name or change
            out.append(node)
            continue
        where = f"{field} rank {k}" + (f" (node id {node.id!r})" if node.id else "")
        found += [(top, where, img) for img in in_text]
        found += [(top, where, img) for img in meta_imgs]
        if meta_imgs:
            meta = {k2: v for k2, v in node.metadata.items() if k2 not in (IMAGES_KEY, IMAGE_ALTS_KEY)}
            node = node.model_copy(update={"text": join_images(node.text, meta_imgs), "metadata": meta})
            changed = True
        out.append(node)
    return out, changed


def prepare_request(request: Any) -> Any:
    """A judge request with every image token replaced by a marker and the image attached for the judge.

    Tokens in an item's text (a node, a sentence of a node, a statement of the reference) become that item's
    images. Images of the question, the reference answer, the answer and the earlier conversation become evidence
    items (ids ``image.q1``, ``image.r1``, ...) in the request's context, for the tasks whose prompts do not list the
    context as retrieved nodes (node usefulness, sentence relevance, rubric); for statement support only their
    markers (with alt text) remain, so they are never mistaken for retrieved nodes.
    """
    from ._protocol import Item  # noqa: PLC0415

    update: dict[str, Any] = {}

    def items_of(items: list[Any]) -> list[Any] | None:
        out, changed = [], False
        for it in items:
            text, imgs = split_images(it.text)
            if imgs:
                it = it.model_copy(update={"text": text, "images": [*it.images, *(i.src for i in imgs)]})
                changed = True
            out.append(it)
        return out if changed else None

    for name in ("items", "context"):
        new = items_of(getattr(request, name))
        if new is not None:
            update[name] = new
    extra: list[Any] = []

    def field_images(value: str | None, label: str, where: str) -> str | None:
        if not value:
            return value
        text, imgs = split_images(value, prefix=label)
        for n, img in enumerate(imgs, start=1):
            extra.append(Item(id=f"image.{label.lower()}{n}", text=f"{img.marker(f'{label}{n}')} (from {where})",
                              images=[img.src]))
        return text

    if has_images(request.input):
        update["input"] = field_images(request.input, "Q", "the question")
    if has_images(request.reference):
        update["reference"] = field_images(request.reference, "R", "the reference answer")
    if has_images(request.answer):
        update["answer"] = field_images(request.answer, "A", "the answer")
    if any(has_images(t.get("content")) for t in request.history):
        history = []
        for t in request.history:
            if has_images(t.get("content")):
                before = len(extra)
                text, imgs = split_images(t["content"], prefix="H", start=before + 1)
                for n, img in enumerate(imgs, start=before + 1):
                    extra.append(Item(id=f"image.h{n}", text=f"{img.marker(f'H{n}')} (from the earlier conversation)",
                                      images=[img.src]))
                t = {**t, "content": text}
            history.append(t)
        update["history"] = history
    if extra and not request.verdict_family.cites_context:
        update["context"] = [*update.get("context", request.context), *extra]
    return request.model_copy(update=update) if update else request


class ImageRequests:
    """Wraps a judge client so every request it asks goes through ``prepare_request`` first."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def ask(self, request: Any, build: Any) -> Any:
        """Ask the wrapped client, with the request's images prepared first."""
        return await self._client.ask(prepare_request(request), build)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

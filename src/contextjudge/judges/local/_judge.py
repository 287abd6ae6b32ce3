"""LocalJudge: the embedded, offline judge (``model="local"``), a LangChain chat model that answers JudgeRequests."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from ...cases.images import text_without_markers
from ...errors import ConfigurationError, JudgeUnavailableError
from ..images import text_judge_note
from ..protocol import JudgeRequest, request_from_message_kwargs
from ._cache import BatchCache
from ._encoder import CrossEncoderModel, default_model_path
from ._scoring import Scorer, approx_tokens

__all__ = ["MODEL_NAME", "LocalJudge"]

MODEL_NAME = "contextjudge-crossjudge-minilm-l6"
INSTALL_HINT = "pip install 'contextjudge[local]'  (or: pip install tokenizers threadpoolctl)"

_DEFAULT_LOCK = threading.Lock()
_DEFAULT: dict[str, tuple[CrossEncoderModel, BatchCache, str]] = {}


def _weights_id(path: str) -> str:
    """A short hash of the model file: a verdict cached under one model is never served for another."""
    h = hashlib.blake2b(digest_size=6)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _default_model(cache_size: int) -> tuple[CrossEncoderModel, BatchCache, str]:
    """The model and its cache, one per process: every metric given model="local" resolves its own LocalJudge, and
    they should still load the model once and read each (question, text) pair once."""
    with _DEFAULT_LOCK:
        if "model" not in _DEFAULT:
            path = default_model_path()
            try:
                import tokenizers  # noqa: F401, PLC0415 - optional dependency, loaded on demand
            except ImportError as exc:
                raise JudgeUnavailableError(
                    "The embedded judge (model='local') needs the 'tokenizers' package, which is not installed. "
                    f"Install it with: {INSTALL_HINT}") from exc
            try:
                model = CrossEncoderModel(path)
            except Exception as exc:  # noqa: BLE001 - a broken install must say so, never fall back
                raise JudgeUnavailableError(
                    f"The embedded judge could not load its model from {path} ({type(exc).__name__}: {exc}). "
                    "Reinstall contextjudge with: pip install --force-reinstall 'contextjudge[local]'") from exc
            cache = BatchCache(lambda keys: list(model.logits(keys)), maxsize=cache_size)
            _DEFAULT["model"] = (model, cache, _weights_id(path))
        return _DEFAULT["model"]


_EXECUTOR: list[ThreadPoolExecutor] = []


def _executor() -> ThreadPoolExecutor:
    with _DEFAULT_LOCK:
        if not _EXECUTOR:
            _EXECUTOR.append(ThreadPoolExecutor(max_workers=32, thread_name_prefix="contextjudge-local"))
        return _EXECUTOR[0]


NOT_A_REQUEST = ("This is contextjudge's embedded judge (model='local'): a small cross-encoder that scores "
                 "(question, text) pairs, not a chat model. It only answers contextjudge judge requests, and this message carries none.")


def _text_of(msg: BaseMessage) -> str:
    c = msg.content
    if isinstance(c, str):
        return c
    return " ".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)


def _without_images(req: JudgeRequest) -> tuple[JudgeRequest, dict[str, tuple[bool, str]]]:
    """The request as this text-only judge reads it: image markers become their alt text (or vanish), and the
    question's and reference's images (context ids ``image.*``) are not evidence. Also, per item with an image,
    (nothing left to judge, the note for its reason)."""
    notes: dict[str, tuple[bool, str]] = {}
    items = []
    for it in req.items:
        note = text_judge_note(it.text, len(it.images))
        text = text_without_markers(it.text) if note else it.text
        if note:
            notes[it.id] = (not text.strip(), note)
        items.append(it.model_copy(update={"text": text, "images": []}))
    context = [c.model_copy(update={"text": text_without_markers(c.text), "images": []})
               for c in req.context if not c.id.startswith("image.")]
    plain = {f: text_without_markers(getattr(req, f)) for f in ("input", "reference", "answer")
             if getattr(req, f)}
    return req.model_copy(update={"items": items, "context": context, **plain}), notes


class LocalJudge(BaseChatModel):
    """A deterministic, offline judge: a small cross-encoder of our own (not an LLM) that reads the question, or the
    statement, and each text together and gives the probability that the answer is yes.

    The model (all-MiniLM-L6-v2 with adapters trained on open data, see ``training/``) ships inside the package and
    runs on numpy. ``cache_size``: how many (question, text window) pairs are kept (LRU), so a node shared by
    metrics, turns or runs is read once. Every LocalJudge of a process shares one model and one cache.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    contextjudge_native: ClassVar[bool] = True
    # Every verdict is a function of its request: judge repeats (JudgeOptions.repeats) ask it once.
    contextjudge_deterministic: ClassVar[bool] = True
    # No rate limit to respect, and the more calls wait, the larger the batches the pair cache makes of them.
    contextjudge_min_concurrency: ClassVar[int] = 32
    # It never sees pixels: it judges the text around an image and its alt text or caption, and says so.
    supports_images: ClassVar[bool] = True

    cache_size: int = 100_000

    _model: CrossEncoderModel = PrivateAttr()
    _cache: BatchCache = PrivateAttr()
    _scorer: Scorer = PrivateAttr()
    _weights: str = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        for gone in ("embeddings", "embed_chars"):
            if gone in kwargs:
                raise ConfigurationError(
                    f"LocalJudge({gone}=...) belonged to the embedding-similarity judge, removed in 0.3: the embedded "
                    "judge is now a cross-encoder that ships with the package. Use LocalJudge() (or model='local'); "
                    "to judge with your own model, pass any LangChain chat model as model=.")
        super().__init__(**kwargs)
        self._model, self._cache, self._weights = _default_model(self.cache_size)
        self._scorer = Scorer(self._model, self._cache)

    @property
    def _llm_type(self) -> str:
        return "contextjudge-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"judge": "contextjudge-local", "encoder": MODEL_NAME, "weights": self._weights}

    @property
    def pair_cache(self) -> BatchCache:
        """The judge's (question, text window) cache (its ``computed`` counter says how many pairs the model read)."""
        return self._cache

    def _answer(self, messages: list[BaseMessage]) -> tuple[str, int]:
        req = None
        for msg in reversed(messages):
            req = request_from_message_kwargs(getattr(msg, "additional_kwargs", None) or {})
            if req is not None:
                break
        if req is None:
            return NOT_A_REQUEST, 0
        req, notes = _without_images(req)
        answer = self._scorer.answer(req)
        for v in answer.get("verdicts", []):
            note = notes.get(v.get("id"))
            if note is None:
                continue
            if note[0]:  # nothing but an image, with no alt text: nothing to judge
                v.update(verdict="no", confidence=0.0, node_ids=[], reason=note[1])
            else:
                v["reason"] = f"{v.get('reason', '')} {note[1]}".strip()
        return json.dumps(answer, ensure_ascii=False), 0

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        content, _ = self._answer(messages)
        n_in = sum(approx_tokens(_text_of(m)) for m in messages)
        n_out = approx_tokens(content)
        msg = AIMessage(content=content, usage_metadata={"input_tokens": n_in, "output_tokens": n_out,
                                                         "total_tokens": n_in + n_out},
                        response_metadata={"model_name": MODEL_NAME, "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        # The work is CPU-bound numpy; a worker thread keeps the event loop (and the other metrics) moving. The judge's
        # own pool, larger than asyncio's default, lets enough calls wait on the model for their misses to be read
        # together (BatchCache); the threads mostly wait.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor(), functools.partial(self._generate, messages, stop, None,
                                                                         **kwargs))

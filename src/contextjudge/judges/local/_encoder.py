"""The embedded judge's model on numpy: a BERT cross-encoder that reads a question (or statement) and a text together.

The file ``contextjudge/data/crossjudge.npz`` holds the whole model: all-MiniLM-L6-v2's encoder (6 layers, 384 wide;
Apache-2.0) with our trained low-rank adapters merged in, linear weights as int8 with one float16 scale per 32 weights
(expanded to float32 once at load; the word table stays int8 and is expanded per token), the layer norms and one linear head per task over the [CLS] state, and the
model's WordPiece tokenizer (run by the ``tokenizers`` library). ``training/`` rebuilds it (``training/pack.py``
writes it; its manifest says from what).

The forward pass is a few large float32 matrix products on numpy's BLAS, batches of similar lengths spread over our
own threads with BLAS itself on one thread (threadpoolctl): on a busy 2-core machine BLAS's own threading spins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

logger = logging.getLogger("contextjudge")

__all__ = ["TASKS", "CrossEncoderModel", "default_model_path"]

TASKS = ("relevance", "answer", "support")  # the heads, in the order training/model.py trains them
MAX_LEN = 128  # tokens per pair, [CLS] and both [SEP] included: what the model was trained on
MAX_QUERY = 80  # tokens of the query side at most; the rest of the window is the text's


def default_model_path() -> str:
    return str(resources.files("contextjudge") / "data" / "crossjudge.npz")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class _Layer:
    wqkv: np.ndarray  # (H, 3H), for x @ w; the query part already scaled by 1/sqrt(head size)
    bqkv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    wi: np.ndarray
    bi: np.ndarray
    wf: np.ndarray
    bf: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Window:
    """A stretch of a text as the model reads it: token ids and the characters they came from."""

    ids: tuple[int, ...]
    start: int
    end: int


class CrossEncoderModel:
    """``logits(pairs)``: one logit per task for each (query ids, window ids) pair; ``windows(text)`` cuts a text."""

    def __init__(self, path: str | None = None, threads: int | None = None, max_batch_tokens: int = 4096,
                 heads: int = 12, eps: float = 1e-12) -> None:
        self.path = path or default_model_path()
        self.max_batch_tokens = max_batch_tokens
        self.NH, self.eps = heads, eps
        self._lock = threading.Lock()
        self._threads = max(1, threads if threads is not None else min(usable_cpus(), 8))
        self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="contextjudge-encoder")
        try:
            from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - optional, see _blas_single_threaded

            self._controller: Any = ThreadpoolController()
        except Exception as exc:  # noqa: BLE001 - not installed, or cannot inspect this process's libraries
            self._controller = None
            if self._threads > 1:
                logger.warning("contextjudge: the embedded judge runs its batches one at a time, about half as fast "
                               "on 2 cores, because threadpoolctl is unavailable (%s). Install it with: "
                               "pip install 'contextjudge[local]'  (or: pip install threadpoolctl)", exc)
        self._load(self.path)

    # --------------------------------------------------------------------------------------------- loading
    def _load(self, path: str) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415 - optional dependency ([local])

        with np.load(path) as z:
            t = {k: z[k] for k in z.files}
        self.tokenizer = Tokenizer.from_str(bytes(t.pop("tokenizer")).decode("utf-8"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls, self.sep = self.tokenizer.token_to_id("[CLS]"), self.tokenizer.token_to_id("[SEP]")

        def w(name: str) -> np.ndarray:  # int8 * its group's scale -> float32, (in, out) for x @ w
            return np.ascontiguousarray(_dequant(t[name + ".q"], t[name + ".s"]).T)

        self._word_q, self._word_s = t["emb.word.q"], t["emb.word.s"]  # stays int8; rows expanded per token
        self._pos = t["emb.pos"].astype(np.float32)
        self._type = t["emb.type"].astype(np.float32)
        self._eln = (t["emb.ln.w"], t["emb.ln.b"])
        self.H = self._pos.shape[1]
        n_layers = sum(1 for k in t if k.endswith(".q.w.q"))
        scale = np.float32(1.0 / np.sqrt(self.H // self.NH))
        self._layers = []
        for i in range(n_layers):
            p = f"l{i}."
            self._layers.append(_Layer(
                wqkv=np.ascontiguousarray(np.concatenate([w(p + "q.w") * scale, w(p + "k.w"), w(p + "v.w")], axis=1)),
                bqkv=np.concatenate([t[p + "q.b"] * scale, t[p + "k.b"], t[p + "v.b"]]).astype(np.float32),
                wo=w(p + "o.w"), bo=t[p + "o.b"], ln1=(t[p + "ln1.w"], t[p + "ln1.b"]),
                wi=w(p + "fi.w"), bi=t[p + "fi.b"], wf=w(p + "fo.w"), bf=t[p + "fo.b"],
                ln2=(t[p + "ln2.w"], t[p + "ln2.b"])))
        # Each head's Platt scaling (a * logit + b, fitted by training/calibrate_heads.py) folded into the head.
        cal = t.get("calibration", np.array([[1.0, 0.0]] * len(TASKS), dtype=np.float32)).astype(np.float32)
        self._heads_w = np.ascontiguousarray(t["heads.w"].T.astype(np.float32) * cal[:, 0])  # (H, tasks)
        self._heads_b = (t["heads.b"].astype(np.float32) * cal[:, 0] + cal[:, 1]).astype(np.float32)

    # --------------------------------------------------------------------------------------------- text
    def query_ids(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False).ids[:MAX_QUERY])

    def windows(self, text: str, query_len: int, overlap: int = 24, max_windows: int = 8) -> list[Window]:
        """``text`` cut into windows that fit beside a query of ``query_len`` tokens, overlapping by ``overlap``.

        At most ``max_windows`` are read (a long node's verdict is its best window among them: the cost of a node is
        bounded whatever its length)."""
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        ids, offs = enc.ids, enc.offsets
        span = MAX_LEN - 3 - query_len
        if not ids:
            return [Window((), 0, 0)]
        out = []
        step = max(span - overlap, 1)
        for a in range(0, len(ids), step):
            b = min(a + span, len(ids))
            out.append(Window(tuple(ids[a:b]), offs[a][0], offs[b - 1][1]))
            if b == len(ids) or len(out) == max_windows:
                break
        return out

    # --------------------------------------------------------------------------------------------- model
    def logits(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> np.ndarray:
        """Logits of every task, shape (len(pairs), len(TASKS)), for (query ids, text ids) pairs."""
        seqs = [([self.cls, *q, self.sep, *p, self.sep], len(q) + 2) for q, p in pairs]
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
        parallel = self._threads > 1 and self._controller is not None and len(seqs) > 1
        budget = self.max_batch_tokens
        if parallel:
            total = sum(len(s) for s, _ in seqs)
            budget = max(min(budget, -(-total // self._threads)), MAX_LEN)
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * len(seqs[order[end]][0]) <= budget:
                end += 1
            batches.append(order[start:end])
            start = end
        out = np.zeros((len(seqs), len(TASKS)), dtype=np.float32)
        run = lambda b: self._forward([seqs[i] for i in b])  # noqa: E731
        with self._lock, self._blas_single_threaded():
            results = list(self._pool.map(run, batches)) if parallel and len(batches) > 1 else [run(b) for b in batches]
        for b, res in zip(batches, results):
            out[b] = res
        return out

    @contextlib.contextmanager
    def _blas_single_threaded(self) -> Iterator[None]:
        """numpy's BLAS on one thread while this model runs, its batches in parallel on our own threads instead.

        BLAS's idle workers spin between matrix products, which on a busy 2-core machine costs more than it saves,
        and a result then never depends on how BLAS splits the work. The limit is process-wide while a call runs
        (threadpoolctl). Without threadpoolctl, BLAS keeps its threads and batches run one at a time."""
        if self._controller is None:
            yield
            return
        with self._controller.limit(limits=1, user_api="blas"):
            yield

    def _forward(self, seqs: list[tuple[list[int], int]]) -> np.ndarray:
        B, L, H, NH = len(seqs), max(len(s) for s, _ in seqs), self.H, self.NH
        hd = H // NH
        ids = np.zeros((B, L), dtype=np.int64)
        types = np.zeros((B, L), dtype=np.int64)
        mask = np.zeros((B, L), dtype=bool)
        for b, (s, qlen) in enumerate(seqs):
            ids[b, :len(s)] = s
            types[b, qlen:len(s)] = 1
            mask[b, :len(s)] = True
        flat = ids.reshape(-1)
        x = _dequant(self._word_q[flat], self._word_s[flat])
        x += np.tile(self._pos[:L], (B, 1))
        x += self._type[types.reshape(-1)]
        eps = self.eps
        _layer_norm(x, *self._eln, eps)
        bias = None if mask.all() else np.where(mask, 0.0, -1e9).astype(np.float32)[:, None, None, :]
        for ly in self._layers:
            qkv = x @ ly.wqkv
            qkv += ly.bqkv
            t = qkv.reshape(B, L, 3, NH, hd).transpose(2, 0, 3, 1, 4)  # (3, B, NH, L, hd)
            att = np.matmul(t[0], t[1].transpose(0, 1, 3, 2))  # (B, NH, L, L), already scaled
            if bias is not None:
                att += bias
            att -= att.max(axis=-1, keepdims=True)
            np.exp(att, out=att)
            ctx = np.matmul(att, t[2])
            ctx /= att.sum(axis=-1, keepdims=True)
            x += ctx.transpose(0, 2, 1, 3).reshape(B * L, H) @ ly.wo
            x += ly.bo
            _layer_norm(x, *ly.ln1, eps)
            mid = x @ ly.wi
            mid += ly.bi
            with np.errstate(over="ignore"):  # exp(-2u) is inf for very negative inputs: x / inf = -0, as it should
                _gelu(mid)
            x += mid @ ly.wf
            x += ly.bf
            _layer_norm(x, *ly.ln2, eps)
        cls = x.reshape(B, L, H)[:, 0]
        return cls @ self._heads_w + self._heads_b


def _dequant(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 (rows, cols) with a float16 scale per group of cols // scale.shape[1] -> float32 (rows, cols)."""
    rows, cols = q.shape
    groups = scale.shape[1]
    out = q.astype(np.float32).reshape(rows, groups, cols // groups)
    out *= scale.astype(np.float32)[:, :, None]
    return out.reshape(rows, cols)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> None:
    """Layer norm of each row of ``x``, in place."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None] / x.shape[1]
    x *= 1.0 / np.sqrt(var + eps)
    x *= w
    x += b


_C1 = np.float32(-2.0 * np.sqrt(2.0 / np.pi))
_C2 = np.float32(-2.0 * 0.044715 * np.sqrt(2.0 / np.pi))


def _gelu(x: np.ndarray) -> None:
    """GELU in place, tanh form 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as the equal
    x / (1 + exp(-2u)) (one operation fewer). training/model.py trains with this form."""
    t = x * x
    t *= _C2
    t += _C1
    t *= x
    np.exp(t, out=t)
    t += 1.0
    x /= t


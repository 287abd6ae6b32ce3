"""Shared helpers of the local-judge benchmarks: the gold files, ROC AUC and Spearman in numpy, a disk embedding cache."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

FILES = {"hotpotqa": "hotpotqa_dev.jsonl", "trec_dl": "trec_dl_dev.jsonl", "clapnq": "clapnq_dev.jsonl",
         "mtrag": "mtrag_dev.jsonl"}


def load(data_dir: str | Path, name: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with open(Path(data_dir) / FILES[name], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit and len(rows) >= limit:
                    break
    return rows


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def roc_auc(scores: Any, labels: Any) -> float:
    """ROC AUC (the Mann-Whitney U statistic, ties counted half)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    r = _ranks(s)
    return float((r[y].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def spearman(a: Any, b: Any) -> float:
    """Spearman's rank correlation (Pearson on average ranks)."""
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


class DiskCachedEmbeddings(Embeddings):
    """Wraps an Embeddings with a pickle file of vectors, so repeated calibration runs do not re-embed (scratch use)."""

    def __init__(self, inner: Embeddings, path: str) -> None:
        self.inner, self.path = inner, path
        self.model_name = getattr(inner, "model_name", type(inner).__name__)
        self.d: dict[tuple[str, str], list[float]] = {}
        if os.path.exists(path):
            with open(path, "rb") as f:
                self.d = pickle.load(f)

    def _get(self, texts: list[str], kind: str) -> list[list[float]]:
        miss = [t for t in dict.fromkeys(texts) if (kind, t) not in self.d]
        if miss:
            vecs = self.inner.embed_documents(miss) if kind == "p" else (
                self.inner.embed_queries(miss) if hasattr(self.inner, "embed_queries")
                else [self.inner.embed_query(t) for t in miss])
            for t, v in zip(miss, vecs):
                self.d[(kind, t)] = v
        return [self.d[(kind, t)] for t in texts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._get(texts, "p")

    def embed_query(self, text: str) -> list[float]:
        return self._get([text], "q")[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._get(texts, "q")

    def save(self) -> None:
        with open(self.path + ".tmp", "wb") as f:
            pickle.dump(self.d, f)
        os.replace(self.path + ".tmp", self.path)

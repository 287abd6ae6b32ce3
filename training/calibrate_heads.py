"""Fit each head's scaling (Platt: p = sigmoid(a * logit + b)) on the development data, so that a confidence means
what it says there, and write it into the model file.

    python benchmarks/agreement.py --data-dir ../shared/data --dump dump.json
    python training/calibrate_heads.py --dump dump.json [--manifest training/out/crossjudge.manifest.json]

Two numbers per head, fitted by logistic regression on the node confidences ``agreement.py`` dumped (the model's
logits, read back from its probabilities): the ``answer`` head on HotpotQA (precision, with the reference), the
``relevance`` head on TREC DL and MTRAG (relevancy, no reference; the two sets weigh the same). The ``support`` head
keeps its training scale (no development set labels statements). Ranking (every AUC) does not change; the verdict
threshold and the confidences do. A held-out half of the gold data checks the figures this tunes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "out"
HEADS = ("relevance", "answer", "support")
SETS = {"relevance": ("trec_dl", "mtrag"), "answer": ("hotpotqa",)}


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3) -> tuple[float, float]:
    """Weighted logistic regression of y on x (a, b), by Newton's method."""
    a, b = 1.0, 0.0
    X = np.column_stack([x, np.ones_like(x)])
    theta = np.array([a, b])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        g = X.T @ (w * (p - y)) + l2 * np.array([theta[0] - 1.0, 0.0])
        h = (X * (w * p * (1 - p))[:, None]).T @ X + l2 * np.diag([1.0, 0.0])
        step = np.linalg.solve(h, g)
        theta -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(theta[0]), float(theta[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, type=Path)
    ap.add_argument("--model", type=Path, default=DATA / "crossjudge.npz")
    ap.add_argument("--manifest", type=Path, default=DATA / "crossjudge.manifest.json")
    a = ap.parse_args()
    dump = json.loads(a.dump.read_text())
    with np.load(a.model) as z:
        t = {k: z[k] for k in z.files}
    old = t.get("calibration", np.array([[1.0, 0.0]] * len(HEADS), dtype=np.float32)).astype(np.float64)
    new = old.copy()
    report = {}
    for head, sets in SETS.items():
        xs, ys, ws = [], [], []
        for name in sets:
            p = np.clip(np.asarray(dump[name]["conf"], dtype=float), 1e-4, 1 - 1e-4)
            # back to the head's raw logit: the dumped confidences came through the current scaling
            k = HEADS.index(head)
            xs.append((np.log(p / (1 - p)) - old[k, 1]) / old[k, 0])
            ys.append(np.asarray(dump[name]["labels"], dtype=float))
            ws.append(np.full(len(p), 1.0 / len(p)))
        x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
        new[HEADS.index(head)] = fit(x, y, w / w.sum() * len(w))
        report[head] = {"sets": list(sets), "a": round(new[HEADS.index(head), 0], 4),
                        "b": round(new[HEADS.index(head), 1], 4)}
    t["calibration"] = new.astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **t)
    a.model.write_bytes(buf.getvalue())
    m = json.loads(a.manifest.read_text())
    m["head_scaling"] = {"fitted_on": "the development files of ../shared/data (node confidences from "
                                      "benchmarks/agreement.py --dump)", "heads": report}
    m["packed"].update(sha256=hashlib.sha256(a.model.read_bytes()).hexdigest(), bytes=a.model.stat().st_size)
    a.manifest.write_text(json.dumps(m, indent=1) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

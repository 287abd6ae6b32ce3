"""The embedded judges on help-desk pairs (issue 47): node usefulness, question alone, on held-back FAQ pairs of
training/pairs.py --set faq (MedQuAD and doc2dial same-page non-answers, SQuAD 2.0 answers one sentence among others
and unanswerables on their own paragraph, banking77 / clinc150 query paraphrases), read from ../shared/training-data.

    python benchmarks/faq_pairs.py [--data-dir ../shared/training-data] [--per-source 40] [--judge current stacked]
                                   [--cross NPZ] [--stacked-weights JSON]

Only the pairs of held-back groups (pages and intents a second training stage keeps out: ``held_back_groups`` with
train.py's defaults) are drawn, half yes and half no per source where the source has both, at a fixed seed. Prints a
table (accuracy and ROC AUC of the confidence, per source and judge) and, as its last line, one JSON object. It
measures the shipped judges before a second stage is trained and, with ``--cross`` (and the stacked weights fitted for
them, ``--stacked-weights``: calibrate_local.py --cross NPZ --write-stacked JSON), a second stage's weights after.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "training"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agreement import make_judge  # noqa: E402
from pairs import faq, held_back_groups  # noqa: E402
from test_local_obvious import verdict  # noqa: E402


def auc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def draw(data: Path, per_source: int, seed: int) -> list[dict[str, Any]]:
    pairs = list(faq(data, random.Random(13)))
    held = held_back_groups(pairs, 0.05, 13)
    rng = random.Random(seed)
    out = []
    for src in sorted({p["src"] for p in pairs}):
        pool = [p for p in pairs if p["src"] == src and p["group"] in held]
        ys = sorted({p["y"] for p in pool})
        for y in ys:
            some = [p for p in pool if p["y"] == y]
            out += rng.sample(some, min(len(some), per_source // len(ys)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "training-data")
    ap.add_argument("--per-source", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--judge", nargs="+", choices=("current", "stacked"), default=["current", "stacked"])
    ap.add_argument("--cross", default=None, metavar="NPZ", help="the stacked judge with these cross-encoder weights")
    ap.add_argument("--stacked-weights", default=None, metavar="JSON",
                    help="the stacked judge with these fitted weights (calibrate_local.py --write-stacked)")
    a = ap.parse_args()
    rows = draw(a.data_dir, a.per_source, a.seed)
    result: dict[str, Any] = {"pairs": len(rows)}
    print(f"{'judge':10s} {'source':16s} {'pairs':>5s} {'yes':>4s} {'accuracy':>8s} {'auc':>6s}")
    for name in a.judge:
        judge = make_judge(name, a.cross, a.stacked_weights)
        t0 = time.perf_counter()
        got = [(p["src"], p["y"], *verdict(judge, "answers", p["a"], p["b"])) for p in rows]
        figs: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 1)}
        for src in [*sorted({g[0] for g in got}), "all"]:
            sel = [g for g in got if src in ("all", g[0])]
            labels = [g[1] for g in sel]
            acc = sum(g[2] == bool(g[1]) for g in sel) / len(sel)
            figs[src] = {"pairs": len(sel), "yes": sum(labels), "accuracy": round(acc, 3),
                         "auc": round(auc([g[3] for g in sel], labels), 3)}
            print(f"{name:10s} {src:16s} {len(sel):5d} {sum(labels):4d} {acc:8.3f} {figs[src]['auc']:6.3f}")
        result[name] = figs
    print(json.dumps(result))


if __name__ == "__main__":
    main()

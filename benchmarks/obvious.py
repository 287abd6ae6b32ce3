"""The plain one-node cases of tests/obvious_cases.py (issue 34, "Right on the obvious"), judged by the embedded judge
and by the stacked judge with the cross-encoder: the share each gets right, per kind, and the cases each gets wrong.

    python benchmarks/obvious.py [--wrong]

Nothing is fitted on these cases; tests/test_local_obvious.py holds the bar (95%, a strict xfail until it is met) and
the stacked judge's floor.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from obvious_cases import CASES  # noqa: E402
from test_local_obvious import verdict  # noqa: E402

from contextjudge.judges._local import LocalJudge  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wrong", action="store_true", help="list the cases each judge gets wrong")
    args = ap.parse_args()
    kinds = Counter(k for _, k, _, _, _ in CASES)
    for name, judge in (("embedded (model='local')", LocalJudge()),
                        ("stacked (LocalJudge(cross_encoder=True))", LocalJudge(cross_encoder=True))):
        right: Counter[str] = Counter()
        for domain, kind, text, node, expected in CASES:
            got, conf = verdict(judge, kind, text, node)
            right[kind] += got == expected
            if args.wrong and got != expected:
                print(f"  wrong: {domain}/{kind}: {text!r} | {node!r} -> {'yes' if got else 'no'} ({conf:.2f})")
        per_kind = ", ".join(f"{k} {right[k]}/{kinds[k]}" for k in sorted(kinds))
        print(f"{name}: {sum(right.values())}/{len(CASES)} = {sum(right.values()) / len(CASES):.1%} right ({per_kind})")


if __name__ == "__main__":
    main()

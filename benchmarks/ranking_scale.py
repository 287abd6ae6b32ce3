"""The judge-free ranking metrics on long retrievals (issue 48 item 6): seconds per metric per case at k=None.

    python benchmarks/ranking_scale.py [--nodes 2000 8000] [--repeat 3]

One case per size: ``--nodes`` retrieved nodes (every tenth one repeats an earlier chunk, so the "repeats an item
already found" note has work to do), 50 expected ids with graded relevance among them; a second case matches 50
expected texts instead of ids. Each of the seven ranking metrics (hit rate, MRR, precision, recall, MAP, NDCG, ranked
precision) scores it with ``k=None`` (the whole retrieval) through ``metric.measure``; the table gives the slowest
metric's best-of-``--repeat`` seconds per size and matching. The last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _case(n: int, by: str):  # type: ignore[no-untyped-def]
    from contextjudge import LLMTestCase
    from contextjudge.cases.testcase import RetrievedNode

    nodes = [RetrievedNode(id=f"chunk-{(i - 5) if i % 10 == 9 else i}",
                           text=f"passage number {(i - 5) if i % 10 == 9 else i} about refunds") for i in range(n)]
    relevant = list(range(3, n, max(1, n // 50)))[:50]
    if by == "ids":
        return LLMTestCase(input="How do refunds work?", retrieval_context=nodes,
                           expected_context_ids={f"chunk-{i}": 1 + i % 3 for i in relevant})
    return LLMTestCase(input="How do refunds work?", retrieval_context=nodes,
                       context=[f"passage number {i} about refunds" for i in relevant])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2000, 8000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from contextjudge.metrics import (
        HitRateMetric,
        MAPMetric,
        MRRMetric,
        NDCGMetric,
        PrecisionAtKMetric,
        RankedPrecisionMetric,
        RecallAtKMetric,
    )

    kinds = (HitRateMetric, MRRMetric, PrecisionAtKMetric, RecallAtKMetric, MAPMetric, NDCGMetric,
             RankedPrecisionMetric)
    figures = []
    print(f"{'nodes':>6}  {'matched by':<10}  {'slowest metric':<18}  {'seconds':>8}")
    for n in args.nodes:
        for by in ("ids", "texts"):
            tc = _case(n, by)
            worst = ("", 0.0)
            for kind in kinds:
                best = float("inf")
                for _ in range(args.repeat):
                    m = kind()
                    t0 = time.perf_counter()
                    m.measure(tc)
                    best = min(best, time.perf_counter() - t0)
                if m.error:
                    raise SystemExit(f"{m.name} failed: {m.error}")
                if best >= worst[1]:
                    worst = (m.name, best)
            print(f"{n:>6}  {by:<10}  {worst[0]:<18}  {worst[1]:>8.3f}")
            figures.append({"nodes": n, "matched_by": by, "slowest": worst[0], "seconds": round(worst[1], 4)})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

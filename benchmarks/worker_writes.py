"""Results per second of real ``Worker`` objects, judging included, into a throwaway PostgreSQL cluster (fsync on).

    python benchmarks/worker_writes.py [--cases 800]

Each setting queues ``--cases`` cases (ten nodes each) and lets two workers (threads of this process, each its own
queue owner) score them with three metrics and ``contextjudge.testing.FakeJudge`` (offline, deterministic), until the
queue is empty: claims, judging, the store-backed verdict cache and the group commit of the results, all in. Compare
``benchmarks/scale.py --writes``, which times the store's claim and complete without a judge.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from throwaway_pg import ThrowawayPostgres  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from contextjudge import LLMTestCase
    from contextjudge.engine._worker import Worker
    from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
    from contextjudge.store import open_store
    from contextjudge.testing import FakeJudge

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=800)
    args = ap.parse_args(argv)
    print("| --batch | --concurrency | workers | cases | results/s | load avg |\n|---:|---:|---:|---:|---:|---:|")
    with ThrowawayPostgres(prefix="cj-worker-writes-") as pg:
        if pg.url is None:
            raise SystemExit(pg.why)
        for batch, concurrency in ((8, 4), (32, 32)):
            store = open_store(pg.url)
            rid = store.begin_run(f"bench-{batch}-{concurrency}", {"mode": "worker"})
            store.save_cases_queued(rid, [(f"k{i}", i, LLMTestCase(
                input=f"How many vacation days, ticket {i}?", actual_output="25 days.", expected_output="25 days.",
                retrieval_context=[f"Node {k} of ticket {i}: 25 vacation days a year." for k in range(10)]))
                for i in range(args.cases)])
            metrics = [ContextualPrecisionMetric(), ContextualRelevancyMetric(), ContextualRecallMetric()]
            workers = [Worker(open_store(pg.url), metrics, FakeJudge(), batch=batch, concurrency=concurrency,
                              cpus=0, nice=0, poll=0.02, run_id=rid) for _ in range(2)]
            threads = [threading.Thread(target=w.run, kwargs={"once": True}) for w in workers]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            done = store.queue_counts(rid)["done"]
            print(f"| {batch} | {concurrency} | 2 | {done:,} | {done * len(metrics) / wall:,.0f} | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)
            for w in workers:
                w.store.close()
            store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

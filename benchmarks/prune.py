"""Retention on a large store: `store.prune(older_than="90d")` while a worker claims and writes.

    python benchmarks/prune.py [--results 1000000] [--days 120] [--postgres] [--no-sqlite]

For each store (a fresh SQLite file; with ``--postgres`` a database on a throwaway PostgreSQL cluster): ``--results``
synthetic results (two metrics per case) spread over ``--days`` days, written by the database's own bulk insert
(benchmarks/store_read.py's fill), and 2,000 new cases queued. Then a worker thread claims (8 at a time) and completes
queued cases (four results with ten verdicts each) while this process runs ``prune(older_than="90d", dry_run=True)``
and then ``prune(older_than="90d")`` (batches of 500 cases): the table gives the dry run's and the prune's seconds, the cases and results
removed, the store's size before and after, and the worker's claims and completes during the prune with the slowest
one (what the prune made the worker wait, at most). The last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _writer(url: str, stop: threading.Event, out: dict[str, Any]) -> None:
    from contextjudge import LLMTestCase, MetricResult
    from contextjudge.store import open_store

    store = open_store(url)
    rid = store.begin_run("live", {"name": "live", "mode": "worker"})
    store.save_cases_queued(rid, [(f"live{i:05d}", i, LLMTestCase(
        input=f"question {i}", actual_output="a", retrieval_context=[f"node {k}" for k in range(10)]))
        for i in range(2000)])
    results = [MetricResult(name=m, score=0.6, threshold=0.5, success=True,
                            verdicts=[{"id": f"n{k}", "verdict": "yes", "reason": "r"} for k in range(10)])
               for m in ("a", "b", "c", "d")]
    out["ready"].set()
    waits: list[float] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        got = store.claim("bench-worker", limit=8, run_id=rid)
        waits.append(time.perf_counter() - t0)
        if not got:
            time.sleep(0.05)
            continue
        for sc in got:
            t0 = time.perf_counter()
            store.complete("bench-worker", rid, sc.case_key, results)
            waits.append(time.perf_counter() - t0)
            out["completes"] += 1
    out["ops"] = len(waits)
    out["max_wait_s"] = max(waits) if waits else None
    out["p99_wait_s"] = sorted(waits)[int(0.99 * (len(waits) - 1))] if waits else None
    store.close()


def measure(name: str, url: str, size: Any) -> dict[str, Any]:
    from contextjudge.store import open_store

    store = open_store(url)
    row: dict[str, Any] = {"store": name, "load": os.getloadavg()[0]}
    t0 = time.perf_counter()
    dry = store.prune(older_than="90d", dry_run=True)
    row["dry_run_s"] = time.perf_counter() - t0
    stop = threading.Event()
    got: dict[str, Any] = {"ready": threading.Event(), "completes": 0}
    writer = threading.Thread(target=_writer, args=(url, stop, got))
    writer.start()
    got["ready"].wait(120)
    row["bytes_before"] = size()  # the worker's 2,000 new cases included
    t0 = time.perf_counter()
    report = store.prune(older_than="90d")
    row["prune_s"] = time.perf_counter() - t0
    stop.set()
    writer.join(120)
    row.update(cases=report.counts.get("cases", 0), results=report.counts.get("results", 0),
               dry_cases=dry.counts.get("cases", 0), bytes_after=size(), worker_completes=got["completes"],
               worker_ops=got.get("ops"), worker_max_wait_s=got.get("max_wait_s"),
               worker_p99_wait_s=got.get("p99_wait_s"), load_end=os.getloadavg()[0])
    store.close()
    print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    from store_read import fill_pg, fill_sqlite

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=120.0)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory(prefix="cj-prune-") as tmp:
            path = os.path.join(tmp, "big.db")
            fill_sqlite(path, args.results, args.days)

            def sqlite_size() -> int:  # the database file (its write-ahead log is reused, not counted)
                return os.path.getsize(path)
            rows.append(measure("sqlite", path, sqlite_size))
    if args.postgres:
        import psycopg
        from throwaway_pg import ThrowawayPostgres

        with ThrowawayPostgres(prefix="cj-prune-pg-") as pg:
            if pg.url is None:
                raise SystemExit(pg.why)
            admin = pg.url.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute("CREATE DATABASE prune_bench")
            url = pg.url.rsplit("/", 1)[0] + "/prune_bench"
            fill_pg(url, args.results, args.days)

            def pg_size() -> int:
                with psycopg.connect(admin, autocommit=True) as c:
                    return int(c.execute("SELECT pg_database_size('prune_bench')").fetchone()[0])
            rows.append(measure("postgresql", url, pg_size))
    print(f"| store ({args.results:,} results over {args.days:g} days) | dry run s | prune s | cases removed | "
          "results removed | size before MB | after MB | worker completes during | worker's slowest call s | "
          "load avg |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['store']} | {r['dry_run_s']:.1f} | {r['prune_s']:.1f} | {r['cases']:,} | {r['results']:,} | "
              f"{r['bytes_before'] / 1e6:.0f} | {r['bytes_after'] / 1e6:.0f} | {r['worker_completes']:,} | "
              f"{(r['worker_max_wait_s'] or 0):.2f} | {r['load']:.1f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

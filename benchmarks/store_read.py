"""The store's read API on a large store: `trend()` and a full `results()` pass stream, so time grows with the rows
and memory does not.

    python benchmarks/store_read.py [--results 100000 1000000] [--postgres]

For each size: a fresh SQLite file (and, with ``--postgres``, a database on a throwaway PostgreSQL cluster) filled with
that many synthetic results (two metrics per case, spread over 30 days, two retrievers) written by the database's
own bulk insert, then, in this process: ``store.trend(by="day")``, ``store.trend(by="day", where={"retriever": ...})``
and one pass over ``store.results()``, each timed, then run again under ``tracemalloc`` for the peak of Python memory
allocated during it: what the read holds, whatever the store's size. The last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

DAY = 86400.0


def fill_sqlite(path: str, n_results: int) -> None:
    import sqlite3

    import contextjudge

    store = contextjudge.open_store(path)
    run = store.begin_run(None, {"name": "bench"})
    store.close()
    con = sqlite3.connect(path)
    now = time.time()
    cases = n_results // 2
    con.execute("PRAGMA synchronous=OFF")
    rows = ((run, f"c{i:08d}", i, "llm", f"question {i % 500}",
             json.dumps({"input": f"question {i % 500}", "actual_output": "answer", "retrieval_context": ["node"],
                         "additional_metadata": {"retriever": "policy_search" if i % 4 else "faq_search"}}),
             now - 30 * DAY + i * (30 * DAY / cases)) for i in range(cases))
    con.executemany("INSERT INTO cj_cases (run_id, case_key, position, kind, input, data, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    for metric in ("Contextual Relevancy", "Context Utilization"):
        con.execute("INSERT INTO cj_results (run_id, case_key, metric, score, threshold, success, strict_mode, "
                    "evaluation_model, details, created_at) SELECT run_id, case_key, ?, (position % 97) / 96.0, 0.5, "
                    "(position % 97) >= 48, 0, 'contextjudge-local', '{\"judge_identity\": \"x\"}', created_at "
                    "FROM cj_cases", (metric,))
    con.commit()
    con.close()


def fill_pg(url: str, n_results: int) -> None:
    import psycopg

    import contextjudge

    store = contextjudge.open_store(url)
    run = store.begin_run(None, {"name": "bench"})
    store.close()
    now = time.time()
    cases = n_results // 2
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO cj_cases (run_id, case_key, position, kind, input, data, created_at) "
                    "SELECT %(run)s, 'c' || lpad(g::text, 8, '0'), g, 'llm', 'question ' || (g % 500), "
                    "json_build_object('input', 'question ' || (g % 500), 'actual_output', 'answer', "
                    "'retrieval_context', json_build_array('node'), 'additional_metadata', "
                    "json_build_object('retriever', CASE WHEN g % 4 = 0 THEN 'faq_search' ELSE 'policy_search' END)"
                    ")::text, %(t0)s + g * %(step)s FROM generate_series(0, %(n)s - 1) g",
                    {"run": run, "t0": now - 30 * DAY, "step": 30 * DAY / cases, "n": cases})
        for metric in ("Contextual Relevancy", "Context Utilization"):
            cur.execute("INSERT INTO cj_results (run_id, case_key, metric, score, threshold, success, strict_mode, "
                        "evaluation_model, details, created_at) SELECT run_id, case_key, %(m)s, "
                        "(position % 97) / 96.0, 0.5, (position % 97) >= 48, false, 'contextjudge-local', "
                        "'{\"judge_identity\": \"x\"}', created_at FROM cj_cases", {"m": metric})
        conn.commit()


def measure(url: str, memory: bool = True) -> dict[str, Any]:
    import contextjudge

    store = contextjudge.open_store(url, read_only=True)
    out: dict[str, Any] = {}
    for name, fn in (("trend", lambda: store.trend(by="day")),
                     ("trend_filtered", lambda: store.trend(by="day", where={"retriever": "faq_search"})),
                     ("results_pass", lambda: sum(1 for _ in store.results()))):
        t0 = time.perf_counter()
        got = fn()
        wall = time.perf_counter() - t0
        peak = None
        if memory:
            tracemalloc.start()  # a second pass for the memory: tracing slows allocation down several times
            fn()
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        out[name] = {"s": wall, "peak_mb": None if peak is None else peak / 1e6}
        if name == "results_pass":
            out["rows"] = got
        else:
            out[name]["windows"] = len(got.windows)
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="time only (the tracemalloc pass is slow)")
    args = ap.parse_args(argv)
    rows = []
    for n in args.results:
        with tempfile.TemporaryDirectory(prefix="cj-read-") as tmp:
            path = os.path.join(tmp, "big.db")
            t0 = time.perf_counter()
            fill_sqlite(path, n)
            got = measure(path, not args.no_memory)
            rows.append({"store": "sqlite", "results": n, "fill_s": time.perf_counter() - t0, **got})
            print(f"sqlite {n:,}: {json.dumps(got)}", file=sys.stderr, flush=True)
    if args.postgres:
        import psycopg
        from throwaway_pg import ThrowawayPostgres

        with ThrowawayPostgres(prefix="cj-read-pg-") as pg:
            if pg.url is None:
                raise SystemExit(pg.why)
            admin = pg.url.replace("postgresql+psycopg://", "postgresql://")
            for n in args.results:
                db = f"read_{n}"
                with psycopg.connect(admin, autocommit=True) as c:
                    c.execute(f"CREATE DATABASE {db}")
                url = pg.url.rsplit("/", 1)[0] + "/" + db
                fill_pg(url, n)
                got = measure(url, not args.no_memory)
                rows.append({"store": "postgresql", "results": n, **got})
                print(f"postgresql {n:,}: {json.dumps(got)}", file=sys.stderr, flush=True)
    def mb(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    print("| store | results | trend s | trend peak MB | trend with a filter s | peak MB | results() pass s | peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['store']} | {r['results']:,} | {r['trend']['s']:.1f} | {mb(r['trend']['peak_mb'])} | "
              f"{r['trend_filtered']['s']:.1f} | {mb(r['trend_filtered']['peak_mb'])} | {r['results_pass']['s']:.1f} | "
              f"{mb(r['results_pass']['peak_mb'])} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

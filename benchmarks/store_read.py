"""The store's read API on a large store: `trend()`, the drop check and `runs()` aggregate in the database (schema 4),
so memory stays flat; a full `results()` pass streams.

    python benchmarks/store_read.py [--results 100000 1000000] [--postgres] [--results-pass] [--no-sqlite]

For each size: a fresh SQLite file (and, with ``--postgres``, a database on a throwaway PostgreSQL cluster) filled with
that many synthetic results (two metrics per case, spread over ``--days`` days, two retrievers, 500 questions, the
tag "prod" on every other case) written by the database's own bulk insert (``INSERT ... SELECT`` / ``generate_series``),
then, in this process: ``store.trend(by="day")``, ``store.trend(by="day", where={"retriever": ...})``, the same with a
tag filter, the drop check of ``contextjudge trend --fail-on-drop`` (``find_drops``), ``store.runs()`` and, with
``--results-pass``, one pass over ``store.results()``; each timed, then run again under ``tracemalloc`` for the peak of
Python memory allocated during it: what the read holds, whatever the store's size. The last line is the figures as
JSON. The synthetic ``input_key`` is the question's number (the store writes a hash of the normalised input).
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

DAY = 86400.0


def fill_sqlite(path: str, n_results: int, days: float = 30.0) -> None:
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
                         "tags": ["prod"] if i % 2 else [],
                         "additional_metadata": {"retriever": "policy_search" if i % 4 else "faq_search"}}),
             now - days * DAY + i * (days * DAY / cases)) for i in range(cases))
    con.executemany("INSERT INTO cj_cases (run_id, case_key, position, kind, input, data, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    for metric in ("Contextual Relevancy", "Context Utilization"):
        con.execute("INSERT INTO cj_results (run_id, case_key, metric, score, threshold, success, strict_mode, "
                    "evaluation_model, details, created_at, captured_at, retriever, tags, judge_identity, input_key) "
                    "SELECT run_id, case_key, ?, (position % 97) / 96.0, 0.5, (position % 97) >= 48, 0, "
                    "'contextjudge-local', '{\"judge_identity\": \"x\"}', created_at, created_at, "
                    "CASE WHEN position % 4 = 0 THEN 'faq_search' ELSE 'policy_search' END, "
                    "CASE WHEN position % 2 = 1 THEN char(31) || 'prod' || char(31) END, 'x', "
                    "'q' || (position % 500) FROM cj_cases", (metric,))
    con.commit()
    con.close()


def fill_pg(url: str, n_results: int, days: float = 30.0) -> None:
    import psycopg

    import contextjudge

    store = contextjudge.open_store(url)
    run = store.begin_run(None, {"name": "bench"})
    store.close()
    now = time.time()
    cases = n_results // 2
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO cj_cases (run_id, case_key, position, kind, input, data, created_at) "
                    "SELECT %(run)s, 'c' || lpad(g::text, 8, '0'), g, 'llm', 'question ' || (g %% 500), "
                    "json_build_object('input', 'question ' || (g %% 500), 'actual_output', 'answer', "
                    "'retrieval_context', json_build_array('node'), 'tags', CASE WHEN g %% 2 = 1 THEN "
                    "json_build_array('prod') ELSE json_build_array() END, 'additional_metadata', "
                    "json_build_object('retriever', CASE WHEN g %% 4 = 0 THEN 'faq_search' ELSE 'policy_search' END)"
                    ")::text, %(t0)s + g * %(step)s FROM generate_series(0, %(n)s - 1) g",
                    {"run": run, "t0": now - days * DAY, "step": days * DAY / cases, "n": cases})
        for metric in ("Contextual Relevancy", "Context Utilization"):
            cur.execute("INSERT INTO cj_results (run_id, case_key, metric, score, threshold, success, strict_mode, "
                        "evaluation_model, details, created_at, captured_at, retriever, tags, judge_identity, "
                        "input_key) SELECT run_id, case_key, %(m)s, "
                        "(position %% 97) / 96.0, 0.5, (position %% 97) >= 48, false, 'contextjudge-local', "
                        "'{\"judge_identity\": \"x\"}', created_at, created_at, "
                        "CASE WHEN position %% 4 = 0 THEN 'faq_search' ELSE 'policy_search' END, "
                        "CASE WHEN position %% 2 = 1 THEN chr(31) || 'prod' || chr(31) END, 'x', "
                        "'q' || (position %% 500) FROM cj_cases", {"m": metric})
        conn.commit()
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
            c.execute("VACUUM ANALYZE")  # what autovacuum does soon after a bulk load: the planner's statistics


def measure(url: str, memory: bool = True, results_pass: bool = False) -> dict[str, Any]:
    import contextjudge
    from contextjudge.store import find_drops

    store = contextjudge.open_store(url, read_only=True)
    out: dict[str, Any] = {"in_sql": store.in_sql()}
    reads: list[tuple[str, Any]] = [
        ("trend", lambda: store.trend(by="day")),
        ("trend_filtered", lambda: store.trend(by="day", where={"retriever": "faq_search"})),
        ("trend_tag", lambda: store.trend(by="day", where={"tag": "prod"})),
        ("drop_check", lambda: find_drops(store, store.trend(by="day", since="2d"))),
        ("runs", lambda: list(store.runs()))]
    if results_pass:
        reads.append(("results_pass", lambda: sum(1 for _ in store.results())))
    for name, fn in reads:
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
        elif name.startswith("trend"):
            out[name]["windows"] = len(got.windows)
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="time only (the tracemalloc pass is slow)")
    ap.add_argument("--results-pass", action="store_true", help="also time one whole results() pass (slow)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    ap.add_argument("--days", type=float, default=30.0, help="the days the results are spread over")
    args = ap.parse_args(argv)
    rows = []
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr, flush=True)
    for n in [] if args.no_sqlite else args.results:
        with tempfile.TemporaryDirectory(prefix="cj-read-") as tmp:
            path = os.path.join(tmp, "big.db")
            t0 = time.perf_counter()
            fill_sqlite(path, n, args.days)
            fill_s = time.perf_counter() - t0
            got = measure(path, not args.no_memory, args.results_pass)
            rows.append({"store": "sqlite", "results": n, "fill_s": fill_s, "bytes": os.path.getsize(path),
                         "load": os.getloadavg()[0], **got})
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
                t0 = time.perf_counter()
                fill_pg(url, n, args.days)
                fill_s = time.perf_counter() - t0
                with psycopg.connect(admin, autocommit=True) as c:
                    size = c.execute(f"SELECT pg_database_size('{db}')").fetchone()[0]
                got = measure(url, not args.no_memory, args.results_pass)
                rows.append({"store": "postgresql", "results": n, "fill_s": fill_s, "bytes": size,
                             "load": os.getloadavg()[0], **got})
                print(f"postgresql {n:,}: {json.dumps(got)}", file=sys.stderr, flush=True)
    def mb(x: Any) -> str:
        return "-" if x is None else f"{x:.1f}"

    def cell(r: dict[str, Any], name: str) -> str:
        got = r.get(name)
        if got is None:
            return "-"
        return f"{got['s']:.2f} ({mb(got['peak_mb'])} MB)"

    print("| store | results | trend by day s (peak) | with a retriever filter | with a tag filter | drop check | "
          "runs() | results() pass | load avg |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['store']} | {r['results']:,} | {cell(r, 'trend')} | {cell(r, 'trend_filtered')} | "
              f"{cell(r, 'trend_tag')} | {cell(r, 'drop_check')} | {cell(r, 'runs')} | {cell(r, 'results_pass')} | "
              f"{r['load']:.1f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

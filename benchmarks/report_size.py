"""`contextjudge report`, `compare` and `export` on a large run, and the page opened in headless Chromium.

    python benchmarks/report_size.py [--cases 100000] [--nodes 3] [--no-browser]

A fresh SQLite store holds two runs of ``--cases`` synthetic cases each (``--nodes`` ranked nodes per case, two
metrics per case, one verdict per node per metric), written by SQLite's own bulk insert (``WITH RECURSIVE``); the
second run scores a third of the cases lower. Then, each in a fresh process (so its peak memory is its own): the
report of the second run (``contextjudge report``), the report compared with the first (``--compare``), ``compare``
printed, and ``export`` (JSONL) to /dev/null; each with its wall time, its peak resident memory (ru_maxrss) and the
page's size. With Chromium installed, the time headless Chromium takes to load each page and dump its DOM (the
page's one script included). The last line is the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def fill(path: str, cases: int, nodes: int) -> None:
    import contextjudge

    store = contextjudge.open_store(path)
    for run in ("base", "cur"):
        store.begin_run(run, {"name": run})
        store.end_run(run, {})
    store.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA synchronous=OFF")
    seq = "WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < ?) "
    for run in ("base", "cur"):
        con.execute(seq + "INSERT INTO cj_cases (run_id, case_key, position, kind, input, actual_output, data, "
                    "created_at) SELECT ?, printf('k%07d', i), i, 'llm', 'question ' || i, 'answer ' || i, "
                    "json_object('input', 'question ' || i, 'actual_output', 'answer ' || i, 'retrieval_context', "
                    "json_array('first node of case ' || i, 'second node', 'third node')), 1.7e9 + i FROM g",
                    (cases - 1, run))
        for r in range(1, nodes + 1):
            con.execute("INSERT INTO cj_nodes (run_id, case_key, turn, rank, node_id, text, score, node_metadata) "
                        "SELECT run_id, case_key, 0, ?, 'n' || ?, 'node ' || ? || ' of ' || case_key, 0.5, '{}' "
                        "FROM cj_cases WHERE run_id = ?", (r, r, r, run))
        for metric in ("Contextual Relevancy", "Contextual Precision"):
            low = "- CASE WHEN position % 3 = 0 THEN 0.3 ELSE 0 END" if run == "cur" else ""
            con.execute("INSERT INTO cj_results (run_id, case_key, metric, score, threshold, success, strict_mode, "
                        "reason, evaluation_model, usage, details, created_at, captured_at, judge_identity, "
                        f"input_key) SELECT run_id, case_key, ?, max(0, (position % 101) / 100.0 {low}), 0.5, "
                        f"max(0, (position % 101) / 100.0 {low}) >= 0.5, 0, 'because', 'local', '{{}}', "
                        "'{\"judge_identity\": \"x\"}', created_at, created_at, 'x', case_key FROM cj_cases "
                        "WHERE run_id = ?", (metric, run))
            for r in range(1, nodes + 1):
                con.execute("INSERT INTO cj_verdicts (run_id, case_key, metric, position, item_id, rank, verdict, "
                            "reason, data) SELECT run_id, case_key, ?, ?, 'n' || ?, ?, CASE WHEN position % 2 = 0 "
                            "THEN 'yes' ELSE 'no' END, 'a reason', json_object('id', 'n' || ?, 'rank', ?, "
                            "'verdict', CASE WHEN position % 2 = 0 THEN 'yes' ELSE 'no' END, 'reason', 'a reason') "
                            "FROM cj_cases WHERE run_id = ?", (metric, r - 1, r, r, r, r, run))
    con.commit()
    con.close()


_CHILD = """
import resource, sys, time
from contextjudge.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
print("CJ-BENCH", rc, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def timed(argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("CJ-BENCH")]
    if not line:
        raise RuntimeError(done.stderr[-2000:])
    _, rc, wall, rss = line[-1].split()
    return {"rc": int(rc), "s": float(wall), "peak_mb": int(rss) / 1024}


def browser(page: str, tmp: str) -> float | None:
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                  None)
    if binary is None:
        return None
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp}/profile",
           "--dump-dom", f"file://{page}"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "HOME": tmp})
    wall = time.perf_counter() - t0
    return wall if "</html>" in done.stdout or "<body" in done.stdout else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args(argv)
    out: dict = {"cases": args.cases, "nodes": args.nodes, "load_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="cj-report-") as tmp:
        db = os.path.join(tmp, "big.db")
        t0 = time.perf_counter()
        fill(db, args.cases, args.nodes)
        out["fill_s"] = time.perf_counter() - t0
        out["store_bytes"] = os.path.getsize(db)
        pages = {"report": os.path.join(tmp, "report.html"), "report_compare": os.path.join(tmp, "compare.html")}
        steps = {"report": ["report", "cur", "--store", db, "-o", pages["report"]],
                 "report_compare": ["report", "cur", "--store", db, "--compare", "base", "-o",
                                    pages["report_compare"]],
                 "compare": ["compare", "base", "cur", "--store", db],
                 "export": ["export", "cur", "--store", db, "-o", os.devnull]}
        for name, argv_ in steps.items():
            got = timed(argv_)
            if name in pages:
                got["page_bytes"] = os.path.getsize(pages[name])
                if not args.no_browser:
                    got["browser_s"] = browser(pages[name], tmp)
            out[name] = got
            print(f"{name}: {json.dumps(got)}", file=sys.stderr, flush=True)
    out["load_end"] = os.getloadavg()[0]

    def cell(d: dict, key: str, fmt: str) -> str:
        v = d.get(key)
        return "-" if v is None else format(v, fmt)

    print(f"| step ({args.cases:,} cases, {args.nodes} nodes, 2 metrics) | s | peak MB | page MB | Chromium load s |")
    print("|---|---:|---:|---:|---:|")
    for name in ("report", "report_compare", "compare", "export"):
        d = out[name]
        page = d.get("page_bytes")
        print(f"| {name} | {d['s']:.1f} | {d['peak_mb']:.0f} | {'-' if page is None else f'{page / 1e6:.1f}'} | "
              f"{cell(d, 'browser_s', '.1f')} |")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The MCP server's answers on a large run: they stay bounded, and how long the tools take to compute them.

    python benchmarks/mcp_answers.py [--results 20000 100000] [--load-only]

For each size: a fresh SQLite store filled by ``store_read.fill_sqlite`` (one run, two metrics per case, written by
SQLite's bulk insert), then, in this process, ``store.load_run`` (what ``run_summary``, ``worst_cases`` and
``compare_runs`` read) and the tools ``run_summary``, ``worst_cases`` (default budget, then the next page by its
cursor) and ``compare_runs`` (the run against itself), each timed, with the size of its answer as JSON.
``--load-only`` times ``load_run`` alone (it runs on any checkout, to compare versions). The last line is the figures
as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, nargs="+", default=[20000])
    ap.add_argument("--load-only", action="store_true")
    args = ap.parse_args()
    from store_read import fill_sqlite

    import contextjudge

    out = []
    for n in args.results:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.db")
            fill_sqlite(path, n)
            store = contextjudge.open_store(path, read_only=True)
            t = time.perf_counter()
            result = store.load_run(None)
            row = {"results": n, "cases": len(result), "load_run_s": round(time.perf_counter() - t, 2)}
            store.close()
            if not args.load_only:
                from contextjudge.cli._mcp_tools import Tools

                tools = Tools(path, root=tmp)
                calls = (("run_summary", tools.run_summary, {}), ("worst_cases", tools.worst_cases, {}),
                         ("compare_runs", tools.compare_runs, {"baseline": result.run_id}))
                for name, call, kwargs in calls:
                    t = time.perf_counter()
                    answer = call(**kwargs)
                    row[f"{name}_s"] = round(time.perf_counter() - t, 2)
                    row[f"{name}_chars"] = len(json.dumps(answer))
                    if name == "worst_cases":
                        row["worst_cases_shown"] = len(answer["cases"])
                        nxt = tools.worst_cases(cursor=answer["next_cursor"])
                        row["next_page_offset"] = nxt["offset"]
                tools.close()
            print(row, flush=True)
            out.append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

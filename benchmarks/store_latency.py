"""Judge throughput with a results store: does the event loop wait on the store?

    python benchmarks/store_latency.py [--cases 100] [--latency 0.2] [--stores none,sqlite,pg] [--rtt 0]
                                       [--before PATH_TO_OTHER_SRC] [--json OUT.json]

A loopback OpenAI-compatible server (``tests/fault_server.py``) answers every judge call after ``--latency``
seconds, through ``ChatOpenAI(base_url=...)``. ``--cases`` synthetic cases (five nodes each) are scored with three
retrieval metrics (contextual precision, recall, relevancy) in one ``aevaluate()`` at its defaults, twice on the
same store: first with an empty verdict cache (every verdict is judged, then written to the store's cache), then
again with every verdict in the store's cache (the second run's judge calls are all cache reads). The stores: none,
a SQLite file, and PostgreSQL (a throwaway cluster on loopback, ``tests/throwaway_pg.py``, fsync on as a server
runs; a fresh database for every configuration). ``--rtt`` adds that many seconds to every store transaction, as a
database on another host would (a subclass of the store whose ``_begin`` sleeps first).

Each configuration runs in a process of its own. ``--before PATH`` also runs every configuration on another copy of
contextjudge's ``src/`` (e.g. main's, from ``git archive``), for a before/after table. The columns: wall time of the
run, cases per second, wall over the ideal (judge calls x latency / judge calls in flight), and the event loop's
longest stall (a task that asks to wake every 10 ms: how late it woke at worst).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the loopback server and the throwaway cluster are test helpers


def _verdict(text: str, _: str) -> str:
    return "yes" if zlib.crc32(text.encode()) % 3 == 0 else "no"


def _cases(n: int) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        topic = f"topic {i}"
        out.append({
            "input": f"What does the report say about {topic}?",
            "actual_output": f"The report says {topic} grew by {i % 7 + 2} percent in the last quarter.",
            "expected_output": f"It grew by {i % 7 + 2} percent.",
            "retrieval_context": [f"Node {k} about {topic}: figures for quarter {k}, region {i % 5}, "
                                  f"growth {(i + k) % 9} percent." for k in range(5)],
        })
    return out


# ------------------------------------------------------------------------------------------------ one configuration
def child(args: argparse.Namespace) -> dict[str, object]:
    """Run one configuration in this process and return its row."""
    from langchain_openai import ChatOpenAI

    import contextjudge
    from contextjudge import JudgeOptions, LLMTestCase, aevaluate
    from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric

    store = None
    if args.store_url:
        from contextjudge.store import ResultsStore

        rtt = args.rtt

        class DistantStore(ResultsStore):
            """A store whose every transaction pays one network round trip first."""

            def _begin(self, write: bool = True):  # type: ignore[no-untyped-def]
                time.sleep(rtt)
                return super()._begin(write)

        store = (DistantStore if rtt > 0 else ResultsStore)(args.store_url)
    judge = ChatOpenAI(model="gpt-4.1-mini", base_url=args.base_url, api_key="sk-fake", temperature=0)
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
               ContextualRelevancyMetric(model=judge)]
    cases = [LLMTestCase(**c) for c in _cases(args.cases)]  # type: ignore[arg-type]
    opts = JudgeOptions()

    async def once() -> dict[str, float]:
        lag = [0.0]
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                lag[0] = max(lag[0], time.perf_counter() - t - 0.01)

        tick = asyncio.ensure_future(ticker())
        t0 = time.perf_counter()
        result = await aevaluate(cases, metrics, judge_options=opts, store=store, show_progress=False)
        wall = time.perf_counter() - t0
        done.set()
        await tick
        errors = sum(1 for tr in result.test_results for m in tr.metrics_data if m.error)
        return {"wall": wall, "calls": result.usage.calls, "hits": result.usage.cache_hits, "lag": lag[0],
                "errors": errors}

    async def both() -> list[dict[str, float]]:
        return [await once(), await once()]

    cold, warm = asyncio.run(both())
    return {"code": args.label, "store": args.store_name, "rtt": args.rtt, "cases": args.cases,
            "latency": args.latency, "concurrency": opts.max_concurrency, "cold": cold, "warm": warm,
            "contextjudge": str(Path(contextjudge.__file__).parent)}


# ------------------------------------------------------------------------------------------------ the parent
def _fresh_database(admin_url: str, name: str) -> str:
    import psycopg

    plain = admin_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + "/" + name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the judge takes for every call")
    ap.add_argument("--stores", default="none,sqlite,pg", help="which stores, comma-separated: none, sqlite, pg")
    ap.add_argument("--rtt", type=float, default=0.0, help="seconds added to every store transaction")
    ap.add_argument("--before", type=Path, help="another contextjudge src/ folder to run the same configurations on")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    # the child's arguments
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    ap.add_argument("--store-url", help=argparse.SUPPRESS)
    ap.add_argument("--store-name", help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0

    from fault_server import FaultServer
    from throwaway_pg import ThrowawayPostgres

    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    trees = [("after", ROOT / "src")] + ([("before", args.before.resolve())] if args.before else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="cj-store-lat-") as tmp, \
            FaultServer(verdict=_verdict, latency=args.latency, lifetime=7200) as srv, \
            ThrowawayPostgres(fsync=True) as pg:
        if "pg" in stores and pg.url is None:
            raise SystemExit(f"no PostgreSQL: {pg.why}")
        for store in stores:
            for label, src in trees:
                name = f"cj_{label}_{store}"
                url = ("" if store == "none" else str(Path(tmp) / f"{name}.db") if store == "sqlite"
                       else _fresh_database(pg.url, name))  # type: ignore[arg-type]
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
                cmd = [sys.executable, __file__, "--child", "--base-url", srv.url, "--store-url", url,
                       "--store-name", store, "--label", label, "--cases", str(args.cases),
                       "--latency", str(args.latency), "--rtt", str(args.rtt)]
                srv.reset()
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"{label} {store} failed:\n{out.stderr[-3000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                if not row["contextjudge"].startswith(str(src)):
                    raise SystemExit(f"{label} ran {row['contextjudge']}, not {src}")
                rows.append(row)
                print(f"  {label} {store}: cold {row['cold']['wall']:.2f}s, warm {row['warm']['wall']:.2f}s",
                      file=sys.stderr)
    print(render(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def render(rows: list[dict], args: argparse.Namespace) -> str:
    """The rows as a markdown table."""
    lines = [f"{args.cases} cases x 3 metrics, judge latency {args.latency * 1000:.0f} ms"
             + (f", {args.rtt * 1000:.1f} ms added per store transaction" if args.rtt else "") + ":", "",
             "| code | store | verdict cache | wall (s) | cases/s | wall / ideal | longest loop stall (ms) | "
             "judge calls | cache hits | errors |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        for phase in ("cold", "warm"):
            p = r[phase]
            ideal = p["calls"] * r["latency"] / r["concurrency"]
            ratio = f"{p['wall'] / ideal:.2f}" if p["calls"] else "-"
            lines.append(f"| {r['code']} | {r['store']} | {'empty' if phase == 'cold' else 'full'} | "
                         f"{p['wall']:.2f} | {r['cases'] / p['wall']:.1f} | {ratio} | {p['lag'] * 1000:.0f} | "
                         f"{p['calls']} | {p['hits']} | {p['errors']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Throughput against a judge with a fixed latency: wall time vs the ideal, and vs DeepEval's and Ragas' evaluate().

    python benchmarks/throughput.py --data-dir ../shared/data [--cases 200] [--nodes 5] [--latency 0.2] [--peers]

A loopback OpenAI-compatible server (``tests/fault_server.py``) answers every call after a fixed ``--latency``
and never limits concurrency. contextjudge scores ``--cases`` HotpotQA cases with its 4 retrieval metrics in one
``evaluate()`` at its defaults; its ideal wall time is ``calls x latency / max_concurrency`` (judge calls in flight
per model, ``JudgeOptions.max_concurrency``). With ``--peers`` the same cases go through DeepEval's ``evaluate()``
(ContextualPrecision/Recall/Relevancy) and Ragas' ``evaluate()`` (context precision with and without reference,
context recall), each at its defaults, in venvs under ``--cache-dir``. Every tool runs in its own process; the
table gives wall time inside ``evaluate()``, calls, peak calls in flight, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the loopback server is a test helper, not part of the installed package: it lives in the repository's tests/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _peers.common import default_cache_dir, load_hotpot, peer_python, run_tool  # noqa: E402
from fault_server import FaultServer  # noqa: E402

RUNS = {
    "contextjudge": ("precision,recall,relevancy,utilization", "Precision, Recall, Relevancy, Utilization"),
    "deepeval": ("precision,recall,relevancy", "ContextualPrecision, ContextualRecall, ContextualRelevancy"),
    "ragas": ("precision_ref,precision_noref,recall", "ContextPrecision with/without reference, ContextRecall"),
}


def _verdict(text: str, _: str) -> str:
    return "yes" if zlib.crc32(text.encode()) % 3 == 0 else "no"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="folder holding hotpotqa_dev.jsonl")
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds the server takes for every call")
    ap.add_argument("--max-concurrency", type=int, default=None,
                    help="contextjudge judge calls in flight (default: JudgeOptions' default)")
    ap.add_argument("--peers", action="store_true", help="also run DeepEval and Ragas (creates their venvs)")
    ap.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    tools = [("contextjudge", sys.executable)]
    if args.peers:
        tools += [("deepeval", str(peer_python("deepeval", args.cache_dir))),
                  ("ragas", str(peer_python("ragas", args.cache_dir)))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="cj-tput-") as tmp, FaultServer(verdict=_verdict, latency=args.latency,
                                                                            lifetime=7200) as srv:
        work = Path(tmp)
        cases_file = work / "cases.json"
        cases_file.write_text(json.dumps(load_hotpot(args.data_dir, args.cases, args.nodes)))
        for tool, py in tools:
            metrics, label = RUNS[tool]
            srv.reset()
            extra = ["--max-concurrency", str(args.max_concurrency)] if tool == "contextjudge" and \
                args.max_concurrency else []
            s = run_tool(tool, py, cases_file, srv.url, metrics, work, extra=extra)
            t = srv.totals()
            row = {"tool": tool, "metrics": label, "cases": s["cases"], "elapsed": s["elapsed"],
                   "calls": t["calls"], "peak_inflight": srv.peak_inflight, "peak_rss_mb": s["peak_rss_mb"],
                   "scores": s["scores"], "failed": s["n_errors"] + s["missing"], "errors": s.get("errors", [])}
            if tool == "contextjudge":
                row["concurrency"] = s["max_concurrency"]
                row["ideal"] = t["calls"] * args.latency / s["max_concurrency"]
            rows.append(row)
            print(f"  {tool}: {row['elapsed']:.1f}s, {row['calls']} calls, peak {row['peak_inflight']} in flight, "
                  f"{row['peak_rss_mb']:.0f} MB, failed {row['failed']}", file=sys.stderr)
    print(render(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def render(rows: list[dict], args: argparse.Namespace) -> str:
    out = [f"Throughput: {args.cases} HotpotQA cases x {args.nodes} nodes, judge latency {args.latency * 1000:.0f} ms "
           "per call (loopback server, unlimited server concurrency); each tool at its defaults", "",
           "| tool | metrics | wall time in evaluate() | judge calls | calls/s | peak calls in flight | "
           "peak RSS | scores | failed |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['tool']} | {r['metrics']} | {r['elapsed']:.1f} s | {r['calls']} | "
                   f"{r['calls'] / r['elapsed']:.1f} | {r['peak_inflight']} | {r['peak_rss_mb']:.0f} MB | "
                   f"{r['scores']} | {r['failed']} |")
    ours = rows[0]
    ratio = ours["elapsed"] / ours["ideal"]
    # a short run pays the first wave (the structured-output probe of a new judge, the first connections) over
    # fewer calls: issue 27 asks 1.3x at 20 cases, 1.15x from 100
    target = 1.3 if args.cases <= 20 else 1.15
    out += ["", f"contextjudge: ideal = {ours['calls']} calls x {args.latency:g} s / {ours['concurrency']} in flight = "
                f"{ours['ideal']:.1f} s; measured {ours['elapsed']:.1f} s = {ratio:.2f}x the ideal "
                f"(target <= {target:g}x: {'met' if ratio <= target else 'MISSED'})"]
    for r in rows[1:]:
        faster = ours["elapsed"] < r["elapsed"]
        out.append(f"vs {r['tool']}: {r['elapsed']:.1f} s / {ours['elapsed']:.1f} s = "
                   f"{r['elapsed'] / ours['elapsed']:.2f}x (target: contextjudge faster: "
                   f"{'met' if faster else 'MISSED'})")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

"""Judge cost per test case: calls, prompt tokens and completion tokens, contextjudge vs DeepEval and Ragas.

    python benchmarks/judge_cost.py --data-dir ../shared/data [--cases 20] [--nodes 5,10] [--peers]

Every tool runs in its own process against one loopback OpenAI-compatible server (``tests/fault_server.py``),
which answers every prompt with plausible JSON built from the structure the prompt asks for and counts calls and
tokens with tiktoken's o200k_base encoding (offline: the file bundled in llama-index-core). Prompt tokens are the
messages' text plus 4 per message (the "message tokens" column), and the JSON schema of a json_schema response format
or of the tools when sent (the "schema tokens" column); providers bill both as prompt tokens.
Completion tokens are the server's answers, whose verdicts carry the same one-sentence reason for every tool.

Each metric runs on its own, so no tool gets verdicts from another metric's cache. With ``--peers`` the script creates
venvs for DeepEval and Ragas under ``--cache-dir`` (default ~/.cache/contextjudge-bench) with telemetry off, and runs
DeepEval's ContextualPrecision/Recall/Relevancy and Ragas' LLMContextPrecisionWithReference,
LLMContextPrecisionWithoutReference and LLMContextRecall at their defaults; with ``--answer`` also the answer metrics:
contextjudge's FaithfulnessMetric and AnswerRelevancyMetric (and all six judged metrics in one evaluate()), DeepEval's
FaithfulnessMetric and AnswerRelevancyMetric, Ragas' ContextRelevance, Faithfulness and ResponseRelevancy (its
questions embedded by an offline stand-in: embedding calls are not judge calls).
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

from _peers.common import default_cache_dir, load_hotpot, peer_python, run_tool, token_counter  # noqa: E402
from fault_server import FaultServer  # noqa: E402

OURS = ["precision", "recall", "relevancy", "utilization"]
DEEPEVAL = ["precision", "recall", "relevancy"]
RAGAS = ["precision_ref", "precision_noref", "recall"]
ANSWER = {"contextjudge": ["faithfulness", "answer_relevancy"], "deepeval": ["faithfulness", "answer_relevancy"],
          "ragas": ["relevance", "faithfulness", "answer_relevancy"]}
SIX = ",".join(OURS + ANSWER["contextjudge"])
LABEL = {
    ("contextjudge", "precision"): "ContextualPrecisionMetric",
    ("contextjudge", "recall"): "ContextualRecallMetric",
    ("contextjudge", "relevancy"): "ContextualRelevancyMetric",
    ("contextjudge", "utilization"): "ContextUtilizationMetric",
    ("contextjudge", "precision,recall,relevancy,utilization"): "all 4 in one evaluate()",
    ("contextjudge", "faithfulness"): "FaithfulnessMetric",
    ("contextjudge", "answer_relevancy"): "AnswerRelevancyMetric",
    ("contextjudge", SIX): "all 6 judged in one evaluate()",
    ("deepeval", "faithfulness"): "FaithfulnessMetric",
    ("deepeval", "answer_relevancy"): "AnswerRelevancyMetric",
    ("ragas", "relevance"): "ContextRelevance",
    ("ragas", "faithfulness"): "Faithfulness",
    ("ragas", "answer_relevancy"): "ResponseRelevancy",
    ("deepeval", "precision"): "ContextualPrecisionMetric",
    ("deepeval", "recall"): "ContextualRecallMetric",
    ("deepeval", "relevancy"): "ContextualRelevancyMetric",
    ("ragas", "precision_ref"): "LLMContextPrecisionWithReference",
    ("ragas", "precision_noref"): "LLMContextPrecisionWithoutReference",
    ("ragas", "recall"): "LLMContextRecall",
}


def _verdict(text: str, _: str) -> str:
    return "yes" if zlib.crc32(text.encode()) % 3 == 0 else "no"  # deterministic, about a third "yes"


def measure(tool: str, python: str, metrics: str, cases_file: Path, n: int, srv: FaultServer, work: Path) -> dict:
    srv.reset()
    summary = run_tool(tool, python, cases_file, srv.url, metrics, work)
    t = srv.totals()
    failed = summary["n_errors"] + summary["missing"]
    return {"tool": tool, "metric": metrics, "label": LABEL.get((tool, metrics), metrics), "cases": n,
            "calls": t["calls"] / n, "prompt_tokens": t["prompt_tokens"] / n,
            "message_tokens": t["message_tokens"] / n, "schema_tokens": t["schema_tokens"] / n,
            "completion_tokens": t["completion_tokens"] / n, "failed": failed, "errors": summary.get("errors", [])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="folder holding hotpotqa_dev.jsonl")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--nodes", default="5,10", help="retrieval sizes, comma separated")
    ap.add_argument("--peers", nargs="?", const="deepeval,ragas", default="",
                    help="also measure these peers (default when given alone: deepeval,ragas; creates their venvs)")
    ap.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--answer", action="store_true",
                    help="also the answer metrics (faithfulness, answer relevancy) and all six judged metrics at once")
    ap.add_argument("--only-answer", action="store_true", help="only the answer metrics and the six at once")
    args = ap.parse_args(argv)

    count = token_counter()
    tools = [("contextjudge", sys.executable)]
    for peer in [p for p in args.peers.split(",") if p]:
        tools.append((peer, str(peer_python(peer, args.cache_dir))))
    rows = []
    with tempfile.TemporaryDirectory(prefix="cj-cost-") as tmp, FaultServer(verdict=_verdict, count_tokens=count,
                                                                            lifetime=7200) as srv:
        work = Path(tmp)
        for k in [int(x) for x in args.nodes.split(",")]:
            cases_file = work / f"cases-{k}.json"
            cases_file.write_text(json.dumps(load_hotpot(args.data_dir, args.cases, k)))
            for tool, py in tools:
                metrics = {"contextjudge": OURS + [",".join(OURS)], "deepeval": DEEPEVAL, "ragas": RAGAS}[tool]
                if args.only_answer:
                    metrics = []
                if args.answer or args.only_answer:
                    metrics = metrics + ANSWER[tool] + ([SIX] if tool == "contextjudge" else [])
                for m in metrics:
                    row = measure(tool, py, m, cases_file, args.cases, srv, work)
                    row["nodes"] = k
                    rows.append(row)
                    print(f"  {k:>2} nodes  {tool:<12} {row['label']:<38} calls/case {row['calls']:6.2f}  "
                          f"prompt tok/case {row['prompt_tokens']:8.0f}  completion tok/case "
                          f"{row['completion_tokens']:6.0f}  failed {row['failed']}", file=sys.stderr)
    print(render(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _sum(rows: list[dict], tool: str, k: int, metrics: list[str], key: str) -> float:
    return sum(r[key] for r in rows if r["tool"] == tool and r["nodes"] == k and r["metric"] in metrics)


def render(rows: list[dict], args: argparse.Namespace) -> str:
    out = [f"Judge cost per test case: HotpotQA dev, first {args.cases} questions, o200k_base tokens "
           "(loopback server, each metric run alone)", "",
           "| nodes | tool | metric | calls/case | message tokens/case | schema tokens/case | completion tokens/case "
           "| failed |", "|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['nodes']} | {r['tool']} | {r['label']} | {r['calls']:.2f} | {r['message_tokens']:,.0f} | "
                   f"{r['schema_tokens']:,.0f} | {r['completion_tokens']:,.0f} | {r['failed']} |")
    out.append("")
    for k in sorted({r["nodes"] for r in rows}):
        six = [r for r in rows if r["tool"] == "contextjudge" and r["nodes"] == k and r["metric"] == SIX]
        if six:
            out.append(f"{k} nodes: contextjudge, all 6 judged metrics: {six[0]['calls']:.2f} calls/case, "
                       f"{six[0]['prompt_tokens']:,.0f} prompt tokens/case (target: at most 6 calls) -> "
                       f"{'met' if six[0]['calls'] <= 6 + 1e-9 else 'MISSED'}")
        for tool, names in (("deepeval", ["precision", "recall", "relevancy", "faithfulness", "answer_relevancy"]),
                            ("ragas", ["precision_ref", "precision_noref", "recall", "relevance", "faithfulness",
                                       "answer_relevancy"])):
            have = [r for r in rows if r["tool"] == tool and r["nodes"] == k and r["metric"] in names]
            if len(have) == len(names):
                out.append(f"{k} nodes: {tool}, its {len(names)} RAG metrics each run alone: "
                           f"{sum(r['calls'] for r in have):.2f} calls/case, "
                           f"{sum(r['prompt_tokens'] for r in have):,.0f} prompt tokens/case")
        if not any(r["metric"] == "precision" and r["tool"] == "contextjudge" and r["nodes"] == k for r in rows):
            continue
        three = ["precision", "recall", "relevancy"]
        ours_calls = _sum(rows, "contextjudge", k, three, "calls")
        ours_prompt = _sum(rows, "contextjudge", k, three, "prompt_tokens")
        ours_comp = _sum(rows, "contextjudge", k, three, "completion_tokens")
        all4 = _sum(rows, "contextjudge", k, [",".join(OURS)], "calls")
        out.append(f"{k} nodes: contextjudge, all 4 metrics: {all4:.2f} calls/case "
                   f"(target: at most 4, one per verdict family) -> {'met' if all4 <= 4 + 1e-9 else 'MISSED'}")
        if any(r["tool"] == "deepeval" and r["nodes"] == k for r in rows):
            de_calls = _sum(rows, "deepeval", k, three, "calls")
            de_prompt = _sum(rows, "deepeval", k, three, "prompt_tokens")
            de_comp = _sum(rows, "deepeval", k, three, "completion_tokens")
            ours_msg = _sum(rows, "contextjudge", k, three, "message_tokens")
            de_msg = _sum(rows, "deepeval", k, three, "message_tokens")
            pr, mr, cr = ours_prompt / de_prompt, ours_msg / de_msg, ours_calls / de_calls
            out.append(f"{k} nodes: precision+recall+relevancy vs DeepEval: calls {ours_calls:.2f} vs {de_calls:.2f} "
                       f"= {cr:.2f}x (target <= 0.33: {'met' if cr <= 1 / 3 + 1e-9 else 'MISSED'}); message tokens "
                       f"{ours_msg:,.0f} vs {de_msg:,.0f} = {mr:.2f}x (target <= 0.45: "
                       f"{'met' if mr <= 0.45 else 'MISSED'}); with the schemas {ours_prompt:,.0f} vs "
                       f"{de_prompt:,.0f} = {pr:.2f}x; completion tokens {ours_comp:,.0f} vs {de_comp:,.0f} "
                       f"= {ours_comp / de_comp:.2f}x")
        if any(r["tool"] == "ragas" and r["nodes"] == k for r in rows):
            two = ["precision", "recall"]
            oc, op = _sum(rows, "contextjudge", k, two, "calls"), _sum(rows, "contextjudge", k, two, "prompt_tokens")
            rc = _sum(rows, "ragas", k, ["precision_ref", "recall"], "calls")
            rp = _sum(rows, "ragas", k, ["precision_ref", "recall"], "prompt_tokens")
            out.append(f"{k} nodes: precision+recall vs Ragas (with reference): calls {oc:.2f} vs {rc:.2f} = "
                       f"{oc / rc:.2f}x; prompt tokens {op:,.0f} vs {rp:,.0f} = {op / rp:.2f}x")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

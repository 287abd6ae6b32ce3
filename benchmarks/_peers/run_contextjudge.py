"""Run contextjudge's judged metrics (the four retrieval metrics, faithfulness, answer relevancy) on benchmark cases in a process of its own (like the peers).

Usage: python run_contextjudge.py CASES.json OUT.json --base-url URL [--metrics precision,recall,relevancy,utilization]
[--separate] [--max-concurrency N]. With --separate each metric runs alone (no verdicts shared between metrics).
"""

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--metrics", default="precision,recall,relevancy,utilization")
    ap.add_argument("--max-concurrency", type=int, default=None, help="judge calls in flight (default: JudgeOptions)")
    args = ap.parse_args()

    from langchain_openai import ChatOpenAI

    from contextjudge import JudgeOptions, LLMTestCase, evaluate
    from contextjudge.metrics import (
        AnswerRelevancyMetric,
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
        FaithfulnessMetric,
    )

    rows = json.loads(Path(args.cases).read_text())
    cases = [LLMTestCase(input=r["input"], actual_output=r["actual_output"], expected_output=r["expected_output"],
                         retrieval_context=r["retrieval_context"]) for r in rows]
    judge = ChatOpenAI(model="gpt-4.1-mini", base_url=args.base_url, api_key="sk-fake", temperature=0)
    classes = {"precision": ContextualPrecisionMetric, "recall": ContextualRecallMetric,
               "relevancy": ContextualRelevancyMetric, "utilization": ContextUtilizationMetric,
               "faithfulness": FaithfulnessMetric, "answer_relevancy": AnswerRelevancyMetric}
    metrics = [classes[m](model=judge) for m in args.metrics.split(",")]
    opts = JudgeOptions() if args.max_concurrency is None else JudgeOptions(max_concurrency=args.max_concurrency)
    t0 = time.perf_counter()
    result = evaluate(cases, metrics, judge_options=opts, show_progress=False)
    elapsed = time.perf_counter() - t0
    scores, errors = 0, []
    for tr in result.test_results:
        for m in tr.metrics_data:
            if m.error or m.score is None or math.isnan(m.score):
                errors.append((m.error or "no score")[:200])
            else:
                scores += 1
    expected = len(cases) * len(metrics)
    Path(args.out).write_text(json.dumps({"tool": "contextjudge", "elapsed": elapsed, "cases": len(cases), "metrics": len(metrics),
               "scores": scores, "n_errors": len(errors), "errors": errors[:5],
               "missing": expected - scores - len(errors), "max_concurrency": opts.max_concurrency,
               "cache_hits": result.usage.cache_hits,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    sys.exit(main())

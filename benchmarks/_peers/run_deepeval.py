"""Run DeepEval's contextual metrics on benchmark cases (executed inside DeepEval's own venv).

Usage: python run_deepeval.py CASES.json OUT.json --base-url URL [--metrics precision,recall,relevancy]
[--mode evaluate|per-metric]. Telemetry is off. Writes a JSON summary (elapsed seconds, peak RSS, scores, errors).
"""

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "1"
os.environ.setdefault("OPENAI_API_KEY", "sk-fake")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--metrics", default="precision,recall,relevancy")
    ap.add_argument("--model", default="gpt-4.1-mini")
    args = ap.parse_args()
    os.environ["OPENAI_BASE_URL"] = args.base_url

    from deepeval import evaluate
    from deepeval.metrics import (
        AnswerRelevancyMetric,
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        FaithfulnessMetric,
    )
    from deepeval.models import GPTModel
    from deepeval.test_case import LLMTestCase

    rows = json.loads(Path(args.cases).read_text())
    cases = [LLMTestCase(input=r["input"], actual_output=r["actual_output"], expected_output=r["expected_output"],
                         retrieval_context=r["retrieval_context"]) for r in rows]
    model = GPTModel(model=args.model, base_url=args.base_url, api_key="sk-fake")
    classes = {"precision": ContextualPrecisionMetric, "recall": ContextualRecallMetric,
               "relevancy": ContextualRelevancyMetric, "faithfulness": FaithfulnessMetric,
               "answer_relevancy": AnswerRelevancyMetric}
    metrics = [classes[m](model=model) for m in args.metrics.split(",")]  # every other setting at its default
    t0 = time.perf_counter()
    result = evaluate(test_cases=cases, metrics=metrics)  # default AsyncConfig: run_async, max_concurrent=20
    elapsed = time.perf_counter() - t0
    scores, errors = [], []
    for tr in result.test_results:
        for md in tr.metrics_data or []:
            if md.error:
                errors.append(str(md.error)[:200])
            elif md.score is None or (isinstance(md.score, float) and math.isnan(md.score)):
                errors.append("no score")
            else:
                scores.append(md.score)
    expected = len(cases) * len(metrics)
    Path(args.out).write_text(json.dumps({"tool": "deepeval", "elapsed": elapsed, "cases": len(cases), "metrics": len(metrics),
               "scores": len(scores), "errors": errors[:5], "n_errors": len(errors),
               "missing": expected - len(scores) - len(errors),
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    sys.exit(main())

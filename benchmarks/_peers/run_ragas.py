"""Run Ragas' context metrics on benchmark cases (executed inside Ragas' own venv).

Usage: python run_ragas.py CASES.json OUT.json --base-url URL
[--metrics precision_ref,precision_noref,recall]. Telemetry is off. Writes a JSON summary.
"""

import argparse
import json
import math
import os
import resource
import sys
import time
import warnings
from pathlib import Path

os.environ["RAGAS_DO_NOT_TRACK"] = "true"  # the string "true": "1" does not switch it off
os.environ.setdefault("OPENAI_API_KEY", "sk-fake")
warnings.filterwarnings("ignore")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--metrics", default="precision_ref,precision_noref,recall")
    ap.add_argument("--model", default="gpt-4o-mini")
    args = ap.parse_args()

    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_openai import ChatOpenAI
    from ragas import EvaluationDataset, SingleTurnSample, evaluate
    from ragas.embeddings import LangchainEmbeddingsWrapper
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import (
        ContextRelevance,
        Faithfulness,
        LLMContextPrecisionWithoutReference,
        LLMContextPrecisionWithReference,
        LLMContextRecall,
        ResponseRelevancy,
    )

    rows = json.loads(Path(args.cases).read_text())
    samples = [SingleTurnSample(user_input=r["input"], response=r["actual_output"], reference=r["expected_output"],
                                retrieved_contexts=r["retrieval_context"]) for r in rows]
    llm = LangchainLLMWrapper(ChatOpenAI(model=args.model, base_url=args.base_url, api_key="sk-fake"))
    # ResponseRelevancy embeds the generated questions: an offline stand-in (embedding calls are not judge calls)
    embeddings = LangchainEmbeddingsWrapper(DeterministicFakeEmbedding(size=64))
    classes = {"precision_ref": LLMContextPrecisionWithReference,
               "precision_noref": LLMContextPrecisionWithoutReference, "recall": LLMContextRecall,
               "relevance": ContextRelevance, "faithfulness": Faithfulness,
               "answer_relevancy": lambda: ResponseRelevancy(embeddings=embeddings)}
    metrics = [classes[m]() for m in args.metrics.split(",")]
    t0 = time.perf_counter()
    result = evaluate(EvaluationDataset(samples=samples), metrics=metrics, llm=llm)  # default RunConfig
    elapsed = time.perf_counter() - t0
    scores, errors = 0, 0
    for row in result.scores:
        for v in row.values():
            if v is None or (isinstance(v, float) and math.isnan(v)):
                errors += 1
            else:
                scores += 1
    expected = len(samples) * len(metrics)
    Path(args.out).write_text(json.dumps({"tool": "ragas", "elapsed": elapsed, "cases": len(samples), "metrics": len(metrics),
               "scores": scores, "n_errors": errors, "errors": ["NaN score"] * min(errors, 5),
               "missing": expected - scores - errors,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    sys.exit(main())

"""Run DeepEval's Synthesizer on contexts (executed inside DeepEval's own venv), for benchmarks/goldens_cost.py.

Usage: python run_deepeval_synth.py CONTEXTS.json OUT.json --base-url URL [--per-context 3]. Every setting at
DeepEval's default (filtration, one evolution, expected outputs). Writes a JSON summary: goldens made, seconds.
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "1"
os.environ.setdefault("OPENAI_API_KEY", "sk-fake")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("contexts")
    ap.add_argument("out")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--per-context", type=int, default=3)
    ap.add_argument("--model", default="gpt-4o-mini")
    args = ap.parse_args()
    os.environ["OPENAI_BASE_URL"] = args.base_url

    from deepeval.models import GPTModel
    from deepeval.synthesizer import Synthesizer

    contexts = json.loads(Path(args.contexts).read_text())
    model = GPTModel(model=args.model, base_url=args.base_url, api_key="sk-fake")
    synth = Synthesizer(model=model)
    t0 = time.perf_counter()
    goldens = synth.generate_goldens_from_contexts(contexts=contexts, include_expected_output=True,
                                                   max_goldens_per_context=args.per_context)
    Path(args.out).write_text(json.dumps({"goldens": len(goldens), "seconds": time.perf_counter() - t0,
                                          "with_expected_output": sum(1 for g in goldens if g.expected_output)}))


if __name__ == "__main__":
    main()

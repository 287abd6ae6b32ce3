"""Time from a fresh Python process's first import to the embedded judge's first verdict, on a warm disk.

    python benchmarks/local_startup.py [--runs 5]

Each run is a new process: import contextjudge, build LocalJudge() (loads the model file, expands its weights), and
judge one ContextualRelevancyMetric case of one node. Prints each run and the median, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

PROBE = """
import time
t0 = time.perf_counter()
from contextjudge import LLMTestCase
from contextjudge.metrics import ContextualRelevancyMetric
t1 = time.perf_counter()
m = ContextualRelevancyMetric(model="local")
m.measure(LLMTestCase(input="When does the store open on Sundays?", actual_output="At 10 am.",
                      retrieval_context=["On Sundays we are open from 10 am to 4 pm."]))
t2 = time.perf_counter()
print(t1 - t0, t2 - t0, m.score)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    src = str(Path(__file__).resolve().parents[1] / "src")
    imports, firsts = [], []
    for i in range(a.runs + 1):  # the first run warms the disk cache and is not counted
        out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r})\n{PROBE}"],
                             capture_output=True, text=True, check=True).stdout.split()
        if i:
            imports.append(float(out[0]))
            firsts.append(float(out[1]))
            print(f"run {i}: import {float(out[0]):.2f} s, first verdict {float(out[1]):.2f} s (score {out[2]})")
    print(json.dumps({"import_s": round(statistics.median(imports), 2),
                      "first_verdict_s": round(statistics.median(firsts), 2), "runs": a.runs}))


if __name__ == "__main__":
    main()

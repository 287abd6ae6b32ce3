"""The app thread's CPU per ``CaptureSession.submit``, by capture mode (no framework, no network).

    python benchmarks/capture_submit.py               # 20,000 cases per round (5,000 for the scoring modes)
    PYTHONPATH=<another checkout>/src python benchmarks/capture_submit.py   # the same on another version

Each round builds plain ``CapturedCase`` objects, submits them one by one from this thread and takes the thread's
CPU time (``time.thread_time``, so the scoring task and the writer thread, and other processes on a loaded machine,
are not counted); the median of five rounds is printed in microseconds per case.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.testing import FakeJudge


def _round(mode: str, n: int, **kwargs: object) -> float:
    cases = [CapturedCase(LLMTestCase(input=f"q{i}", actual_output="a", retrieval_context=["x"])) for i in range(n)]
    session = CaptureSession([ContextualRelevancyMetric(model=FakeJudge())], mode=mode, **kwargs)  # type: ignore[arg-type]
    t0 = time.thread_time()
    for case in cases:
        session.submit(case)
    spent = time.thread_time() - t0
    session.close(60)
    return spent / n * 1e6


def main() -> None:
    """Print the median CPU per submit of each mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="cases per round in modes 'off' (a quarter in the others)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("contextjudge").setLevel(logging.ERROR)
    folder = tempfile.mkdtemp()
    shapes: list[tuple[str, str, int, dict[str, object]]] = [
        ("off", "off", args.n, {"max_kept": None}),
        ("off, sample_rate=0.5", "off", args.n, {"max_kept": None, "sample_rate": 0.5}),
        ("background", "background", args.n // 4, {"max_kept": None}),
        ("worker (SQLite)", "worker", args.n // 4, {"store": os.path.join(folder, "worker.db")}),
    ]
    for label, mode, n, kwargs in shapes:
        per_case = statistics.median(_round(mode, n, **kwargs) for _ in range(args.rounds))
        print(f"{label:<22} {per_case:6.2f} us of app-thread CPU per submit")


if __name__ == "__main__":
    main()

"""Long runs: memory per case and time per case as ``evaluate()`` grows to many thousands of cases.

    python benchmarks/long_run.py [--sizes 1000 10000] [--metrics 4]

Each size runs in a fresh child process, twice: once timed (with the time spent in garbage collection, from
``gc.callbacks``), once under ``tracemalloc`` for memory. The cases are made here: a question, an expected and an
actual output, and 10 nodes of about 600 characters, each of natural sentences drawn from the standard library's
docstrings (so the text compresses as real text does: about 2.5x with zlib). The judge is ``FakeJudge`` in-process
(``record_calls=False``, so the judge itself keeps nothing), answering at once: what is left is contextjudge's own
work and memory. Memory is counted beyond the user's own test cases, which are built before tracing starts.

Printed per size and mode:
- ``kept``: memory still held after the run while the caller holds the ``EvaluationResult``, per case;
- ``peak``: the most held at any time during the run, per case;
- ``streaming``: the same run with ``keep_results=False`` and an ``on_result`` callback that only counts;
- time per case and the share of it spent in garbage collection.

``--freeze`` calls ``gc.freeze()`` after the cases are built: the user's own cases (about 43 tracked objects each)
are then never rescanned by the garbage collector, which is most of the collection time of a big in-memory list.

Targets (issue 12): at most 10 KB kept per case at 10,000 cases, and a time per case that does not grow with the
number of cases.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time

FREEZE = False
_STDLIB = ("argparse", "asyncio", "collections", "csv", "datetime", "email", "ftplib", "http.client", "imaplib",
           "inspect", "json", "logging", "mailbox", "pathlib", "shutil", "smtplib", "socket", "ssl", "subprocess",
           "tarfile", "threading", "unittest", "urllib.request", "zipfile")


def _sentences() -> list[str]:
    """Natural English with a realistic compression ratio: sentences of the standard library's own docstrings."""
    import importlib
    import inspect

    from contextjudge._text import split_sentences

    seen: set[str] = set()
    for name in _STDLIB:
        mod = importlib.import_module(name)
        docs = [mod.__doc__ or ""] + [inspect.getdoc(obj) or "" for _, obj in sorted(vars(mod).items())
                                      if inspect.isclass(obj) or inspect.isfunction(obj)]
        for doc in docs:
            for sent in split_sentences(" ".join(doc.split())):
                if 80 <= len(sent) <= 160 and sent[0].isupper():
                    seen.add(sent)
    return sorted(seen)


def make_cases(n: int, seed: int = 7) -> list:
    from contextjudge import LLMTestCase

    rng = random.Random(seed)
    pool = _sentences()

    def node() -> str:  # about 600 characters: as many sentences as it takes
        out: list[str] = []
        while sum(len(x) + 1 for x in out) < 560:
            out.append(rng.choice(pool))
        return " ".join(out)

    return [LLMTestCase(input=f"How many leave days do staff get? (case {i})",
                        actual_output="Staff get 20 leave days a year. Managers approve the requests.",
                        expected_output="Staff get 20 days of leave a year. A manager approves each request.",
                        retrieval_context=[node() for _ in range(10)]) for i in range(n)]


def _metrics(k: int) -> list:
    from contextjudge.metrics import (
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
    )
    from contextjudge.testing import FakeJudge

    judge = FakeJudge(record_calls=False)
    kinds = [ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric, ContextUtilizationMetric]
    return [cls(model=judge) for cls in kinds[:k]]


def _one(n: int, mode: str, k: int) -> dict:
    from contextjudge import evaluate

    metrics = _metrics(k)
    evaluate(make_cases(20, seed=1), metrics, show_progress=False)  # imports, caches of the code itself
    cases = make_cases(n)
    gc.collect()
    if FREEZE:
        gc.freeze()  # what a user can do after building a big list of cases: the collector stops rescanning them
    out: dict = {"cases": n, "mode": mode, "metrics": k}
    if mode in ("memory", "streaming"):
        import tracemalloc

        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        if mode == "memory":
            result = evaluate(cases, metrics, show_progress=False)
        else:
            seen = [0]
            result = evaluate(cases, metrics, show_progress=False, keep_results=False,
                              on_result=lambda tr: seen.__setitem__(0, seen[0] + 1))
            out["streamed"] = seen[0]
        gc.collect()
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["kept_bytes_per_case"] = (cur - base) / n
        out["peak_bytes_per_case"] = (peak - base) / n
        out["summary"] = {m: round(v["mean"], 4) for m, v in result.summary().items()}
        del result
        return out
    gc_time = [0.0]
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            gc_time[0] += time.perf_counter() - started.pop()

    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    result = evaluate(cases, metrics, show_progress=False)
    wall = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)
    out["ms_per_case"] = 1000 * wall / n
    out["gc_share"] = gc_time[0] / wall
    out["judge_calls"] = result.usage.calls
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--metrics", type=int, default=4, choices=[1, 2, 3, 4],
                    help="how many of precision, recall, relevancy, utilization (in that order)")
    ap.add_argument("--modes", nargs="+", default=["time", "memory", "streaming"],
                    choices=["time", "memory", "streaming"])
    ap.add_argument("--freeze", action="store_true",
                    help="call gc.freeze() after building the cases, as a user holding many cases in memory can")
    ap.add_argument("--one", nargs=2, metavar=("N", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    global FREEZE
    FREEZE = args.freeze
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.one[1], args.metrics)))
        return
    rows = []
    for n in args.sizes:
        for mode in args.modes:
            cp = subprocess.run([sys.executable, __file__, "--one", str(n), mode, "--metrics", str(args.metrics),
                                 *(["--freeze"] if args.freeze else [])],
                                capture_output=True, text=True, check=False)
            if cp.returncode != 0:
                print(cp.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"size {n} mode {mode} failed")
            rows.append(json.loads(cp.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            if mode == "time":
                print(f"{n:>7} cases  time       {r['ms_per_case']:7.2f} ms/case  gc {100 * r['gc_share']:4.1f}% of "
                      f"the time  ({r['judge_calls']} judge calls, {args.metrics} metrics)", flush=True)
            else:
                print(f"{n:>7} cases  {mode:<10} kept {r['kept_bytes_per_case'] / 1024:6.2f} KB/case  peak "
                      f"{r['peak_bytes_per_case'] / 1024:6.2f} KB/case", flush=True)
    times = [r for r in rows if r["mode"] == "time"]
    if len(times) >= 2:
        print(f"time per case, largest / smallest run: {times[-1]['ms_per_case'] / times[0]['ms_per_case']:.2f}x")


if __name__ == "__main__":
    main()

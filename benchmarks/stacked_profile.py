"""Where the stacked judge's time goes (model="local-cross"), beside the embedded judge's, on HotpotQA cases scored
with the four metrics agreement.py uses.

    python benchmarks/stacked_profile.py --data-dir DATA [--limit 10]

Prints each judge's wall time and nodes per second, and for the stacked judge the texts its cross-encoder ran through
e5's lower layers and the pairs its joint layers read, with the thread time of each (summed over the judge's threads,
so on two cores it can exceed the wall time). The last line is a bound: what the stacked judge would cost if the lower
layers came free (the embedded judge's time plus the joint layers' thread time spread over the cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import agreement  # noqa: E402

from contextjudge.judges._local import _cross, _e5  # noqa: E402

SPENT: Counter[str] = Counter()
TEXTS: Counter[str] = Counter()  # the sequences each wrapped call was given (its second argument)
_LOCK = threading.Lock()


def timed(owner: type, name: str, label: str) -> None:
    """Wrap ``owner.name`` so that each call's duration adds to SPENT[label] (from whichever thread calls it)."""
    f: Callable[..., Any] = getattr(owner, name)

    def wrapper(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            with _LOCK:
                SPENT[label] += time.perf_counter() - t
                TEXTS[label] += len(a[1])

    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--limit", type=int, default=10, help="HotpotQA rows (default 10)")
    args = ap.parse_args()
    rows = agreement.load(args.data_dir, "hotpotqa", args.limit)
    nodes = sum(len(r["passages"]) for r in rows)
    timed(_e5.E5Model, "hidden_states", "lower layers")
    timed(_cross.CrossEncoder, "_joint", "joint layers")
    walls = {}
    for kind in ("current", "stacked"):
        judge = agreement.make_judge(kind)
        SPENT.clear()
        TEXTS.clear()
        t0 = time.perf_counter()
        agreement.hotpotqa(rows, judge)
        walls[kind] = time.perf_counter() - t0
        print(f"{kind}: {walls[kind]:.1f} s for {nodes} nodes = {nodes / walls[kind]:.1f} nodes/s")
        cross = judge._scorer.cross  # noqa: SLF001
        if cross is not None:
            print(f"  e5's lower layers for the cross-encoder: {TEXTS['lower layers']} texts, "
                  f"{SPENT['lower layers']:.1f} s of thread time")
            print(f"  joint layers: {cross.pairs_run} pairs read, {SPENT['joint layers']:.1f} s of thread time")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    bound = walls["current"] + SPENT["joint layers"] / cores
    print(f"bound with the lower layers free: {walls['current']:.1f} + {SPENT['joint layers']:.1f} / {cores} cores "
          f"= {bound:.1f} s, {nodes / bound:.1f} nodes/s")


if __name__ == "__main__":
    main()

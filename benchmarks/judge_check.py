"""The built-in judge check (``contextjudge calibrate --builtin``) for the embedded judge, with or without its
cross-encoder, on the shipped labelled set or another file of the same format.

    python benchmarks/judge_check.py [--labels FILE] [--judge current|stacked] [--cross NPZ] [--stacked-weights JSON]

Prints, per verdict family, accuracy, Cohen's kappa, TPR and TNR (the numbers `calibrate` prints) as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import make_judge  # noqa: E402

from contextjudge._aio import run_sync  # noqa: E402
from contextjudge.engine import acalibrate, read_labels_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from contextjudge.cli._trust import builtin_check_path  # noqa: PLC0415

    ap.add_argument("--labels", default=builtin_check_path())
    ap.add_argument("--judge", choices=("current", "stacked", "cascade"), default="current")
    ap.add_argument("--cross", default=None, metavar="NPZ")
    ap.add_argument("--stacked-weights", default=None, metavar="JSON",
                    help="stacked weights in place of the shipped ones (calibrate_local.py --write-stacked)")
    a = ap.parse_args()
    judge = make_judge(a.judge, a.cross, a.stacked_weights)
    t0 = time.perf_counter()
    report = run_sync(acalibrate(read_labels_file(a.labels), judge))
    out = {"judge": a.judge, "labels": a.labels, "seconds": round(time.perf_counter() - t0, 1)}
    from contextjudge.judges import FAMILIES  # noqa: PLC0415

    for fam in FAMILIES:
        if fam in report:
            out[fam] = {k: report[fam].get(k) for k in ("items", "accuracy", "kappa", "kappa_ci", "tpr", "tnr")}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()

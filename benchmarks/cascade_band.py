"""Choose the cascade's band (model="local-cascade", _scoring.CASCADE_BAND) on development data, not the held-out half.

    python benchmarks/cascade_band.py --data-dir ../shared/data [--rows 20] [--no-check]

Runs the stacked judge (model="local-cross", which reads every pair above GATE) over HotpotQA's first ``--rows`` rows
(inside the 200 the judges' weights were fitted on: never the held-out rows 201+), through the agreement run's four
metrics, over the plain one-node set (benchmarks/obvious.py) and over the judge check (judge_check.jsonl), and
records, for every pair it gates (node, sentence, statement and node), the bi-encoder's confidence and the stacked
model's. Then, per candidate band (LO, HI), it prints what a cascade reading only the pairs with LO < bi-encoder
confidence < HI would do: the share of the stacked judge's reads it keeps (its cost), and how many of the stacked
judge's changed verdicts (yes/no different from the bi-encoder's) it keeps and loses, per kind of pair. A verdict the
stacked judge changes is where the cross-encoder matters; a pair whose verdict it does not change costs time only.

    python benchmarks/cascade_band.py --data-dir ../shared/data --reads 0.3,0.99 0.5,0.99 stacked

prints instead what each judge reads over the speed run's ten HotpotQA rows (the agreement run's four metrics): texts
and tokens through e5's lower layers, pairs through the joint layers, and the seconds it took, in this one process
(each judge starting with the cross-encoder's caches empty).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agreement import hotpotqa, load, make_judge  # noqa: E402

from contextjudge.judges._local import _scoring  # noqa: E402

BANDS = [(0.02, 1.01), (0.02, 0.99), (0.02, 0.95), (0.02, 0.9), (0.05, 0.9), (0.05, 0.8), (0.1, 0.9), (0.1, 0.8),
         (0.1, 0.7), (0.15, 0.7), (0.2, 0.8), (0.2, 0.7), (0.25, 0.75), (0.25, 0.99), (0.3, 0.99), (0.3, 0.9),
         (0.3, 0.7), (0.3, 0.6)]

RECORDS: list[tuple[str, np.ndarray, np.ndarray]] = []  # (source, bi-encoder confidences, the final array)
SOURCE = ["?"]


def recording_gate(self: Any, conf: np.ndarray) -> np.ndarray:
    RECORDS.append((SOURCE[0], conf.copy(), conf))  # ``conf`` is the array the stacked model then writes into
    return _scoring.gated(conf, self.band)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--rows", type=int, default=20, help="HotpotQA's first N rows (at most 200: the fitted half)")
    ap.add_argument("--no-check", action="store_true", help="leave the judge check out (it takes minutes)")
    ap.add_argument("--reads", nargs="+", metavar="LO,HI|stacked", help="what these bands (or the stacked judge) read")
    args = ap.parse_args()
    if args.reads:
        reads(args.data_dir, args.reads)
        return
    if args.rows > 200:
        raise SystemExit("--rows: at most 200, the rows the weights were fitted on; the rest is the held-out half")
    _scoring.Scorer.gate = recording_gate  # type: ignore[method-assign]
    judge = make_judge("stacked")
    SOURCE[0] = "hotpotqa"
    hotpotqa(load(args.data_dir, "hotpotqa")[: args.rows], judge)
    SOURCE[0] = "obvious"
    from obvious_cases import CASES  # noqa: PLC0415
    from test_local_obvious import verdict  # noqa: PLC0415

    for _, kind, text, node, _ in CASES:
        verdict(judge, kind, text, node)
    if not args.no_check:
        from contextjudge._aio import run_sync  # noqa: PLC0415
        from contextjudge.cli._trust import builtin_check_path  # noqa: PLC0415
        from contextjudge.engine import acalibrate, read_labels_file  # noqa: PLC0415

        SOURCE[0] = "judge_check"
        run_sync(acalibrate(read_labels_file(builtin_check_path()), judge))
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for source, bi, final in RECORDS:
        for b, f in zip(bi.ravel().tolist(), final.ravel().tolist(), strict=True):
            if b > _scoring.GATE:  # the pairs the stacked judge reads
                pairs[source].append((b, f))
    out: dict[str, Any] = {"read_by_stacked": {s: len(p) for s, p in pairs.items()}, "bands": []}
    print("band          " + "".join(f"{s:>34}" for s in pairs))
    print("              " + "".join(f"{'read share, changes kept/lost':>34}" for _ in pairs))
    for lo, hi in BANDS:
        row: dict[str, Any] = {"band": [lo, hi]}
        cells = []
        for s, p in pairs.items():
            arr = np.array(p)
            inside = (arr[:, 0] > lo) & (arr[:, 0] < hi)
            changed = (arr[:, 0] >= 0.5) != (arr[:, 1] >= 0.5)
            row[s] = {"read_share": round(float(inside.mean()), 3), "changes_kept": int((changed & inside).sum()),
                      "changes_lost": int((changed & ~inside).sum())}
            cells.append(f"{row[s]['read_share']:.2f}, {row[s]['changes_kept']}/{row[s]['changes_lost']}")
        out["bands"].append(row)
        print(f"({lo:.2f}, {hi:.2f})  " + "".join(f"{c:>34}" for c in cells))
    print(json.dumps(out))


def reads(data_dir: str, kinds: list[str]) -> None:
    import time  # noqa: PLC0415

    from contextjudge.judges._local import _cross  # noqa: PLC0415

    seen = {"texts": 0, "tokens": 0}
    lower = _cross.CrossEncoder._lower

    def counting(self: Any, keys: list[tuple[str, bool]]) -> Any:
        todo = [k for k in dict.fromkeys(keys) if k not in self._states]
        seen["texts"] += len(todo)
        seen["tokens"] += sum(self.e5.token_count(t, q) for t, q in todo)
        return lower(self, keys)

    _cross.CrossEncoder._lower = counting  # type: ignore[method-assign]
    rows = load(data_dir, "hotpotqa")[:10]
    hotpotqa(rows, make_judge("current"))  # the bi-encoder's vectors, shared by every judge below, embedded first
    for kind in kinds:
        judge = make_judge("stacked" if kind == "stacked" else "cascade")
        if kind != "stacked":
            judge._scorer.band = tuple(float(v) for v in kind.split(","))  # type: ignore[assignment]  # noqa: SLF001
        cross = judge._scorer.cross  # noqa: SLF001
        assert cross is not None
        cross._states.clear()  # noqa: SLF001
        seen.update(texts=0, tokens=0)
        pairs, t0 = cross.pairs_run, time.perf_counter()
        hotpotqa(rows, judge)
        print(json.dumps({"judge": kind, "lower_texts": seen["texts"], "lower_tokens": seen["tokens"],
                          "joint_pairs": cross.pairs_run - pairs, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()

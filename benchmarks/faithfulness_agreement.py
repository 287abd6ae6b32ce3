"""Agreement of a judge's faithfulness verdicts with human support labels it was not fitted on.

    python benchmarks/faithfulness_agreement.py [--data-dir ../shared/training-data] [--limit 400] [--model local]

Each labelled pair becomes one test case: the evidence (or premise) is the retrieved node, the claim (or
hypothesis) the app's answer; ``FaithfulnessMetric`` judges the answer's one statement against the node, and its
verdict is compared with the human label. Two open sets, both made for evaluation and both with unsupported claims
that differ from their evidence by a number, a name or a negation:

- FEVER-Symmetric v0.2 (dev + test; SUPPORTS = supported, REFUTES = not): claims against one Wikipedia sentence.
- Counterfactually augmented SNLI, test split (entailment = supported; neutral, contradiction = not): minimal edits.

The embedded judge's support weights (judges/_local/_scoring.py) were fitted on ClapNQ and MTRAG only, so neither
set is in its training data; a judge retrained later must not have been fitted on the rows measured here (its
training manifest says which files it used; this script prints the judge's identity). ``--limit`` rows of each set
at an even stride through the file, with one sentence as the claim (a claim that splits into several is left out). Prints a
table and, as its last line, one JSON object. Figures: accuracy, Cohen's kappa with a 95% bootstrap interval over
pairs, and the rates of yes on supported (TPR) and of no on unsupported (TNR).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _rows(path: Path, limit: int) -> list[dict[str, Any]]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line))
            if len(out) >= limit:
                break
    return out


def load(data_dir: Path, limit: int) -> dict[str, list[tuple[str, str, bool]]]:
    """(claim, evidence, supported) per set."""
    sets: dict[str, list[tuple[str, str, bool]]] = {}
    fever = _rows(data_dir / "fever_symmetric.jsonl.gz", 10**9)
    sets["fever_symmetric"] = _spread([(r["claim"], r["evidence"], r["label"] == "SUPPORTS") for r in fever], limit)
    snli = _rows(data_dir / "cad_snli_test.jsonl.gz", 10**9)
    sets["cad_snli_test"] = _spread([(r["hypothesis"], r["premise"], r["label"] == "entailment") for r in snli], limit)
    return sets


def _spread(rows: list[Any], limit: int) -> list[Any]:
    """``limit`` rows taken at an even stride through the file (the files are grouped by source pair and label)."""
    if len(rows) <= limit:
        return rows
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "training-data")
    ap.add_argument("--limit", type=int, default=400, help="pairs per set (default 400)")
    ap.add_argument("--model", default="local", help="the judge (default: the embedded judge)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))

    from contextjudge import LLMTestCase, evaluate
    from contextjudge._text import split_sentences
    from contextjudge.judges import judge_identity, resolve_model
    from contextjudge.metrics import FaithfulnessMetric
    from contextjudge.stats import binary_agreement

    judge = resolve_model(args.model)
    from contextjudge.judges import CALIBRATION_VERSION, judge_name

    report: dict[str, Any] = {"judge": judge_name(judge), "identity": judge_identity(judge), "limit": args.limit,
                              "local_calibration": CALIBRATION_VERSION}
    lines = [f"Faithfulness verdicts against human support labels, judge {report['judge']} ({report['identity']}; "
             f"embedded judge weights {CALIBRATION_VERSION})", "",
             "| set | pairs | supported | accuracy | kappa [95% CI] | TPR | TNR | seconds |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for name, rows in load(args.data_dir, args.limit).items():
        rows = [r for r in rows if len(split_sentences(r[0])) == 1]
        cases = [LLMTestCase(input="Is this claim supported?", actual_output=c, retrieval_context=[e])
                 for c, e, _ in rows]
        t0 = time.perf_counter()
        res = evaluate(cases, [FaithfulnessMetric(model=judge)], show_progress=False)
        secs = time.perf_counter() - t0
        pairs = []
        for tr, (_, _, label) in zip(res.test_results, rows, strict=True):
            m = tr.metrics_data[0]
            if m.error or not m.verdicts:
                continue
            pairs.append([(m.verdicts[0]["verdict"] == "yes", label)])
        ag = binary_agreement(pairs)

        def est(i: Any) -> float | None:
            return None if i.estimate is None else round(i.estimate, 4)

        row = {"pairs": len(pairs), "errors": len(rows) - len(pairs), "supported": ag.tp + ag.fn,
               "confusion": {"tp": ag.tp, "fp": ag.fp, "fn": ag.fn, "tn": ag.tn}, "accuracy": est(ag.accuracy),
               "kappa": est(ag.kappa), "kappa_ci": [ag.kappa.low, ag.kappa.high], "tpr": est(ag.tpr),
               "tnr": est(ag.tnr), "seconds": round(secs, 1)}
        report[name] = row
        if row["accuracy"] is None:
            print(f"{name}: no judged pair ({row})", file=sys.stderr)
            continue
        ci = f"[{ag.kappa.low:.2f}, {ag.kappa.high:.2f}]" if ag.kappa.low is not None else ""
        f3 = {k: "n/a" if row[k] is None else f"{row[k]:.3f}" for k in ("accuracy", "kappa", "tpr", "tnr")}
        lines.append(f"| {name} | {row['pairs']} | {row['supported']} | {f3['accuracy']} | {f3['kappa']} {ci} | "
                     f"{f3['tpr']} | {f3['tnr']} | {secs:.0f} |")
    print("\n".join(lines))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

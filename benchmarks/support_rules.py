"""The rates behind the embedded judge's statement-support rules (judges/_local/_scoring.py: NUMBER_MISSING,
NEGATION_FLIPPED): on human-labelled NLI pairs, how often a hypothesis is still entailed when its premise lacks one of
its numbers (an acronym, a number in words or inside a range the premise states counts as there), when the premise
gives one of its names with one word changed (``_lexical.name_changed``, which takes NUMBER_MISSING too), and when the
premise's closest sentence holds nearly all of its words but only one of the two says "not".

    python benchmarks/support_rules.py [--data-dir ../shared/training-data]

The constants were set from TaxiNLI's rates (MultiNLI pairs; first block). CAD-SNLI and FEVER-Symmetric are printed
for comparison and are what benchmarks/faithfulness_agreement.py measures, so they were not used to set anything.
Prints a table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from contextjudge.judges._local._lexical import (  # noqa: E402
    content_tokens,
    is_number,
    name_changed,
    specifics,
    specifics_in,
)
from contextjudge.judges._local._scoring import Evidence  # noqa: E402

SETS = {"taxinli (sets the rules)": ["taxinli10k.jsonl.gz"],
        "cad_snli (test only)": ["cad_snli_test.jsonl.gz"],
        "fever_symmetric (test only)": ["fever_symmetric.jsonl.gz"]}


def pairs(path: Path) -> list[tuple[str, str, int]]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if "claim" in r:
                out.append((r["claim"], r["evidence"], int(r["label"] == "SUPPORTS")))
            elif r.get("label") in ("entailment", "neutral", "contradiction"):
                out.append((r["hypothesis"], r["premise"], int(r["label"] == "entailment")))
    return out


def rates(rows: list[tuple[str, str, int]]) -> dict[str, Any]:
    n = {"pairs": [0, 0], "number missing": [0, 0], "name changed": [0, 0], "negation flipped": [0, 0]}
    for claim, text, y in rows:
        n["pairs"][y] += 1
        nums = frozenset(x for x in specifics(claim) if is_number(x))
        if nums and specifics_in(nums, text, claim)[1]:
            n["number missing"][y] += 1
        if name_changed(claim, text):
            n["name changed"][y] += 1
        if Evidence.negation_flipped(claim, text, content_tokens(claim)):
            n["negation flipped"][y] += 1
    return {k: {"n": no + yes, "entailed": yes / (no + yes) if no + yes else float("nan")}
            for k, (no, yes) in n.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "training-data")
    args = ap.parse_args()
    result = {}
    print(f"{'set':30s} {'rule':18s} {'pairs':>6s} {'entailed':>9s}")
    for name, files in SETS.items():
        rows = [r for f in files for r in pairs(args.data_dir / f)]
        result[name] = rates(rows)
        for rule, v in result[name].items():
            print(f"{name:30s} {rule:18s} {v['n']:6d} {v['entailed']:9.1%}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

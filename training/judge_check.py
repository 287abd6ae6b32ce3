"""The labelled set that ships with the package for `contextjudge calibrate --builtin` (a judge check anyone can run).

    python training/judge_check.py --pairs training/out/pairs.jsonl.gz [--per-family 300] [--out FILE]

Drawn only from the second half of the held-back groups of the training pairs (articles and documents the shipped
judge never trained on, nor had its stacked weights fitted on: training/pairs.py, held_back_halves; never from the
gold sets in ../shared/data), one labelled test case per pair, in the labels format of
`contextjudge calibrate`:
- node_usefulness (``labels``): a question, its reference answer as the expected output, one text;
- sentence_relevance (``relevance_labels``): a question and one sentence;
- statement_support (``statement_labels``): a statement as the expected output and one text.
Half yes and half no in each family (as far as the held-back pairs allow), a fixed seed. Writes
``src/contextjudge/data/judge_check.jsonl``; the sources and licences are those of training/data.py (docs/judges.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from pairs import held_back_halves, read_pairs  # noqa: E402

from contextjudge._text import split_sentences  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "src" / "contextjudge" / "data" / "judge_check.jsonl"


def case(p: dict, k: int) -> dict | None:
    y = int(p["y"])
    if p["task"] == "answer":
        q, _, ref = p["a"].partition(" Answer: ")
        if not ref:
            return None
        return {"id": f"usefulness-{k}", "input": q, "expected_output": ref, "retrieval_context": [p["b"]],
                "labels": [y], "source": p["src"]}
    if p["task"] == "sentence":
        if len(split_sentences(p["b"])) != 1:
            return None
        return {"id": f"relevance-{k}", "input": p["a"], "retrieval_context": [p["b"]], "relevance_labels": [y],
                "source": p["src"]}
    if len(split_sentences(p["a"])) != 1:
        return None
    return {"id": f"support-{k}", "input": "Is this statement supported by the text?", "expected_output": p["a"],
            "statements": [p["a"]], "retrieval_context": [p["b"]], "statement_labels": [y], "source": p["src"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, type=Path)
    ap.add_argument("--per-family", type=int, default=300)
    ap.add_argument("--held-back", type=float, default=0.05, help="as training/train.py's --held-back")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    pairs = read_pairs(a.pairs)
    held = held_back_halves(pairs, a.held_back, a.seed)[1]
    rng = random.Random(a.seed + 2)
    rows = []
    for task in ("answer", "sentence", "support"):
        for y in (1, 0):
            pool = [p for p in pairs if p["group"] in held and p["task"] == task and p["y"] == y]
            rng.shuffle(pool)
            got = [c for c in (case(p, k) for k, p in enumerate(pool)) if c][: a.per_family // 2]
            rows += got
    for k, r in enumerate(rows):
        r["id"] = f"{r['id'].split('-')[0]}-{k}"
    a.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    from collections import Counter
    print(f"wrote {a.out}: {len(rows)} cases", Counter((r["id"].split("-")[0], r["source"]) for r in rows))


if __name__ == "__main__":
    main()

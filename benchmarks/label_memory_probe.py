"""Why labels teach the embedded judge little on the tests' help-centre domain (issue 47): two probes.

    python benchmarks/label_memory_probe.py [--model local]

The domain is tests/helpdesk_pages.py (written for the tests): 52 questions, each retrieved with its help page's
three multi-sentence sections (one answers it in other words, two are the same page's answers to other questions),
each question asked in two or three phrasings. The last 32 cases are measured, the first 10 or 20 are labels.

1. The label memory's premise: a question's other phrasings lie closer to it than the same page's other questions.
   Prints the e5 similarity of question pairs (same question in other words / same page, another question / other
   pages) and how often the nearest labelled question on the same section carries the right label.
2. The ceiling of refitting the judge's own weights: each shrinkage strength forced (no out-of-sample rule), the
   held-out accuracy it would give. The best of them, picked on the held-out cases themselves, bounds what any
   choice of weights over these features can do here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from helpdesk_pages import QUESTIONS, helpdesk_page_rows  # noqa: E402

from contextjudge.cases.labels import LABELS_KEY  # noqa: E402
from contextjudge.cases.testcase import LLMTestCase  # noqa: E402
from contextjudge.engine._calibrate import calibrate, calibration_of  # noqa: E402
from contextjudge.judges._local import _learned  # noqa: E402
from contextjudge.judges._models import calibrated, resolve_model  # noqa: E402


def _cases(rows: list[dict]) -> list[LLMTestCase]:
    return [LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"],
                        additional_metadata={LABELS_KEY: {"relevance_labels": r["relevance_labels"]}}) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="local")
    args = ap.parse_args()
    rows = helpdesk_page_rows()
    judge = resolve_model(args.model)
    scorer = judge._scorer  # noqa: SLF001
    qs = [r["input"] for r in rows]
    intent = {q: i for i, (_, _, ps) in enumerate(QUESTIONS) for q in ps}
    page = {q: p for p, _, ps in QUESTIONS for q in ps}
    qv, _ = scorer._vectors(qs, [])  # noqa: SLF001
    sim = qv @ qv.T
    kinds: dict[str, list[float]] = {"same question, other words": [], "same page, another question": [],
                                     "other pages": []}
    for a in range(len(qs)):
        for b in range(a + 1, len(qs)):
            kind = ("same question, other words" if intent[qs[a]] == intent[qs[b]] else
                    "same page, another question" if page[qs[a]] == page[qs[b]] else "other pages")
            kinds[kind].append(float(sim[a, b]))
    print("1. e5 similarity of question pairs (5th / 50th / 95th percentile)")
    for kind, v in kinds.items():
        p5, p50, p95 = np.percentile(v, [5, 50, 95])
        print(f"   {kind}: {len(v)} pairs, {p5:.3f} / {p50:.3f} / {p95:.3f}")
    held = [(r["input"], n, bool(y)) for r in rows[20:] for n, y in zip(r["retrieval_context"],
                                                                       r["relevance_labels"], strict=True)]
    for n in (10, 20):
        lab = [(r["input"], node, bool(y)) for r in rows[:n] for node, y in zip(r["retrieval_context"],
                                                                              r["relevance_labels"], strict=True)]
        right = wrong = 0
        vec = dict(zip(qs, qv, strict=True))
        for q, node, y in held:
            same = [(float(vec[q] @ vec[lq]), ly) for lq, ln, ly in lab if ln == node]
            if not same:
                continue
            pos = max((s for s, ly in same if ly), default=0.0)
            neg = max((s for s, ly in same if not ly), default=0.0)
            right, wrong = (right + 1, wrong) if (pos > neg) == y else (right, wrong + 1)
        print(f"   {n} labelled cases: the nearest labelled question on the same section has the right label for "
              f"{right} of {right + wrong} held-out nodes ({right / max(1, right + wrong):.0%})")
    test = _cases(rows[20:])
    fam = calibrate(test, judge, resamples=50)["sentence_relevance"]
    bare = fam["accuracy"]
    print(f"2. held-out node accuracy, bare {bare:.1%} ({fam['confusion']}); each shrinkage strength forced:")
    keep = (_learned._paired_gain, _learned._decisions_kappa)  # noqa: SLF001
    try:
        _learned._paired_gain = lambda u, b, a: (1.0, 0.0)  # noqa: SLF001 - every fit accepted, for the probe only
        _learned._decisions_kappa = lambda c, labels: (1.0, 1.0)  # noqa: SLF001
        for n in (10, 20):
            line = []
            for lam in (128.0, 32.0, 8.0, 2.0, 0.5, 0.125):
                _learned.learn.__kwdefaults__["lambdas"] = (lam,)  # type: ignore[index]
                cal = calibration_of(calibrate(_cases(rows[:n]), judge, resamples=50))
                acc = calibrate(test, calibrated(resolve_model(args.model), cal), resamples=50)[
                    "sentence_relevance"]["accuracy"] if cal is not None else bare
                line.append(f"{lam:g}: {acc:.1%}")
            print(f"   {n} labels: " + ", ".join(line))
    finally:
        _learned._paired_gain, _learned._decisions_kappa = keep  # noqa: SLF001
        _learned.learn.__kwdefaults__["lambdas"] = _learned.LAMBDAS  # type: ignore[index]


if __name__ == "__main__":
    main()

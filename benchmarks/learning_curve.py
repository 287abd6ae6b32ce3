"""How far a user's labels teach the embedded judge (issue 47): a learning curve per domain.

    python benchmarks/learning_curve.py --data-dir ../shared/training-data [--model local] [--sizes 10 20 40 100]
        [--test 100] [--seed 13] [--domains medquad doc2dial squad2dev]

Each domain is one of the FAQ / help-desk pair files of ../shared/training-data (read from there, never copied; see
its SOURCES.md), made into labelled cases the way a user's would be: a case is one question with the passages of its
group (the answering passage and the same-page or same-article passages that do not answer; for SQuAD 2.0's
unanswerable questions, the paragraph they were written against), up to four, in a seeded order, each with a
relevance label (1 answers the question). Groups are shuffled with the seed; the first ``--test`` are held out, the
next ones are the pool the labels come from, so no labelled case is ever a measured one. For each N in ``--sizes``
the judge is calibrated on the pool's first N cases exactly as ``contextjudge calibrate`` does (``engine.calibrate``:
its own weights shrunk toward the shipped ones, leave-one-case-out, the shipped weights kept unless a fit beats them
out of sample; and a label memory, kept only when it beats the judge without it out of sample), and the calibrated
judge is measured on the held-out cases: node accuracy and Cohen's kappa (a node is relevant when its best sentence
is). The "kept" column says which of the two the calibration kept. ``kappa_cv`` is what the calibration itself reports from the N labels alone.

domains:
- medquad: NIH help pages (faq_medquad): the page's answers to other question types are the non-answers.
- doc2dial: users' first turns on government help pages (faq_doc2dial_val, kind faq): other sections of the page.
- squad2dev: SQuAD 2.0 dev (faq_squad2dev): unanswerable questions on their own paragraph, and answerable ones with
  same-article paragraphs.
- pages (not a default): the tests' help-centre domain, tests/helpdesk_pages.py (questions in two or three phrasings,
  each with its page's three multi-sentence sections); run it with --test 32 --sizes 10 20.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from contextjudge.cases.labels import LABELS_KEY  # noqa: E402
from contextjudge.cases.testcase import LLMTestCase  # noqa: E402
from contextjudge.engine._calibrate import calibrate, calibration_of  # noqa: E402
from contextjudge.judges._models import calibrated, resolve_model  # noqa: E402

FILES = {"medquad": ("faq_medquad.jsonl.gz", None), "doc2dial": ("faq_doc2dial_val.jsonl.gz", "faq"),
         "squad2dev": ("faq_squad2dev.jsonl.gz", None)}
MAX_NODES = 4


def _pages_cases() -> list[LLMTestCase]:
    """The tests' help-centre domain (tests/helpdesk_pages.py, written for them), held-out first: its last 32 cases,
    then the 20 the test labels (run with --test 32 --sizes 10 20)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpdesk_pages import helpdesk_page_rows  # noqa: PLC0415

    rows = helpdesk_page_rows()
    out = []
    for i, r in enumerate(rows[20:] + rows[:20]):
        tc = LLMTestCase(input=r["input"], retrieval_context=r["retrieval_context"])
        tc.id = f"pages:{i}"
        tc.additional_metadata = {LABELS_KEY: {"relevance_labels": [bool(x) for x in r["relevance_labels"]]}}
        out.append(tc)
    return out


def load_cases(data_dir: Path, domain: str, want: int, seed: int) -> list[LLMTestCase]:
    """``want`` labelled cases of the domain, groups in a seeded order."""
    if domain == "pages":
        return _pages_cases()[:want]
    name, kind = FILES[domain]
    groups: dict[str, list[dict]] = {}
    with gzip.open(data_dir / name, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if kind and row.get("kind") != kind:
                continue
            groups.setdefault(row["group"], []).append(row)
    keys = sorted(groups)
    rng = random.Random(seed)
    rng.shuffle(keys)
    out = []
    for g in keys:
        rows = groups[g]
        pos = [r for r in rows if r["label"]]
        neg = [r for r in rows if not r["label"]]
        if len(pos) > 1 or (not pos and neg[0].get("neg") != "unanswerable"):
            continue  # a case with one answering passage, or an unanswerable question on its own paragraph
        picked = pos + neg[: MAX_NODES - len(pos)]
        if len(picked) < 2 and pos:
            continue
        rng.shuffle(picked)
        tc = LLMTestCase(input=rows[0]["question"], retrieval_context=[r["passage"] for r in picked])
        tc.id = f"{domain}:{g}"
        tc.additional_metadata = {LABELS_KEY: {"relevance_labels": [bool(r["label"]) for r in picked]}}
        out.append(tc)
        if len(out) == want:
            break
    return out


def measure(judge, cases) -> dict:
    fam = calibrate(cases, judge, resamples=200)["sentence_relevance"]
    return {"accuracy": fam["accuracy"], "kappa": fam["kappa"], "items": fam["items"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/training-data")
    ap.add_argument("--model", default="local", help="the embedded judge to teach: local or local-cross")
    ap.add_argument("--domains", nargs="+", default=list(FILES), choices=[*FILES, "pages"],
                    help="pages: the tests' own help-centre domain (tests/helpdesk_pages.py; --test 32 --sizes 10 20)")
    ap.add_argument("--sizes", nargs="+", type=int, default=[10, 20, 40, 100])
    ap.add_argument("--test", type=int, default=100, help="held-out cases per domain")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    data = Path(args.data_dir)
    print("command: python benchmarks/learning_curve.py " + " ".join(sys.argv[1:]))
    print(f"judge {args.model}; held-out cases per domain: {args.test}; seed {args.seed}\n")
    print("| domain | labelled cases (N) | items | accuracy bare -> calibrated | kappa bare -> calibrated "
          "| kappa_cv (from the N labels) | kept | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for domain in args.domains:
        cases = load_cases(data, domain, args.test + max(args.sizes), args.seed)
        test, pool = cases[: args.test], cases[args.test:]
        bare = resolve_model(args.model)
        before = measure(bare, test)
        for n in args.sizes:
            if n > len(pool):
                print(f"| {domain} | {n} | (only {len(pool)} labelled cases left) | | | | | |")
                continue
            t0 = time.perf_counter()
            report = calibrate(pool[:n], bare, resamples=200)
            fit = report.get("sentence_relevance", {}).get("threshold", {})
            cal = calibration_of(report)
            after = measure(calibrated(resolve_model(args.model), cal), test) if cal is not None else before
            kcv = fit.get("kappa_cv")
            print(f"| {domain} | {n} | {after['items']} | {before['accuracy']:.1%} -> {after['accuracy']:.1%} | "
                  f"{_k(before['kappa'])} -> {_k(after['kappa'])} | {_k(kcv)} | "
                  f"{_what(fit)} | {time.perf_counter() - t0:.0f} |",
                  flush=True)


def _what(fit: dict) -> str:
    """What the calibration kept: the refitted weights, the label memory, both, or neither (the judge as shipped)."""
    kept = [w for w, on in (("weights", bool(fit.get("weights"))), ("memory", bool(fit.get("memory_kept")))) if on]
    return " + ".join(kept) if kept else "no (prior kept)"


def _k(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    main()

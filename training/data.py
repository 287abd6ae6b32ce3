"""Training pairs for the cross-encoder, built from openly licensed sources (docs/judges.md names each, with its
licence). Nothing here reads ../shared/data: the gold sets only ever measure the trained judge.

    python training/data.py --raw DIR --out pairs.jsonl.gz

``DIR`` holds the raw files as SOURCES (below) lays them out; a source that is missing is skipped with a note. Each
output line is one pair: ``{"task", "a", "b", "y", "src", "group"}`` where ``a`` is the query side (a question; a
question and its answer; a statement), ``b`` the text judged, ``y`` 1 or 0, and ``group`` the unit that decides the
train/held-back split (an article or a document: no topic is on both sides).

Pairs, per task (the three heads of training/model.py):
- relevance (question alone): a question and the paragraph or sentence that answers it (1); two of the same
  paragraph's other sentences, other paragraphs of the same article, and the paragraph an unanswerable question was written
  against (0: hard negatives on the question's own topic); MedQuAD: a question and its answer (1), the same
  document's answers to its other questions (0).
- answer (question plus a reference answer): the question with its answer and a window holding the answer (1); with
  another sentence of the same paragraph, and the same article's other paragraphs, that do not contain it (0); the
  same with a written reference (the answer's whole sentence; MedQuAD: the first sentences of the answer, against
  the same document's other answers).
- support (statement and text): SNLI entailment (1), neutral and contradiction (0); a sentence of a paragraph and
  the paragraph (1); the same sentence with one number changed, one name swapped for another name of the article,
  or its verb negated, against the paragraph (0): a statement is supported only when what it asserts is there.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from contextjudge._text import split_sentences  # noqa: E402

WINDOW_WORDS = 70  # a node is read in windows of about this many words (as the experiment's numpy engine read them, commit 8c2b583)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def group_of(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


def window_around(sents: list[str], i: int, rng: random.Random) -> str:
    """Consecutive sentences holding sentence ``i``, about WINDOW_WORDS words, the answer at a random place."""
    lo = hi = i
    words = len(sents[i].split())
    while True:
        grow = [j for j in (lo - 1, hi + 1) if 0 <= j < len(sents) and words + len(sents[j].split()) <= WINDOW_WORDS]
        if not grow:
            break
        j = rng.choice(grow)
        words += len(sents[j].split())
        lo, hi = min(lo, j), max(hi, j)
    return " ".join(sents[lo:hi + 1])


def first_window(sents: list[str]) -> str:
    out, words = [], 0
    for s in sents:
        if out and words + len(s.split()) > WINDOW_WORDS:
            break
        out.append(s)
        words += len(s.split())
    return " ".join(out)


_NUM = re.compile(r"\b\d[\d,.]*\b")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
_NEGATABLE = re.compile(r"\b(is|was|are|were|has|had|can|will|did|does|do)\b")


def perturb(sentence: str, names: list[str], rng: random.Random) -> str | None:
    """The sentence with what it asserts changed: a number, a name, or its verb negated (None when none applies)."""
    ways = []
    nums = list(_NUM.finditer(sentence))
    if nums:
        m = rng.choice(nums)
        digits = re.sub(r"\D", "", m.group())
        if digits:
            new = str(int(digits) + rng.choice([1, 2, 3, 5, 10, 12, 20, 100])) if len(digits) < 9 else digits[::-1]
            if new != digits:
                ways.append(sentence[:m.start()] + new + sentence[m.end():])
    own = [m for m in _NAME.finditer(sentence) if m.start() > 0]
    others = [n for n in names if n not in sentence]
    if own and others:
        m = rng.choice(own)
        ways.append(sentence[:m.start()] + rng.choice(others) + sentence[m.end():])
    neg = list(_NEGATABLE.finditer(sentence))
    if neg:
        m = rng.choice(neg)
        ways.append(sentence[:m.end()] + " not" + sentence[m.end():])
    return rng.choice(ways) if ways else None


def squad_pairs(path: Path, src: str, rng: random.Random) -> Iterator[dict[str, Any]]:
    """SQuAD-format files (SQuAD 2.0, XQuAD, MLQA): data[].paragraphs[].qas[]."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    for art in data:
        title = art.get("title", "")
        g = group_of(f"{src}:{title}")
        paras = [p["context"] for p in art["paragraphs"]]
        psents = [split_sentences(c) for c in paras]
        names = sorted({m.group() for c in paras for m in _NAME.finditer(c)})
        for pi, p in enumerate(art["paragraphs"]):
            sents = psents[pi]
            if not sents:
                continue
            others = [k for k in range(len(paras)) if k != pi]
            # support: sentences of the paragraph, as they are (1) and changed (0)
            for si in rng.sample(range(len(sents)), min(2, len(sents))):
                s = sents[si]
                if len(s.split()) < 5:
                    continue
                yield {"task": "support", "a": s, "b": window_around(sents, si, rng), "y": 1, "src": src, "group": g}
                bad = perturb(s, names, rng)
                if bad:
                    yield {"task": "support", "a": bad, "b": window_around(sents, si, rng), "y": 0, "src": src,
                           "group": g}
            for qa in p["qas"]:
                q = qa["question"].strip()
                answers = [a for a in qa.get("answers", []) if a.get("text")]
                if qa.get("is_impossible") or not answers:
                    yield {"task": "relevance", "a": q, "b": first_window(sents), "y": 0, "src": src, "group": g}
                    continue
                ans = answers[0]
                start = ans["answer_start"]
                # the sentence holding the answer
                pos, si = 0, 0
                for k, s in enumerate(sents):
                    at = p["context"].find(s, pos)
                    if at < 0:
                        continue
                    if at <= start < at + len(s) + 1:
                        si = k
                        break
                    pos = at + len(s)
                if ans["text"] not in sents[si]:
                    si = next((k for k, s in enumerate(sents) if ans["text"] in s), -1)
                    if si < 0:
                        continue
                win = window_around(sents, si, rng)
                yield {"task": "relevance", "a": q, "b": win, "y": 1, "src": src, "group": g}
                yield {"task": "relevance", "a": q, "b": sents[si], "y": 1, "src": src, "group": g}
                rest = [k for k in range(len(sents)) if k != si and ans["text"] not in sents[k]]
                for k in rng.sample(rest, min(2, len(rest))):
                    yield {"task": "relevance", "a": q, "b": sents[k], "y": 0, "src": src, "group": g}
                ref = f"{q} Answer: {ans['text']}"
                yield {"task": "answer", "a": ref, "b": win, "y": 1, "src": src, "group": g}
                if rest:
                    yield {"task": "answer", "a": ref, "b": sents[rng.choice(rest)], "y": 0, "src": src, "group": g}
                # a written reference (the answer's whole sentence, as an expected or actual output reads)
                long_ref = f"{q} Answer: {sents[si]}"
                yield {"task": "answer", "a": long_ref, "b": win, "y": 1, "src": src, "group": g}
                if rest:
                    yield {"task": "answer", "a": long_ref, "b": sents[rng.choice(rest)], "y": 0, "src": src,
                           "group": g}
                if others:
                    k = rng.choice(others)
                    if ans["text"].lower() not in paras[k].lower():
                        o = window_around(psents[k], rng.randrange(len(psents[k])), rng) if psents[k] else ""
                        if o:
                            yield {"task": "relevance", "a": q, "b": o, "y": 0, "src": src, "group": g}
                            yield {"task": "answer", "a": ref, "b": o, "y": 0, "src": src, "group": g}


def snli_pairs(folder: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    """e-SNLI's line files of SNLI (s1 premise, s2 hypothesis, labels)."""
    for split in ("dev", "test"):
        s1 = (folder / f"s1.{split}").read_text(encoding="utf-8").splitlines()
        s2 = (folder / f"s2.{split}").read_text(encoding="utf-8").splitlines()
        lab = (folder / f"labels.{split}").read_text(encoding="utf-8").splitlines()
        for p, h, y in zip(s1, s2, lab, strict=True):
            y = y.strip()
            if y not in ("entailment", "neutral", "contradiction"):
                continue
            fix = lambda t: re.sub(r"\s+([.,!?;:'])", r"\1", t.strip())  # noqa: E731 - detokenise "packages ."
            yield {"task": "support", "a": fix(h), "b": fix(p), "y": int(y == "entailment"), "src": "snli",
                   "group": group_of(f"snli:{fix(p)}")}


def _windows(text: str, rng: random.Random) -> list[str]:
    """A long text as consecutive windows of about WINDOW_WORDS words."""
    sents = split_sentences(" ".join(text.split()))
    out, cur, words = [], [], 0
    for s in sents:
        if cur and words + len(s.split()) > WINDOW_WORDS:
            out.append(" ".join(cur))
            cur, words = [], 0
        cur.append(s)
        words += len(s.split())
    if cur:
        out.append(" ".join(cur))
    return out


def qa_doc_pairs(src: str, docs: list[tuple[str, list[tuple[str, str]]]], rng: random.Random,
                 ) -> Iterator[dict[str, Any]]:
    """Documents of (question, answer text) pairs on one topic (MedQuAD, FAQs): a question and a window of its own
    answer (1), a window of another answer of the same document (0: same topic, another question), and the answers'
    sentences as statements, as they are (1) and changed (0)."""
    for key, qas in docs:
        g = group_of(f"{src}:{key}")
        wins = [_windows(a, rng) for _, a in qas]
        names = sorted({m.group() for _, a in qas for m in _NAME.finditer(a)})
        for i, (q, _a) in enumerate(qas):
            if not wins[i]:
                continue
            yield {"task": "relevance", "a": q, "b": wins[i][0], "y": 1, "src": src, "group": g}
            others = [k for k in range(len(qas)) if k != i and wins[k] and qas[k][0] != q]
            if others:
                yield {"task": "relevance", "a": q, "b": rng.choice(wins[rng.choice(others)]), "y": 0, "src": src,
                       "group": g}
            sents = split_sentences(wins[i][0])
            if sents and others:
                # a written reference: the first sentences of the answer, against its window (1) and another
                # answer of the same document (0: same topic, does not hold what the reference says)
                ref = " ".join(sents[:2])
                ref = " ".join(ref.split()[:40])
                yield {"task": "answer", "a": f"{q} Answer: {ref}", "b": wins[i][0], "y": 1, "src": src, "group": g}
                yield {"task": "answer", "a": f"{q} Answer: {ref}", "b": rng.choice(wins[rng.choice(others)]),
                       "y": 0, "src": src, "group": g}
            if sents:
                si = rng.randrange(len(sents))
                if len(sents[si].split()) >= 5:
                    yield {"task": "support", "a": sents[si], "b": wins[i][0], "y": 1, "src": src, "group": g}
                    bad = perturb(sents[si], names, rng)
                    if bad:
                        yield {"task": "support", "a": bad, "b": wins[i][0], "y": 0, "src": src, "group": g}


def medquad_pairs(folder: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    docs = []
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            qas = [(x["question"].strip(), x["answer"]) for x in d["qa_pairs"] if x.get("answer", "").strip()]
            if qas:
                docs.append((d["doc_id"], qas))
    yield from qa_doc_pairs("medquad", docs, rng)


def faq_pairs(path: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    # one FAQ page is one topic: every other answer is a same-topic negative
    yield from qa_doc_pairs("cdc_faq", [("cdc", [(r["question"], r["answer"]) for r in rows])], rng)


def boolq_pairs(path: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    """BoolQ: the passage is about the question whether the answer is yes or no (1); a passage written for another
    question on another page (0)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for r in rows:
        g = group_of(f"boolq:{r['title']}")
        q = r["question"].strip().capitalize() + "?"
        yield {"task": "relevance", "a": q, "b": r["passage"], "y": 1, "src": "boolq", "group": g}
        o = rng.choice(rows)
        if o["title"] != r["title"]:
            yield {"task": "relevance", "a": q, "b": o["passage"], "y": 0, "src": "boolq", "group": g}


def pubmedqa_pairs(path: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    """PubMedQA (expert-labelled): a question and its abstract's sections (1), another abstract's (0); with its long
    answer as the reference (the answer head) likewise."""
    d = json.loads(path.read_text(encoding="utf-8"))
    keys = sorted(d)
    for k in keys:
        r = d[k]
        g = group_of(f"pubmedqa:{k}")
        q, ctx = r["QUESTION"], " ".join(r["CONTEXTS"])
        w = _windows(ctx, rng)
        o = _windows(" ".join(d[rng.choice(keys)]["CONTEXTS"]), rng)
        if not w or not o:
            continue
        ref = f"{q} Answer: {r['LONG_ANSWER']}"
        for task, a in (("relevance", q), ("answer", ref)):
            yield {"task": task, "a": a, "b": rng.choice(w), "y": 1, "src": "pubmedqa", "group": g}
            yield {"task": task, "a": a, "b": rng.choice(o), "y": 0, "src": "pubmedqa", "group": g}


SOURCES: dict[str, tuple[str, str, Any]] = {
    # name: (file or folder under --raw, licence of the data, converter)
    "squad2": ("squad2_train_partial/train-v2.0.first10articles.json", "CC BY-SA 4.0",
               lambda p, rng: squad_pairs(p, "squad2", rng)),
    "xquad_en": ("xquad_en/xquad.en.json", "CC BY-SA 4.0", lambda p, rng: squad_pairs(p, "xquad_en", rng)),
    "covid_qa": ("covid_qa/200423_covidQA.json", "Apache-2.0", lambda p, rng: squad_pairs(p, "covid_qa", rng)),
    "cdc_faq": ("covid_qa/cdc_faq_en.jsonl", "US public domain (CDC), via COVID-QA (Apache-2.0)", faq_pairs),
    "medquad": ("medquad", "CC BY 4.0", medquad_pairs),
    "boolq": ("boolq/dev.jsonl", "CC BY-SA 3.0", boolq_pairs),
    "pubmedqa": ("pubmedqa/ori_pqal.json", "MIT", pubmedqa_pairs),
    "snli": ("esnli_snli_devtest", "CC BY-SA 4.0", snli_pairs),
}


def build(raw: Path, seed: int = 13) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All pairs, and a description of each source used (path, licence, hashes, counts)."""
    rng = random.Random(seed)
    pairs: list[dict[str, Any]] = []
    used = []
    for name, (rel, licence, convert) in SOURCES.items():
        where = raw / rel
        if not where.exists():
            print(f"source {name}: {where} missing, skipped", file=sys.stderr)
            continue
        n0 = len(pairs)
        pairs.extend(convert(where, rng))
        files = [where] if where.is_file() else sorted(f for f in where.iterdir() if f.suffix in ("", ".json", ".jsonl",
                                                                                                 ".dev", ".test"))
        hashes = {str(f.relative_to(raw)): sha256(f) for f in files if f.is_file()}
        used.append({"source": name, "licence": licence, "files": hashes, "pairs": len(pairs) - n0})
    return pairs, used


def held_back_groups(pairs: list[dict[str, Any]], share: float, seed: int) -> set[str]:
    """The groups (articles, documents) kept out of training: measured by train.py, and the source of the labelled
    set that ships with the package (training/judge_check.py)."""
    groups = sorted({p["group"] for p in pairs})
    return set(random.Random(seed).sample(groups, max(1, int(len(groups) * share))))


def read_pairs(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    pairs, used = build(a.raw, a.seed)
    with gzip.open(a.out, "wt", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    json.dump(used, sys.stdout, indent=1)
    from collections import Counter
    print("\n", Counter((p["task"], p["y"]) for p in pairs), file=sys.stderr)


if __name__ == "__main__":
    main()

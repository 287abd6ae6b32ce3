"""Training pairs for the embedded cross-encoder, from the open sets in ../shared/training-data (SOURCES.md there
names each file's public repository, commit, path and licence; docs/judges.md says which licences apply to the
weights). Nothing here reads ../shared/data: the gold sets only ever measure the judge.

    python training/pairs.py --data ../shared/training-data --out training/out/pairs.jsonl.gz

Each output line is one pair ``{"task", "a", "b", "y", "w", "src", "group"}``: ``a`` the query side (a question; a
question and its reference answer; a statement), ``b`` the text judged, ``y`` 1 or 0, ``w`` the pair's weight in the
loss and ``group`` the unit of the train / held-back split (an article or page: no topic is on both sides).

The four tasks (the heads of training/crossenc.py):
- relevance (node usefulness, question alone): a question and the window of its paragraph holding the answer (1);
  the hardest windows of the same article that do not hold it (the most question words: "is about it" but does not
  answer it), another window of the same paragraph (0). QED (real search-engine questions, answers in other words
  than the question's) draws its negatives from other questions' paragraphs sharing the question's words; SelQA
  gives windows of the same section with and without an answer sentence.
- sentence (sentence relevance, its own task): the answer sentence against the other sentences of its paragraph
  (the hardest first), SelQA's labelled candidates.
- answer (node usefulness with a reference or an actual output): the question with its answer (short, or the
  answer's whole sentence) against the same windows as relevance.
- support (statement support): NLI (TaxiNLI, counterfactually augmented SNLI, a small share of Breaking NLI,
  FEVER-Symmetric), and SQuAD sentences against their window, as they are (1) and with one number, name or verb
  changed (0: ``perturb`` of training/data.py).
Paraphrastic sources weigh more (QED, SelQA: ``PARAPHRASTIC``): SQuAD's questions share many words with their
answer sentence, so a model trained mostly on them would learn word matching.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from data import _NAME, perturb  # noqa: E402

from contextjudge._text import split_sentences  # noqa: E402

WINDOW_WORDS = 70  # nodes are read in windows of about this many words (the runtime does the same)
PARAPHRASTIC = {"qed": 2.0, "selqa": 2.0}
FILES = {  # the files of ../shared/training-data this reads (SOURCES.md describes each)
    "squad": ["squad11_train.jsonl.gz"],
    "qed": ["qed_nq_train.jsonl.gz", "qed_nq_dev.jsonl.gz"],
    "selqa": ["selqa_ass_dev.jsonl.gz", "selqa_ass_test.jsonl.gz"],
    "nli": ["taxinli10k.jsonl.gz", "cad_snli_train.jsonl.gz", "cad_snli_dev.jsonl.gz", "cad_snli_test.jsonl.gz",
            "breaking_nli.jsonl.gz", "fever_symmetric.jsonl.gz"],
}
# The FAQ and help-desk pairs (SOURCES.md, "FAQ and help-desk pairs"), built by ``--set faq`` into their own file so
# the first set's pairs, and with them its held-back groups and the shipped judge check, stay byte for byte the same.
FAQ_FILES = {
    "medquad": "faq_medquad.jsonl.gz", "doc2dial": "faq_doc2dial_val.jsonl.gz", "squad2dev": "faq_squad2dev.jsonl.gz",
    "banking77": "faq_banking77.jsonl.gz", "clinc150": "faq_clinc150.jsonl.gz",
}
FAQ_EXTRA = ["squad11_dev.jsonl.gz"]  # SQuAD 2.0's answerable questions take their answers from SQuAD 1.1 dev
_STOP = frozenset("""a about after all also an and any are as at be been by can could did do does for from had has have
how i if in into is it its of on or that the their there these they this to was were what when where which who whom
whose why will with would you your name named called many much one first""".split())  # noqa: SIM905
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def holds(text: str, answer: str) -> bool:
    """Whether ``text`` may hold ``answer``: the string, or every content word of it (a negative must not)."""
    aw = words(answer)
    return answer.lower() in text.lower() or bool(aw) and aw <= words(text)


def group_of(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


def rows(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def windows(sents: list[str]) -> list[tuple[int, int]]:
    """Consecutive sentence spans [lo, hi) of about WINDOW_WORDS words, covering the paragraph."""
    out, lo, n = [], 0, 0
    for i, s in enumerate(sents):
        k = len(s.split())
        if i > lo and n + k > WINDOW_WORDS:
            out.append((lo, i))
            lo, n = i, 0
        n += k
    if lo < len(sents):
        out.append((lo, len(sents)))
    return out


def as_question(q: str, rng: random.Random) -> str:
    """NQ's lower-case search queries, half of them written as a user writes a question."""
    q = " ".join(q.split())
    if q.endswith("?") or rng.random() < 0.5:
        return q
    return q[:1].upper() + q[1:] + "?"


def hardest(q: set[str], cands: list[str], k: int, rng: random.Random) -> list[str]:
    """The ``k`` candidates sharing the most question words (ties in random order)."""
    scored = sorted(cands, key=lambda c: (-len(q & words(c)), rng.random()))
    return scored[:k]


def pair(task: str, a: str, b: str, y: int, src: str, group: str, w: float = 1.0) -> dict[str, Any]:
    return {"task": task, "a": a, "b": b, "y": y, "w": w, "src": src, "group": group}


def squad(path: Path, rng: random.Random, per_paragraph: int) -> Iterator[dict[str, Any]]:
    arts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows(path):
        arts[r["article"]].append(r)
    for art in sorted(arts):
        g = group_of(f"squad:{art}")
        paras = arts[art]
        psents = [split_sentences(p["context"]) for p in paras]
        pwins = [[" ".join(s[lo:hi]) for lo, hi in windows(s)] for s in psents]
        pspans = [windows(s) for s in psents]
        names = sorted({m.group() for p in paras for m in _NAME.finditer(p["context"])})
        for pi, p in enumerate(paras):
            sents = psents[pi]
            if not sents:
                continue
            # support: a sentence of the paragraph against its window, as it is (1) and changed (0)
            si = rng.randrange(len(sents))
            wi = next(k for k, (lo, hi) in enumerate(pspans[pi]) if lo <= si < hi)
            if len(sents[si].split()) >= 6 and rng.random() < 0.5:
                yield pair("support", sents[si], pwins[pi][wi], 1, "squad", g)
                bad = perturb(sents[si], names, rng)
                if bad:
                    yield pair("support", bad, pwins[pi][wi], 0, "squad", g)
            qas = [qa for qa in p["qas"] if qa["answers"]]
            for qa in rng.sample(qas, min(per_paragraph, len(qas))):
                q, ans = qa["question"].strip(), qa["answers"][0]
                qw = words(q)
                si = next((k for k, s in enumerate(sents) if ans in s), -1)
                if si < 0:
                    continue
                wi = next(k for k, (lo, hi) in enumerate(pspans[pi]) if lo <= si < hi)
                pos = pwins[pi][wi]
                # node level: the answering window (or, now and then, the answer sentence alone) against the hardest
                # same-article windows without the answer, and another window of the same paragraph
                negs = [w for k, ws in enumerate(pwins) if k != pi for w in ws if not holds(w, ans)]
                hard = hardest(qw, negs, 2, rng)
                same = [w for k, w in enumerate(pwins[pi]) if k != wi and not holds(w, ans)]
                node_pos = sents[si] if rng.random() < 0.2 else pos
                yield pair("relevance", q, node_pos, 1, "squad", g)
                for n in hard[:1] + (same[:1] if same else hard[1:2]):
                    yield pair("relevance", q, n, 0, "squad", g)
                # sentence level: the answer sentence against the hardest other sentence of its paragraph
                rest = [s for k, s in enumerate(sents) if k != si and not holds(s, ans)]
                if rest:
                    yield pair("sentence", q, sents[si], 1, "squad", g)
                    for s in hardest(qw, rest, 1, rng) + ([rng.choice(rest)] if rng.random() < 0.5 else []):
                        yield pair("sentence", q, s, 0, "squad", g)
                # with a reference: the short answer or its whole sentence (as an expected or actual output reads)
                ref = f"{q} Answer: {ans if rng.random() < 0.6 else sents[si]}"
                yield pair("answer", ref, pos, 1, "squad", g)
                if hard:
                    yield pair("answer", ref, rng.choice(hard + same[:1]), 0, "squad", g)


def _qed_sentences(r: dict[str, Any]) -> list[tuple[int, str]]:
    starts = list(r.get("sentence_starts") or [0]) + [len(r["paragraph"])]
    return [(a, r["paragraph"][a:b].strip()) for a, b in zip(starts, starts[1:], strict=False)
            if r["paragraph"][a:b].strip()]


def _clean(t: str) -> str:
    return re.sub(r"\s+([.,;:!?)'])", r"\1", re.sub(r"([(])\s+", r"\1", " ".join(t.split())))


def qed(paths: list[Path], rng: random.Random) -> Iterator[dict[str, Any]]:
    """NQ questions with their gold paragraph: negatives are other questions' paragraphs (windows) that share the most
    of this question's words and do not hold its answer; sentence level, the answer sentence against the others."""
    recs = [r for p in paths for r in rows(p)]
    wins: list[tuple[int, str]] = []  # (record, window text)
    rec_wins: list[list[int]] = []
    for ri, r in enumerate(recs):
        sents = [_clean(s) for _, s in _qed_sentences(r)]
        mine = []
        for lo, hi in windows(sents):
            mine.append(len(wins))
            wins.append((ri, " ".join(sents[lo:hi])))
        rec_wins.append(mine)
    index: dict[str, list[int]] = defaultdict(list)
    for wi, (_ri, t) in enumerate(wins):
        for w in words(t):
            index[w].append(wi)
    for ri, r in enumerate(recs):
        g = group_of(f"qed:{r['title']}")
        q = as_question(r["question"], rng)
        answers = [_clean(a) for a in r.get("answers") or [] if a.strip()]
        if not answers:
            continue
        ans = answers[0]
        qw = words(q)
        own = [wins[k][1] for k in rec_wins[ri]]
        pos = next((t for t in own if ans.lower() in t.lower()), None)
        if pos is None:
            continue
        hits: Counter[int] = Counter()
        for w in qw:
            if len(index[w]) < 2000:
                hits.update(index[w])
        cands = [k for k, _ in hits.most_common(40) if wins[k][0] != ri and recs[wins[k][0]]["question"] != r["question"]
                 and not any(holds(wins[k][1], a) for a in answers)]
        cands = [wins[k][1] for k in cands]
        w = PARAPHRASTIC["qed"]
        yield pair("relevance", q, pos, 1, "qed", g, w)
        negs = rng.sample(cands[:10], min(2, len(cands[:10])))
        same = [t for t in own if t != pos and not holds(t, ans)]
        for n in negs + same[:1]:
            yield pair("relevance", q, n, 0, "qed", g, w)
        ref = f"{q} Answer: {ans}"
        yield pair("answer", ref, pos, 1, "qed", g, w)
        if negs:
            yield pair("answer", ref, negs[0], 0, "qed", g, w)
        # sentence level
        spans = r.get("answer_spans") or []
        sents = _qed_sentences(r)
        if spans and len(sents) > 1:
            a0 = spans[0][0]
            si = max([k for k, (st, _s) in enumerate(sents) if st <= a0] or [0])
            rest = [_clean(s) for k, (_st, s) in enumerate(sents) if k != si and not holds(_clean(s), ans)
                    and len(s.split()) >= 4]
            if rest and len(sents[si][1].split()) >= 4:
                yield pair("sentence", q, _clean(sents[si][1]), 1, "qed", g, w)
                for s in hardest(qw, rest, 2, rng):
                    yield pair("sentence", q, s, 0, "qed", g, w)


def selqa(paths: list[Path], rng: random.Random) -> Iterator[dict[str, Any]]:
    """SelQA: a question and the candidate sentences of one Wikipedia section, some labelled as answering it."""
    w = PARAPHRASTIC["selqa"]
    for p in paths:
        for r in rows(p):
            g = group_of(f"selqa:{r['article']}")
            q, cands, ans = r["question"].strip(), r["candidates"], set(r.get("answers") or [])
            qw = words(q)
            pos = [cands[k] for k in sorted(ans) if k < len(cands)]
            neg = [c for k, c in enumerate(cands) if k not in ans]
            for s in pos[:2]:
                yield pair("sentence", q, s, 1, "selqa", g, w)
            for s in hardest(qw, neg, 3 if pos else 2, rng):
                yield pair("sentence", q, s, 0, "selqa", g, w)
            spans = windows(cands)
            for lo, hi in spans:
                has = any(lo <= k < hi for k in ans)
                if has or rng.random() < 0.5:
                    yield pair("relevance", q, " ".join(cands[lo:hi]), int(has), "selqa", g, w)


def nli(data: Path, rng: random.Random, breaking_share: float) -> Iterator[dict[str, Any]]:
    """Statement support: the hypothesis (a claim) against the premise (the text), 1 only for entailment."""
    for name in FILES["nli"]:
        src = name.split(".")[0].removesuffix("_train").removesuffix("_dev").removesuffix("_test")
        for r in rows(data / name):
            if src == "breaking_nli" and rng.random() > breaking_share:
                continue
            if "claim" in r:
                a, b, y = r["claim"], r["evidence"], int(r["label"] == "SUPPORTS")
            else:
                if r["label"] not in ("entailment", "neutral", "contradiction"):
                    continue
                a, b, y = r["hypothesis"], r["premise"], int(r["label"] == "entailment")
            a, b = _clean(a), _clean(b)
            yield pair("support", a, b, y, src, group_of(f"{src}:{b[:60]}"))


def _page(group: str, src: str) -> str:
    """The page (or intent) a FAQ row's question belongs to: the unit kept on one side of the split."""
    parts = group.split(":")
    if src in ("medquad", "squad2dev"):
        return ":".join(parts[:-1]) if src == "medquad" else ":".join(parts[:2])
    if src == "doc2dial":
        return re.sub(r"_\d+$", "", group)
    return ":".join(parts[:2])  # banking77 / clinc150: the intent


def first_window(text: str) -> str:
    sents = split_sentences(text)
    if not sents:
        return text
    lo, hi = windows(sents)[0]
    return " ".join(sents[lo:hi])


def faq(data: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Help-desk pairs. MedQuAD and doc2dial: a question and the first window of its answer or section (1) and of
    the same page's other answers or sections (0: same-topic non-answers). SQuAD 2.0: an answerable question and the
    window of its paragraph that holds the answer, one sentence among others (1), the same article's windows without
    it (0); an unanswerable question and the window, and the sentence, of its own paragraph sharing the most of its
    words (0: on topic, not answered). banking77 / clinc150: a customer query and another query of the same intent
    (1) or of another intent of the domain (0), on the relevance head, a small share (``train.py``'s quotas)."""
    answers: dict[str, str] = {}
    for r in rows(data / FAQ_EXTRA[0]):
        for qa in r["qas"]:
            if qa["answers"]:
                answers.setdefault(" ".join(qa["question"].split()), qa["answers"][0])
    for src, name in FAQ_FILES.items():
        for r in rows(data / name):
            q, passage, y = " ".join(r["question"].split()), r["passage"], int(r["label"])
            g = group_of(f"faq:{_page(r['group'], src)}")
            if src in ("banking77", "clinc150"):
                yield pair("relevance", q, " ".join(passage.split()), y, src, g)
                continue
            if src != "squad2dev":
                yield pair("relevance", q, first_window(passage), y, src, g)
                continue
            sents = split_sentences(passage)
            wins = [" ".join(sents[lo:hi]) for lo, hi in windows(sents)] if sents else [passage]
            qw = words(q)
            if r["neg"] == "unanswerable":
                yield pair("relevance", q, hardest(qw, wins, 1, rng)[0], 0, "squad2dev_unans", g)
                if len(sents) > 1:
                    yield pair("sentence", q, hardest(qw, sents, 1, rng)[0], 0, "squad2dev_unans", g)
                continue
            ans = answers.get(q)
            if ans is None:
                continue
            if y:
                hit = [w for w in wins if ans in w]
                if hit and len(split_sentences(hit[0])) > 1:
                    yield pair("relevance", q, hit[0], 1, src, g)
            else:
                negs = [w for w in wins if not holds(w, ans)]
                if negs:
                    yield pair("relevance", q, hardest(qw, negs, 1, rng)[0], 0, src, g)


def read_pairs(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def held_back_groups(pairs: list[dict[str, Any]], share: float, seed: int) -> set[str]:
    """The groups (articles, documents) training/train.py keeps out of training."""
    groups = sorted({p["group"] for p in pairs})
    return set(random.Random(seed).sample(groups, max(1, int(len(groups) * share))))


def held_back_halves(pairs: list[dict[str, Any]], share: float, seed: int) -> tuple[set[str], set[str]]:
    """The held-back groups cut in two: the first half may fit the stacked judge's weights
    (benchmarks/calibrate_local.py --pairs), the second is the shipped judge check's (training/judge_check.py), so
    the check never measures pairs its weights were fitted on."""
    held = sorted(held_back_groups(pairs, share, seed))
    random.Random(seed + 3).shuffle(held)
    return set(held[: len(held) // 2]), set(held[len(held) // 2:])


def build(data: Path, seed: int, per_paragraph: int, breaking_share: float) -> tuple[list[dict[str, Any]], list]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    out += squad(data / FILES["squad"][0], rng, per_paragraph)
    out += qed([data / f for f in FILES["qed"]], rng)
    out += selqa([data / f for f in FILES["selqa"]], rng)
    out += nli(data, rng, breaking_share)
    sources = sources_of(data)
    return out, sources


def sources_of(data: Path, used: set[str] | None = None) -> list[dict[str, Any]]:
    """The rows of SOURCES.md for the files read (repository, commit, path, licence), with the files' sha256."""
    used = used if used is not None else {f for fs in FILES.values() for f in fs}
    out = []
    for line in (data / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in used and len(cells) >= 8:
            if len(cells) == 8:  # the FAQ table has no "row" column
                cells = [*cells[:7], "", cells[7]]
            out.append({"file": cells[0], "rows": cells[1], "dataset": cells[2], "licence": cells[3],
                        "repo": cells[4], "commit": cells[5], "path": cells[6],
                        "sha256": hashlib.sha256((data / cells[0]).read_bytes()).hexdigest()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "training-data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "pairs.jsonl.gz")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--per-paragraph", type=int, default=1, help="SQuAD questions drawn per paragraph")
    ap.add_argument("--breaking-share", type=float, default=0.15, help="share of Breaking NLI's one-word swaps kept")
    ap.add_argument("--set", choices=("base", "faq"), default="base",
                    help="base: the first training's pairs; faq: the FAQ and help-desk pairs (a second stage, "
                         "training/train.py --init; write them to their own file, e.g. training/out/faq_pairs.jsonl.gz)")
    a = ap.parse_args()
    if a.set == "faq":
        pairs = list(faq(a.data, random.Random(a.seed)))
        sources = sources_of(a.data, set(FAQ_FILES.values()) | set(FAQ_EXTRA))
    else:
        pairs, sources = build(a.data, a.seed, a.per_paragraph, a.breaking_share)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs)
    a.out.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))  # the same bytes on every run
    a.out.with_suffix("").with_suffix(".sources.json").write_text(json.dumps(sources, indent=1) + "\n")
    c = Counter((p["task"], p["src"], p["y"]) for p in pairs)
    for k in sorted(c):
        print(*k, c[k], file=sys.stderr)
    print(f"{len(pairs)} pairs -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

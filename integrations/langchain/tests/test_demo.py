"""The demo runs offline end to end and shows the good retriever winning."""

from __future__ import annotations

import json

from contextjudge_langchain.demo import CONFIGS, load_corpus, main


def test_corpus_shape():
    docs, goldens, conversation = load_corpus()
    ids = {d["id"] for d in docs["documents"]}
    assert 25 <= len(ids) == len(docs["documents"]) <= 40
    assert len(goldens) == 15 and len({g["id"] for g in goldens}) == 15
    for g in goldens + conversation["turns"]:
        assert g["input"] and g["expected_output"] and set(g["relevant_ids"]) <= ids
    assert len(conversation["turns"]) == 3 and conversation["thread_id"]
    assert [c.key for c in CONFIGS] == ["weak", "good"]


def test_demo_with_the_scripted_judge(capsys, tmp_path):
    out_json = tmp_path / "demo.json"
    assert main(["--judge", "fake", "--json", str(out_json)]) == 0
    out = capsys.readouterr()
    assert "NOT a real judge" in out.out and "NOT a real judge" in out.err
    assert "the good retriever wins" in out.out
    for name in ("Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization",
                 "Turn Contextual Relevancy (conv.)", "Turn Contextual Recall (conv.)", "Worst cases, weak retriever",
                 "reason:"):
        assert name in out.out
    dump = json.loads(out_json.read_text())
    assert {d["config"] for d in dump} == {"weak", "good"}
    assert sum(1 for d in dump if d["source"].startswith("thread:")) == 2


def test_demo_on_the_embedded_judge(capsys):
    import pytest

    pytest.importorskip("contextjudge.local")
    assert main(["--judge", "local", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "embedded offline judge" in out and "NOT a real judge" not in out
    assert "Verdict: the good retriever" in out

"""Goldens from traffic (issue 51): a store's cases become goldens, with expected ids from people's labels (else the
judge's verdicts, marked), accepted answers as expected outputs, a personal-data hook, and a sample across
retrievers and days."""

from __future__ import annotations

import json

import pytest

from contextjudge import LLMTestCase, RetrievedNode, evaluate
from contextjudge.cli import main
from contextjudge.goldens import from_store, load_goldens
from contextjudge.metrics import ContextUtilizationMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = {
    "vacation": "Employees accrue twenty vacation days per year.",
    "parking": "Parking permits cost forty dollars per month at the front desk.",
    "expenses": "Travel expenses are reimbursed within ten business days.",
}


def _case(q: str, useful: str, retriever: str, **meta) -> LLMTestCase:
    nodes = [RetrievedNode(t, id=f"doc-{k}") for k, t in NODES.items()]
    nodes.sort(key=lambda n: n.id != f"doc-{useful}")
    return LLMTestCase(input=q, actual_output=NODES[useful], retrieval_context=nodes,
                       additional_metadata={"retriever": retriever, **meta})


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "traffic.db")
    cases = [
        _case("how many vacation days do employees accrue per year", "vacation", "bm25"),
        _case("what do parking permits cost per month", "parking", "dense", feedback="up"),
        _case("when are travel expenses reimbursed", "expenses", "dense"),
        _case("How many vacation days do employees accrue per year?", "vacation", "dense"),  # the same question
        _case("tell me a joke", "parking", "bm25"),  # nothing useful, no label, no accepted answer
    ]
    # the judge (scripted) calls a node useful when it shares two content words with the answer or the question
    evaluate(cases, [ContextUtilizationMetric()], model=FakeJudge(), store=path, run_id="prod-1")
    s = open_store(path)
    s.add_labels([{"input": "when are travel expenses reimbursed", "labels": [True, False, False]}], run="prod-1")
    return path


def test_labels_win_then_judge_verdicts_marked_and_accepted_answers(store):
    rows, report = from_store(store)
    by_q = {r["input"]: r for r in rows}
    assert report["cases_read"] == 5 and report["left_out"].get("duplicate question") == 1
    assert report["groups"] == 2  # (retriever, day): bm25 and dense, all captured today
    exp = by_q["when are travel expenses reimbursed"]
    assert exp["expected_context_ids"] == ["doc-expenses"] and exp["expected_context_by"] == "person"
    assert exp["provenance"]["expected_context_by"] == "person" and "expected_output" not in exp
    park = by_q["what do parking permits cost per month"]
    assert park["expected_output"] == NODES["parking"] and park["provenance"]["expected_output_by"] == "person"
    vac = by_q["how many vacation days do employees accrue per year"]
    assert vac["expected_context_ids"] == ["doc-vacation"] and vac["expected_context_by"] == "judge"
    assert vac["provenance"]["judged_by"] == {"metric": "Context Utilization"}
    assert vac["provenance"]["retriever"] == "bm25" and vac["provenance"]["run_id"] == "prod-1"
    labelled, rep = from_store(store, labelled=True)
    # only what people said: the labelled case, and the accepted answer
    assert sorted(r["input"] for r in labelled) == ["what do parking permits cost per month",
                                                    "when are travel expenses reimbursed"]
    assert all(r.get("expected_context_by") != "judge" for r in labelled)


def test_the_redact_hook_changes_or_leaves_out(store):
    def redact(row):
        if "parking" in row["input"]:
            return None
        row["input"] = row["input"].replace("travel", "[redacted]")
        return row

    rows, report = from_store(store, redact=redact)
    assert not any("parking" in r["input"] for r in rows) and report["left_out"]["left out by the redact hook"] == 1
    assert any("[redacted]" in r["input"] for r in rows)


def test_a_limit_samples_across_retrievers(store):
    rows, _ = from_store(store, limit=2, seed=1)
    assert len(rows) == 2 and {r["provenance"]["retriever"] for r in rows} == {"bm25", "dense"}
    again, _ = from_store(store, limit=2, seed=1)
    assert [r["input"] for r in again] == [r["input"] for r in rows]  # seeded


def test_cli_from_store_writes_named_hashed_goldens_that_eval_reads(store, tmp_path, capsys):
    out = tmp_path / "traffic-goldens.jsonl"
    rc = main(["goldens", "from-store", "--store", store, "--run", "prod-1", "-o", str(out)])
    text = capsys.readouterr()
    assert rc == 0 and "content hash" in text.out and "judge-made expected ids" in text.err
    header = json.loads(out.read_text().splitlines()[0])["contextjudge_goldens"]
    g = load_goldens(out)
    assert g.name == "traffic-goldens" and g.fingerprint()["hash"] == header["hash"] and len(g) == header["goldens"]
    assert main(["goldens", "from-store", "--store", store, "--labelled", "--redact", "nosuchmod:f",
                 "-o", str(out)]) == 2
    assert "cannot load it" in capsys.readouterr().err


def test_a_limit_samples_across_days(tmp_path):
    """One retriever, four questions captured today and one three days ago: a sample of two takes one from each day,
    whatever the seed (a sample blind to days would miss the older one for most seeds)."""
    import sqlite3
    import time

    path = str(tmp_path / "days.db")
    today = [("how many vacation days do employees accrue per year", "vacation"),
             ("what do parking permits cost per month", "parking"),
             ("when are travel expenses reimbursed", "expenses"),
             ("do unused vacation days carry over", "vacation")]
    old = ("where do i buy a parking permit", "parking")
    cases = [_case(q, u, "dense") for q, u in [*today, old]]
    evaluate(cases, [ContextUtilizationMetric()], model=FakeJudge(), store=path, run_id="prod")
    with sqlite3.connect(path) as conn:
        moved = conn.execute("UPDATE cj_cases SET created_at = ? WHERE input = ?",
                             (time.time() - 3 * 86400, old[0])).rowcount
    assert moved == 1
    rows, report = from_store(path)
    assert report["groups"] == 2 and len(rows) == 5
    for seed in range(5):
        picked, _ = from_store(path, limit=2, seed=seed)
        assert len(picked) == 2 and old[0] in [r["input"] for r in picked], seed

"""Labels say what they are about (issue 37): a node label names its node (id, else the hash of its text), never a
rank, so labels written for one run's retrieval score another run's retrieval of the same questions truthfully.

The scenario of the issue: a user labels the good retriever's run, then evaluates a broken retriever (the same nodes,
ranked worst first, and on one question a node never labelled) on the same questions. The judge's agreement on the
broken run must be its true agreement, and the bias-corrected precision must be unbiased for the gold mean."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, cli, evaluate
from contextjudge.cases.labels import keyed_labels, labels_of, node_hash, resolve_labels, with_labels
from contextjudge.engine._calibrate import calibrate
from contextjudge.metrics import ContextualPrecisionMetric, gold_score
from contextjudge.stats import cohen_kappa, ppi_mean
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

N = 30


def _pool(i):
    """Question i's nodes in the good retriever's order: useful first. Useful nodes hold "fact"; of the others,
    "distractor" ones fool the judge (it says yes to them), "noise" ones do not."""
    useful = [f"Fact {i}a: the answer to question {i} is {i * 7}."]
    if i % 3 == 0:
        useful.append(f"Fact {i}b: question {i} was settled in {1900 + i}.")
    other = [f"Noise {i}: the canteen serves soup on day {i}.", f"Distractor {i}: question {i} is often asked.",
             f"Noise {i}c: parking rule {i}."]
    return useful + other


def _truth(text):
    return text.startswith("Fact")


JUDGE = FakeJudge(rules={"Fact": "yes", "Distractor": "yes"}, default="no")


def _case(i, nodes):
    return LLMTestCase(id=f"q{i}", input=f"What is the answer to question {i}?", actual_output=str(i * 7),
                       expected_output=f"The answer to question {i} is {i * 7}.", retrieval_context=nodes)


def _texts(tc):
    return [n.text for n in tc.retrieval_context]


def _good(i):
    return _case(i, _pool(i))


def _broken(i):
    nodes = list(reversed(_pool(i)))
    if i == 1:  # one node of the labelled pool does not come back; an unlabelled one does
        nodes[0] = f"Noise {i}z: a node nobody labelled."
    return _case(i, nodes)


def _wcp(flags):
    from contextjudge.metrics._formulas import weighted_cumulative_precision

    return weighted_cumulative_precision(flags)


LABELLED = sorted(random.Random(7).sample(range(N), 12))


def test_keyed_labels_follow_their_node_to_any_rank_and_unused_ones_are_listed():
    tc = with_labels(_good(1), {"labels": [_truth(t) for t in _pool(1)]})
    stored = labels_of(tc)
    assert "labels" not in stored and [e["hash"] for e in stored["nodes"]] == [node_hash(t) for t in _pool(1)]
    broken = _broken(1)
    view, unused = resolve_labels(broken, stored)
    # broken[0] is the new node (no label); the others are the pool reversed, each with its own label
    assert view["labels"] == [None] + [_truth(t) for t in _texts(broken)[1:]]
    assert [e["text"] for e in unused] == [_pool(1)[-1]]  # the node that did not come back: unused, applied nowhere
    assert gold_score("Contextual Precision", broken, stored) is None  # a node without a label: no gold score
    reversed_ok = _broken(2)
    assert gold_score("Contextual Precision", reversed_ok, labels_of(with_labels(_good(2), {
        "labels": [_truth(t) for t in _pool(2)]}))) == _wcp([_truth(t) for t in _texts(reversed_ok)])


def test_a_node_id_names_the_node_even_when_its_text_changes():
    from contextjudge.cases.testcase import RetrievedNode

    a = _case(5, [RetrievedNode("old text of doc 1", id="doc-1"), RetrievedNode("doc 2", id="doc-2")])
    stored = keyed_labels(a, {"labels": [True, False]})
    b = _case(5, [RetrievedNode("doc 2", id="doc-2"), RetrievedNode("new text of doc 1", id="doc-1")])
    assert resolve_labels(b, stored)[0]["labels"] == [False, True]


def _kappa_by_hand(cases):
    """The judge's agreement with the truth on every labelled node of ``cases`` (the judge says yes to facts and
    distractors; the node nobody labelled is left out), counted from the node texts."""
    pairs = [(t.startswith(("Fact", "Distractor")), _truth(t)) for tc in cases for t in _texts(tc) if "1z" not in t]
    tp = sum(v and g for v, g in pairs)
    fp = sum(v and not g for v, g in pairs)
    fn = sum(g and not v for v, g in pairs)
    return cohen_kappa(tp, fp, fn, len(pairs) - tp - fp - fn), len(pairs)


def _labels_file(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"key": f"q{i}", "labels": [_truth(t) for t in _pool(i)]}) + "\n"
                            for i in LABELLED))
    return str(path)


def test_broken_retriever_gets_the_judges_true_agreement_and_an_unbiased_correction(tmp_path, capsys):
    store = str(tmp_path / "cj.db")
    metric = [ContextualPrecisionMetric(model=JUDGE, include_reason=False)]
    evaluate([_good(i) for i in range(N)], metric, store=store, run_id="good", show_progress=False)
    assert cli.main(["label", _labels_file(tmp_path), "--store", store]) == 0
    evaluate([_broken(i) for i in range(N)], metric, store=store, run_id="broken", show_progress=False)
    capsys.readouterr()

    s = open_store(store)
    report = calibrate(s.labelled_cases(run="broken"), JUDGE, resamples=200)
    fam = report["node_usefulness"]
    true_kappa, n_items = _kappa_by_hand([_broken(i) for i in LABELLED])
    assert fam["items"] == n_items and fam["kappa"] == pytest.approx(true_kappa)
    # and on the run the labels were written for, its agreement there
    assert calibrate(s.labelled_cases(run="good"), JUDGE, resamples=200)["node_usefulness"]["kappa"] == \
        pytest.approx(_kappa_by_hand([_good(i) for i in LABELLED])[0])
    if 1 in LABELLED:
        assert [u["node"] for u in report["unused_labels"]] == [_pool(1)[-1]]

    # the bias-corrected precision of the broken run (as the report computes it): its interval holds the gold mean,
    # which the labels give every case (the truth from the user's labels, in the words)
    from contextjudge.metrics import fill_gold_scores

    result = fill_gold_scores(s.load_run("broken"))
    gold_all = [_wcp([_truth(t) for t in _texts(_broken(i))]) for i in range(N)]
    truth = sum(gold_all) / N
    est = result.corrected("Contextual Precision")
    assert est is not None and est.n_labelled == len([i for i in LABELLED if i != 1])
    assert est.corrected.low <= truth <= est.corrected.high
    golds = {tr.test_case.id: m.gold_score for tr in result.test_results for m in tr.metrics_data}
    assert {k for k, v in golds.items() if v is not None} == {f"q{i}" for i in LABELLED if i != 1}
    assert all(golds[f"q{i}"] == pytest.approx(gold_all[i]) for i in LABELLED if i != 1)


def test_the_correction_is_unbiased_over_random_label_draws():
    """Over many random draws of labelled questions (labels written on the good run, moved with their cases to the
    broken run), the corrected mean averages to the gold mean; rank-position labels would not."""
    broken = [_broken(i) for i in range(2, N)]
    judged = [_wcp([t.startswith(("Fact", "Distractor")) for t in _texts(tc)]) for tc in broken]
    gold_all = [_wcp([_truth(t) for t in _texts(tc)]) for tc in broken]
    keyed = {tc.id: labels_of(with_labels(_good(int(tc.id[1:])), {"labels": [_truth(t) for t in _pool(int(tc.id[1:]))]}))
             for tc in broken}
    rng = random.Random(3)
    estimates, positional = [], []
    for _ in range(200):
        pick = set(rng.sample(range(len(broken)), 10))
        gold = [gold_score("Contextual Precision", tc, keyed[tc.id]) if j in pick else None
                for j, tc in enumerate(broken)]
        wrong = [_wcp([_truth(t) for t in _pool(int(tc.id[1:]))]) if j in pick else None
                 for j, tc in enumerate(broken)]
        estimates.append(ppi_mean(judged, gold).corrected.estimate)
        positional.append(ppi_mean(judged, wrong).corrected.estimate)
    truth = sum(gold_all) / len(gold_all)
    assert abs(sum(estimates) / len(estimates) - truth) < 0.01
    assert abs(sum(positional) / len(positional) - truth) > 0.2  # what rank-position labels gave


def test_positional_labels_in_a_schema_4_store_are_keyed_to_the_case_they_were_given_for(tmp_path, caplog):
    store = str(tmp_path / "old.db")
    evaluate([_good(i) for i in range(4)], [ContextualPrecisionMetric(model=JUDGE)], store=store, run_id="good",
             show_progress=False)
    open_store(store).close()
    con = sqlite3.connect(store)  # what a schema-4 contextjudge left: labels by rank, no log, no goldens columns
    con.execute("DROP TABLE cj_label_log")
    con.execute("ALTER TABLE cj_runs DROP COLUMN goldens_hash")
    con.execute("ALTER TABLE cj_runs DROP COLUMN goldens_name")
    rows = [("q0", json.dumps({"labels": [_truth(t) for t in _pool(0)]})),
            ("q1", json.dumps({"labels": [True, False]})),  # two labels for a case of four nodes: unmatched
            ("q2", json.dumps({"statement_labels": [True], "relevance_labels": [False] * 4}))]
    con.executemany("INSERT INTO cj_labels (case_key, input, labels, created_at) VALUES (?, NULL, ?, 9e12)", rows)
    con.execute("UPDATE cj_meta SET value = '4' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    evaluate([_broken(i) for i in range(4)], [ContextualPrecisionMetric(model=JUDGE)], store=store,
             run_id="broken", show_progress=False)  # opens (and so migrates) the store first
    s = open_store(store)
    assert s.schema_version == 5
    q0 = next(tc for tc in s.labelled_cases(run="broken") if tc.id == "q0")
    assert resolve_labels(q0, labels_of(q0))[0]["labels"] == [_truth(t) for t in _texts(_broken(0))]
    assert [u["case_key"] for u in s.unmatched_labels()] == ["q1"]
    assert "'q1'" in caplog.text and "not used" in caplog.text
    q2 = next(tc for tc in s.labelled_cases(run="good") if tc.id == "q2")
    assert labels_of(q2)["statements"] == [_good(2).expected_output]


def test_rank_order_labels_for_a_case_whose_runs_retrieved_differently_need_the_run(tmp_path, capsys):
    store = str(tmp_path / "cj.db")
    metric = [ContextualPrecisionMetric(model=JUDGE, include_reason=False)]
    evaluate([_good(i) for i in range(3)], metric, store=store, run_id="good", show_progress=False)
    evaluate([_broken(i) for i in range(3)], metric, store=store, run_id="broken", show_progress=False)
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"key": "q2", "labels": [_truth(t) for t in _pool(2)]}) + "\n")
    assert cli.main(["label", str(path), "--store", store]) == 2
    err = capsys.readouterr().err
    assert "gives node labels by rank for case 'q2'" in err and "--run" in err and "Nothing was written" in err
    assert open_store(store).labelled_cases() == []
    assert cli.main(["label", str(path), "--store", store, "--run", "good"]) == 0
    (q2,) = open_store(store).labelled_cases(run="broken")
    assert resolve_labels(q2, labels_of(q2))[0]["labels"] == [_truth(t) for t in _texts(_broken(2))]


def test_a_rank_order_labels_file_becomes_one_that_names_its_nodes(tmp_path, capsys):
    """`label` keys rank-order labels to the nodes of the run they were written for; `label --export` writes them out
    as a JSONL file that names its nodes, which `label` reads back into another store as the same labels."""
    metric = [ContextualPrecisionMetric(model=JUDGE, include_reason=False)]
    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    evaluate([_good(i) for i in range(3)], metric, store=a, run_id="good", show_progress=False)
    evaluate([_broken(i) for i in range(3)], metric, store=b, run_id="broken", show_progress=False)
    assert cli.main(["label", _labels_file(tmp_path), "--store", a]) == 0
    out = str(tmp_path / "keyed.jsonl")
    assert cli.main(["label", "--export", out, "--store", a]) == 0
    records = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert {r["key"] for r in records} == {f"q{i}" for i in LABELLED if i < 3}
    assert all("labels" not in r and all("hash" in n and "text" in n for n in r["nodes"]) for r in records)
    assert cli.main(["label", out, "--store", b]) == 0  # another retrieval: the labels follow their nodes
    for tc in open_store(b).labelled_cases(run="broken"):
        view = resolve_labels(tc, labels_of(tc))[0]["labels"]
        assert view == [None if "1z" in t else _truth(t) for t in _texts(tc)]
    capsys.readouterr()


def test_calibrate_names_an_unused_label_by_its_nodes_text_not_its_id(tmp_path, capsys):
    """A LlamaIndex-style node id is a UUID nobody can read: calibrate lists an unused label by the text it was
    given for (issue 48)."""
    from contextjudge.cases.testcase import RetrievedNode

    gone_id = "0b5c1a3e-9f43-4c1e-a2d7-5c2e8f1d9b70"
    nodes = [RetrievedNode(id=f"node-{k}", text=t) for k, t in enumerate(_pool(4))]
    case = LLMTestCase(input="Question 4?", expected_output="The answer to question 4 is 28.", retrieval_context=nodes,
                       id="q4")
    store = str(tmp_path / "cj.db")
    evaluate([case], [ContextualPrecisionMetric(model=JUDGE)], store=store, run_id="r", show_progress=False)
    path = tmp_path / "labels.jsonl"
    record = {"key": "q4", "nodes": [{"id": n.id, "text": n.text, "useful": _truth(n.text)} for n in nodes]
              + [{"id": gone_id, "text": "Fact 4z: a chunk the retriever no longer returns.", "useful": True}]}
    path.write_text(json.dumps(record) + "\n")
    assert cli.main(["label", str(path), "--store", store]) == 0
    capsys.readouterr()
    assert cli.main(["calibrate", "--store", store, "--model", "fake", "--no-save"]) in (0, 1)
    out = capsys.readouterr().out
    assert "1 node label(s) unused" in out
    assert "Fact 4z: a chunk the retriever no longer returns." in out and gone_id not in out


def test_a_label_its_log_row_and_its_queue_tag_are_written_together_or_not_at_all(tmp_path):
    """The store refuses the log row (a SQLite trigger, as a full disk or a lost connection would mid-way): the
    label is not kept either, and the next label is written whole."""
    from contextjudge.cases.labels import node_ref
    from contextjudge.errors import StoreError

    store_path = str(tmp_path / "cj.db")
    evaluate([_good(2)], [ContextualPrecisionMetric(model=JUDGE)], store=store_path, run_id="r",
             show_progress=False)
    key = _good(2).id
    conn = sqlite3.connect(store_path)
    conn.execute("CREATE TRIGGER no_log BEFORE INSERT ON cj_label_log BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    conn.commit()
    store = open_store(store_path)
    node = node_ref(_pool(2)[0])
    with pytest.raises(StoreError, match="disk full"):
        store.give_label(key, "labels", node, True, who="ann", queue="estimate")
    assert store.export_labels() == [] and store.label_log() == []
    conn.execute("DROP TRIGGER no_log")
    conn.commit()
    conn.close()
    store.give_label(key, "labels", node, True, who="ann", queue="estimate")
    assert [r["value"] for r in store.label_log()] == [True]
    (row,) = sqlite3.connect(store_path).execute("SELECT labels FROM cj_labels").fetchall()
    assert json.loads(row[0])["queue"] == "estimate"


def test_a_label_and_its_log_row_are_one_transaction_on_postgresql_too(pg_store):
    from sqlalchemy import text

    from contextjudge.cases.labels import node_ref
    from contextjudge.errors import StoreError

    evaluate([_good(2)], [ContextualPrecisionMetric(model=JUDGE)], store=pg_store, run_id="r", show_progress=False)
    key, node = _good(2).id, node_ref(_pool(2)[0])
    with pg_store.engine.begin() as conn:
        conn.execute(text("CREATE OR REPLACE FUNCTION cj_no_log() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION "
                          "'disk full'; END $$ LANGUAGE plpgsql"))
        conn.execute(text("CREATE TRIGGER no_log BEFORE INSERT ON cj_label_log FOR EACH ROW EXECUTE FUNCTION "
                          "cj_no_log()"))
    try:
        with pytest.raises(StoreError, match="disk full"):
            pg_store.give_label(key, "labels", node, True, who="ann", queue="estimate")
        assert pg_store.export_labels() == [] and pg_store.label_log() == []
    finally:
        with pg_store.engine.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS no_log ON cj_label_log"))
            conn.execute(text("DROP FUNCTION IF EXISTS cj_no_log()"))
    pg_store.give_label(key, "labels", node, True, who="ann", queue="estimate")
    assert [r["value"] for r in pg_store.label_log()] == [True]
    assert [n.get("labels") for n in pg_store.export_labels()[0]["nodes"]] == [True]

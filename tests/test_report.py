"""The HTML report: statistics, content, escaping, compare mode, and a real render in headless Chromium.

Chromium comes from Debian's chromium package (``apt-get install -y chromium``; .ci/run installs it). It runs with
networking off, and the test checks that the charts and tables are in the rendered DOM and that script injected
through a node's text, the input and a judge's reason did not run. A control page with the same payload left
unescaped proves the check would notice if it had.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, MetricResult, RetrievedNode, evaluate
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)
from contextjudge.report import bootstrap_mean, paired_difference, render_report, write_report
from contextjudge.report._script import script_tag
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

SCRIPT_PAYLOAD = "<script>document.title='PWNED-SCRIPT';document.body.setAttribute('data-pwned','script')</script>"
IMG_PAYLOAD = "<img src=x onerror=\"document.title='PWNED-IMG';document.body.setAttribute('data-pwned','img')\">"

DOCS = {
    "vacation": "Employees get 25 vacation days per year. Unused days carry over until March.",
    "parking": "The parking garage opens at 6am. Visitor parking is on level 2.",
    "expenses": "Expenses above 500 euros need a manager's approval. Receipts are required.",
    "laptops": "Every engineer gets a laptop refresh every three years.",
}
QUESTIONS = [
    ("How many vacation days do employees get per year?", "Employees get 25 vacation days per year. "
     "Unused days carry over until March.", "vacation"),
    ("Which expenses need a manager's approval?", "Expenses above 500 euros need a manager's approval. "
     "Receipts must be kept for seven years.", "expenses"),
    ("When does the parking garage open?", "The parking garage opens at 6am.", "parking"),
    ("How often do engineers get a new laptop?", "Every engineer gets a laptop refresh every three years.",
     "laptops"),
]


def _cases(good: bool) -> list[LLMTestCase]:
    out = []
    for q, expected, doc in QUESTIONS:
        others = [d for k, d in DOCS.items() if k != doc]
        ranked = [DOCS[doc]] + others[:2] if good else others[:2] + [DOCS[doc]]
        out.append(LLMTestCase(input=q, actual_output=expected.split(". ")[0] + ".", expected_output=expected,
                               retrieval_context=[RetrievedNode(t, id=f"doc-{i}") for i, t in enumerate(ranked)]))
    # a node, an input and an output carrying markup that must show as text
    out.append(LLMTestCase(input=f"Is {IMG_PAYLOAD} escaped?", actual_output=SCRIPT_PAYLOAD,
                           expected_output="Markup shows as text.",
                           retrieval_context=[f"Markup shows as text {SCRIPT_PAYLOAD}", IMG_PAYLOAD]))
    return out


def _metrics(judge):
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge, threshold=0.7)]


@pytest.fixture
def two_runs(tmp_path):
    db = str(tmp_path / "results.db")
    judge = FakeJudge()
    evaluate(_cases(good=False), _metrics(judge), store=db, run_id="weak", run_name="weak retriever")
    evaluate(_cases(good=True), _metrics(judge), store=db, run_id="good", run_name="good retriever")
    # a judge reason carrying markup too
    s = open_store(db)
    s.save_result("good", s.load_cases("good")[-1].case_key, MetricResult(
        name="Contextual Precision", score=0.0, threshold=0.5, success=False, reason=f"reason {IMG_PAYLOAD}",
        verdicts=[{"rank": 1, "id": "n1", "verdict": "no", "reason": f"judge said {SCRIPT_PAYLOAD}"},
                  {"rank": 2, "id": "n2", "verdict": "no", "reason": "nothing"}]))
    s.close()
    return db


# ---------------------------------------------------------------------------------------------- statistics
def test_bootstrap_mean_is_deterministic_and_brackets_the_mean():
    vals = [0.1, 0.4, 0.35, 0.8, 0.9, 0.55, 0.6, 0.2, 1.0, 0.0]
    a, b = bootstrap_mean(vals), bootstrap_mean(vals)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.estimate == pytest.approx(0.49)
    assert a.low < a.estimate < a.high
    assert a.low >= 0.0 and a.high <= 1.0
    assert bootstrap_mean([]).estimate is None
    one = bootstrap_mean([0.5])
    assert one.estimate == 0.5 and one.low is None


def test_paired_difference_sees_a_consistent_improvement():
    pairs = [(0.2 + 0.01 * i, 0.5 + 0.01 * i) for i in range(30)]
    iv = paired_difference(pairs)
    assert iv.estimate == pytest.approx(0.3)
    assert iv.low == pytest.approx(0.3) and iv.high == pytest.approx(0.3)
    noisy = paired_difference([(0.5, 0.6), (0.5, 0.4), (0.6, 0.6), (0.2, 0.3), (0.9, 0.7)])
    assert noisy.low < 0 < noisy.high


# ---------------------------------------------------------------------------------------------- content
def test_report_has_metrics_cases_nodes_and_unsupported_statements(two_runs):
    page = render_report(store=two_runs, run="good")
    for name in ("Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization"):
        assert name in page
    assert page.count('<svg class="cj-hist"') == 4
    assert "95% CI" in page and "Pass rate" in page
    assert page.count("<details class='case'") == 5
    assert "<td class='v-yes'>" in page and "<td class='v-no'>" in page
    assert "Receipts must be kept for seven years." in page  # recall's unsupported statement
    assert "cj-unsupported" in page
    assert "scripted: yes" in page  # the judge's reasons
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<link" not in page and "src=" not in page.replace("src=x", "")


def test_all_user_text_is_escaped(two_runs):
    page = render_report(store=two_runs, run="good")
    assert page.count("<script") == 1 and script_tag() in page  # the report's own script, and no other
    assert "<img" not in page
    assert "&lt;script&gt;document.title=&#x27;PWNED-SCRIPT&#x27;" in page
    assert "&lt;img src=x onerror=&quot;" in page


def test_compare_mode_pairs_cases_and_shows_the_difference(two_runs):
    page = render_report(store=two_runs, run="good", compare="weak")
    assert "Compared with weak" in page
    assert "Paired difference" in page and "Cases that changed most" in page
    m = re.search(r"<tr><td>Contextual Precision</td><td class='num'>([\d.]+)</td><td class='num'>([\d.]+)</td>"
                  r"<td class='num'>([+-][\d.]+)</td>", page)
    assert m, "compare row for precision"
    assert float(m.group(3)) > 0  # the good retriever ranks the useful node first
    assert 'class="cj-bar-base"' in page  # baseline distribution drawn behind


def test_report_of_an_in_memory_result(tmp_path):
    res = evaluate(_cases(True)[:2], [ContextualPrecisionMetric(model=FakeJudge())])
    path = write_report(tmp_path / "r.html", res)
    assert "Contextual Precision" in Path(path).read_text()


# ---------------------------------------------------------------------------------------------- browser
def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _chrome(binary: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
           "--metrics-recording-only", "--mute-audio", "--hide-scrollbars",
           "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
           "--virtual-time-budget=3000", *args]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def chromium():
    binary = _chromium()
    if binary is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    return binary


def test_report_renders_in_headless_chromium_and_injected_script_does_not_run(two_runs, tmp_path, chromium):
    report = tmp_path / "report.html"
    write_report(report, store=two_runs, run="good", compare="weak")
    out = _chrome(chromium, tmp_path, "--dump-dom", report.as_uri())
    dom = out.stdout
    assert "<body" in dom, f"chromium printed no DOM: {out.stderr[-1500:]}"
    assert "<title>contextjudge report</title>" in dom
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert body == '<body data-cj-ready="1">', body  # the report's script ran; no data-pwned attribute was set
    assert dom.count("<script") == 1 and "<img" not in dom
    assert "&lt;script&gt;document.title" in dom  # shown as text
    assert dom.count('<svg class="cj-hist"') == 4
    assert dom.count("<rect class=\"cj-bar\"") >= 4
    for table in ("cj-summary", "cj-compare", "cj-changes", "cj-nodes"):
        assert f'class="{table}"' in dom, table

    shot = tmp_path / "report.png"
    out = _chrome(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", report.as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000, out.stderr[-1500:]
    keep = os.environ.get("CONTEXTJUDGE_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_the_browser_check_would_catch_a_script_that_ran(tmp_path, chromium):
    page = tmp_path / "unsafe.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>ok</title></head><body><p>{IMG_PAYLOAD}</p>"
                    f"<p>{SCRIPT_PAYLOAD}</p></body></html>")
    dom = _chrome(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "data-pwned" in re.search(r"<body[^>]*>", dom).group(0)
    assert "PWNED" in re.search(r"<title>(.*?)</title>", dom, re.S).group(1)


def test_conversations_and_errors_render(tmp_path):
    from contextjudge import ConversationalTestCase, Turn
    from contextjudge.metrics import TurnContextualPrecisionMetric, TurnContextualRecallMetric

    conv = ConversationalTestCase(turns=[
        Turn(role="user", content="Tell me about vacation."),
        Turn(role="assistant", content="You get 25 days.", retrieval_context=[DOCS["vacation"], DOCS["parking"]],
             expected_output="Employees get 25 vacation days per year."),
        Turn(role="user", content="And <b>unused</b> days?"),
        Turn(role="assistant", content="They carry over.", retrieval_context=[DOCS["parking"], DOCS["vacation"]],
             expected_output="Unused days carry over until March."),
    ], name="vacation chat")
    judge = FakeJudge()
    res = evaluate([conv, _cases(True)[0]], [TurnContextualPrecisionMetric(model=judge),
                                             TurnContextualRecallMetric(model=judge)])
    page = render_report(res)
    assert "vacation chat" in page and "&lt;b&gt;unused&lt;/b&gt;" in page
    assert page.count("class=\"cj-nodes\"") == 3  # one per assistant turn with retrieval, one for the other case
    assert "no metric applies" in page  # the single-turn case got no turn metric, and says so


def test_images_show_as_markers_not_tokens(tmp_path):
    from contextjudge import LLMTestCase, MLLMImage, evaluate
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.report import write_report
    from contextjudge.testing import FakeJudge

    img = MLLMImage(url="https://example.com/e.jpg", alt="the tower")
    case = LLMTestCase(input=f"What is this? {img}", retrieval_context=[f"A photo {img} of Paris."])
    res = evaluate([case], [ContextualRelevancyMetric(model=FakeJudge(supports_images=True))], show_progress=False)
    out = tmp_path / "r.html"
    write_report(str(out), res)
    page = out.read_text()
    assert "[image 1: the tower]" in page and "[[contextjudge:image:" not in page

"""Labels in a golden's fields reach the store through ``contextjudge eval`` and ``capture(goldens=...)``, keyed to
the nodes they name; and a run records which goldens it ran, so ``compare`` and ``trend`` say when two runs ran
different ones (issue 37)."""

from __future__ import annotations

import json

import pytest
from test_cli import GOLDENS, TINY_ADAPTER, TINY_APP, run

from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.cases.labels import labels_of, resolve_labels
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

DOCS = {"vacation": "Employees get 25 vacation days per year. Unused days carry over until March.",
        "parking": "The parking garage opens at 6am. Visitor parking is on level 2.",
        "expenses": "Expenses above 500 euros need a manager's approval. Receipts are required."}
TOPIC = {"g1": "vacation", "g2": "parking", "g3": "expenses"}


def _labelled_goldens():
    """The goldens with node labels by text (the doc of the golden's topic is useful, the others not) and, on g2,
    statement labels for its expected output."""
    out = []
    for g in GOLDENS:
        row = dict(g, nodes=[{"text": text, "useful": name == TOPIC[g["id"]]} for name, text in DOCS.items()])
        if g["id"] == "g2":
            row["statement_labels"] = [True]
        out.append(row)
    return out


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "tinyrag.py").write_text(TINY_APP)
    (tmp_path / "tinyadapter.py").write_text(TINY_ADAPTER)
    dist = tmp_path / "tinyadapter-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyadapter\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[contextjudge.apps]\ntiny = tinyadapter:ADAPTER\n")
    (tmp_path / "goldens.jsonl").write_text("".join(json.dumps(g) + "\n" for g in _labelled_goldens()))
    changed = _labelled_goldens()
    changed[1]["expected_output"] = "The garage opens at 6am; visitors park on level 2."
    (tmp_path / "goldens-v2.jsonl").write_text("".join(json.dumps(g) + "\n" for g in changed))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONTEXTJUDGE_STORE", raising=False)
    import sys

    for mod in ("tinyrag", "tinyadapter"):
        sys.modules.pop(mod, None)
    return tmp_path


def _eval(capsys, app, run_id, goldens="goldens.jsonl"):
    rc, out, err = run(capsys, "eval", "--app", f"tinyrag:{app}", "--goldens", goldens, "--model", "fake",
                       "--store", "res.db", "--run-id", run_id, "--no-progress", "--metrics", "precision,recall")
    assert rc in (0, 1), err
    return out


def test_eval_brings_golden_labels_to_the_store_keyed_to_their_nodes(capsys, project):
    _eval(capsys, "app", "good")
    _eval(capsys, "weak_app", "weak")  # the same docs, ranked worst first
    s = open_store("res.db")
    for run_id in ("good", "weak"):
        for tc in s.labelled_cases(run=run_id):
            topic = TOPIC[tc.id] if tc.id in TOPIC else next(TOPIC[g["id"]] for g in GOLDENS
                                                                  if g["input"] == tc.input)
            view, unused = resolve_labels(tc, labels_of(tc))
            assert view["labels"] == [n.text == DOCS[topic] for n in tc.retrieval_context] and unused == []
        assert len(s.labelled_cases(run=run_id)) == 3
        # the gold precision of every case of the run: 1.0 with the useful doc first, 1/3 with it last
        golds = sorted(m.gold_score for tr in s.load_run(run_id).test_results for m in tr.metrics_data
                       if m.name == "Contextual Precision")
        assert golds == ([1.0, 1.0, 1.0] if run_id == "good" else pytest.approx([1 / 3] * 3))
    recall = [m.gold_score for tr in s.load_run("good").test_results for m in tr.metrics_data
              if m.name == "Contextual Recall"]
    assert sorted(g for g in recall if g is not None) == [1.0]  # g2's statement label, for its expected output


def test_runs_record_their_goldens_and_compare_and_trend_say_when_they_differ(capsys, project):
    _eval(capsys, "app", "a")
    _eval(capsys, "app", "b")
    _eval(capsys, "app", "c", goldens="goldens-v2.jsonl")
    s = open_store("res.db")
    ga, gb, gc = (s.run_info(r).goldens for r in "abc")
    assert ga == gb and ga["name"] == "goldens.jsonl" and len(ga["hash"]) == 16
    assert gc["name"] == "goldens-v2.jsonl" and gc["hash"] != ga["hash"]
    rc, out, _ = run(capsys, "compare", "a", "b", "--store", "res.db")
    assert rc == 0 and "different goldens" not in out
    # runs on different golden sets are not compared unless told (issue 51)
    rc, out, err = run(capsys, "compare", "a", "c", "--store", "res.db")
    assert rc == 2 and "the runs ran different goldens: the baseline goldens.jsonl (content hash " \
        f"{ga['hash']}), this run goldens-v2.jsonl (content hash {gc['hash']})" in err
    assert "--allow-different-goldens" in err and "paired" not in out
    rc, out, _ = run(capsys, "compare", "a", "c", "--store", "res.db", "--allow-different-goldens")
    assert rc == 0 and "NOTE: the runs ran different goldens: the baseline goldens.jsonl (content hash " \
        f"{ga['hash']}), this run goldens-v2.jsonl (content hash {gc['hash']})" in out
    rc, out, _ = run(capsys, "trend", "--store", "res.db", "--by", "day")
    assert rc == 0 and f"goldens changed between run b and run c: goldens.jsonl ({ga['hash']}) -> goldens-v2.jsonl" \
        in out
    rc, out, _ = run(capsys, "trend", "--store", "res.db", "--by", "day", "--json")
    assert [(c["before"], c["after"]) for c in json.loads(out)["goldens_changes"]] == [("b", "c")]
    # the trend page says it too
    rc, out, _ = run(capsys, "trend", "--store", "res.db", "--by", "day", "--html", "trend.html")
    assert rc == 0 and (f"The goldens changed between run b and run c: goldens.jsonl (content hash {ga['hash']}) "
                        f"\u2192 goldens-v2.jsonl (content hash {gc['hash']}); windows on either side judged "
                        "different questions.") in _page_text(project / "trend.html")


def test_report_compare_on_other_goldens_is_refused_unless_told(capsys, project):
    """`report --compare` follows `compare`'s rule (issue 51): runs on different golden sets are refused, with the same
    message, before any page is written; --allow-different-goldens writes it and says why the figures may differ."""
    _eval(capsys, "app", "a")
    _eval(capsys, "app", "b")
    _eval(capsys, "app", "c", goldens="goldens-v2.jsonl")
    rc, out, err = run(capsys, "report", "c", "--compare", "a", "--store", "res.db", "-o", "page.html")
    assert rc == 2 and "the runs ran different goldens: the baseline goldens.jsonl (content hash " in err
    assert "--allow-different-goldens" in err and not (project / "page.html").exists()
    rc, out, err = run(capsys, "report", "c", "--compare", "a", "--store", "res.db", "-o", "page.html",
                       "--allow-different-goldens")
    assert rc == 0 and (project / "page.html").exists() and "NOTE: the runs ran different goldens" in out
    rc, out, err = run(capsys, "report", "b", "--compare", "a", "--store", "res.db", "-o", "same.html")
    assert rc == 0 and "different goldens" not in out + err and (project / "same.html").exists()


def _page_text(path):
    """The visible text of a rendered page (tags, styles and scripts left out), spaces collapsed."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts, self.skip = [], 0

        def handle_starttag(self, tag, attrs):
            self.skip += tag in ("style", "script")

        def handle_endtag(self, tag):
            self.skip -= tag in ("style", "script")

        def handle_data(self, data):
            if not self.skip:
                self.parts.append(data)

    p = Text()
    p.feed(path.read_text(encoding="utf-8"))
    return " ".join("".join(p.parts).split())


def test_the_html_compare_page_says_the_runs_ran_different_goldens(capsys, project):
    """The page `report --compare` and `compare -o` write with --allow-different-goldens says what the CLI's NOTE
    says: both runs' golden sets by name and content hash, and that a difference may come from the changed goldens;
    on the same goldens it names the one set and warns of nothing."""
    _eval(capsys, "app", "a")
    _eval(capsys, "app", "b")
    _eval(capsys, "app", "c", goldens="goldens-v2.jsonl")
    s = open_store("res.db")
    ga, gc = s.run_info("a").goldens, s.run_info("c").goldens
    s.close()
    rc, _, err = run(capsys, "report", "c", "--compare", "a", "--store", "res.db", "-o", "page.html",
                     "--allow-different-goldens")
    assert rc == 0, err
    rc, _, err = run(capsys, "compare", "a", "c", "--store", "res.db", "-o", "cmp.html", "--allow-different-goldens")
    assert rc == 0, err
    for page in ("page.html", "cmp.html"):
        text = _page_text(project / page)
        assert (f"Different golden sets. The baseline ran goldens.jsonl (content hash {ga['hash']}), this run ran "
                f"goldens-v2.jsonl (content hash {gc['hash']}): a difference may come from the changed questions "
                "and answers, not only from the app.") in text, text[text.find("Compared with"):][:800]
        assert "class='cj-different-goldens'" in (project / page).read_text(encoding="utf-8")
    rc, _, err = run(capsys, "report", "b", "--compare", "a", "--store", "res.db", "-o", "same.html")
    assert rc == 0, err
    text = _page_text(project / "same.html")
    assert f"Both runs ran the goldens goldens.jsonl (content hash {ga['hash']})." in text
    assert "Different golden sets" not in text


def test_capture_with_goldens_brings_their_labels_and_records_them(tmp_path):
    store = str(tmp_path / "cap.db")
    session = CaptureSession([ContextualPrecisionMetric()], model=FakeJudge(), goldens=_labelled_goldens(),
                             store=store, mode="background")
    nodes = [DOCS["parking"], DOCS["expenses"], DOCS["vacation"]]
    session.submit(CapturedCase(LLMTestCase(input=GOLDENS[0]["input"], actual_output="25 days.",
                                            retrieval_context=nodes)))
    assert session.flush(20)
    session.close()
    s = open_store(store)
    (tc,) = s.labelled_cases()
    assert resolve_labels(tc, labels_of(tc))[0]["labels"] == [False, False, True]
    (info,) = s.list_runs()
    assert info.goldens["name"] is None and len(info.goldens["hash"]) == 16
    golds = [m.gold_score for tr in s.load_run(info.run_id).test_results for m in tr.metrics_data]
    assert golds == [pytest.approx(1 / 3)]


def test_positional_node_labels_in_a_golden_without_its_nodes_are_left_out_with_a_warning(tmp_path, caplog):
    session = CaptureSession([ContextualPrecisionMetric()], model=FakeJudge(), mode="background",
                             goldens=[{"input": "q one", "expected_output": "A.", "labels": [1, 0]}])
    session.submit(CapturedCase(LLMTestCase(input="q one", actual_output="A.", retrieval_context=["A.", "B."])))
    assert session.flush(20)
    session.close()
    assert labels_of(session.cases[0].test_case) is None
    assert "gives node labels by rank but no retrieval_context" in caplog.text


def test_eval_baseline_on_other_goldens_is_refused_before_the_app_runs_unless_told(capsys, project):
    """Issue 51: `eval --baseline` refuses a baseline run made on a different golden set (exit 2, before any case
    is captured or scored), as `compare` does; --allow-different-goldens compares anyway, and the same goldens pass."""
    _eval(capsys, "app", "a")
    before = len(open_store("res.db").list_runs())
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens-v2.jsonl", "--model", "fake",
                       "--store", "res.db", "--run-id", "v2", "--no-progress", "--metrics", "precision,recall",
                       "--baseline", "a")
    assert rc == 2 and "the runs ran different goldens: the baseline goldens.jsonl" in err
    assert "--allow-different-goldens" in err and "captured" not in err + out
    assert len(open_store("res.db").list_runs()) == before  # nothing ran
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens-v2.jsonl", "--model", "fake",
                       "--store", "res.db", "--run-id", "v2", "--no-progress", "--metrics", "precision,recall",
                       "--baseline", "a", "--allow-different-goldens")
    assert rc in (0, 1) and "compared with the baseline" in out, err
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake",
                       "--store", "res.db", "--run-id", "same", "--no-progress", "--metrics", "precision,recall",
                       "--baseline", "a")
    assert "different goldens" not in err and "compared with the baseline" in out, err

"""Gold labels in the store (``contextjudge label``, ``ResultsStore.add_labels`` / ``labelled_cases``), the
bias-corrected line of the CLI summary, and a version-1 store upgraded in place."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from contextjudge import LLMTestCase, cli, evaluate
from contextjudge._result import EvaluationResult, MetricResult, TestResult
from contextjudge.cases.labels import LABELS_KEY, resolve_labels
from contextjudge.cli import _shared
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.store import SCHEMA_VERSION, open_store
from contextjudge.testing import FakeJudge

NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am.",
         "Unused vacation days carry over until March."]


def _cases():
    return [LLMTestCase(id="c-vacation", input="How many vacation days do I get?", actual_output="25 days.",
                        expected_output="Employees get 25 vacation days per year.", retrieval_context=NODES),
            LLMTestCase(input="When does the parking garage open?", actual_output="At 6am.",
                        expected_output="The parking garage opens at 6am.", retrieval_context=NODES),
            LLMTestCase(input="Do vacation days carry over?", actual_output="Until March.",
                        expected_output="Unused vacation days carry over until March.", retrieval_context=NODES)]


@pytest.fixture
def store_path(tmp_path):
    path = str(tmp_path / "res.db")
    evaluate(_cases(), [ContextualPrecisionMetric(model=FakeJudge())], store=path, run_id="r1", show_progress=False)
    return path


def _view(tc):
    """The case's stored labels lined up with its nodes (they are stored keyed by node identity)."""
    return resolve_labels(tc, tc.additional_metadata[LABELS_KEY])[0]


def _write(tmp_path, records, name="labels.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    return str(path)


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_label_matches_by_key_and_by_input_and_lists_the_unmatched(capsys, tmp_path, store_path):
    labels = _write(tmp_path, [
        {"key": "c-vacation", "labels": [1, 0, 1]},
        {"input": "  when does the PARKING garage open", "labels": ["no", "yes", "no"],
         "relevance_labels": [False, True, False]},
        {"input": "Who is the CEO?", "labels": [1, 0, 0]},
        {"id": "no-such-case", "labels": [1]},
    ])
    rc, out, err = run(capsys, "label", labels, "--store", store_path)
    assert rc == 0, err
    assert "labelled 2 case(s)" in out and "from 2 of 4 record(s) (1 matched by key, 1 by input)" in out
    assert "2 record(s) matched no captured case" in out
    assert "record 3 (line 3): input 'Who is the CEO?'" in out and "record 4 (line 4): key 'no-such-case'" in out

    s = open_store(store_path)
    run1 = s.load_run("r1")
    by_input = {tr.test_case.input: tr.test_case for tr in run1.test_results}
    assert _view(by_input["How many vacation days do I get?"]) == {"labels": [True, False, True]}
    assert _view(by_input["When does the parking garage open?"]) == {
        "labels": [False, True, False], "relevance_labels": [False, True, False]}
    assert LABELS_KEY not in (by_input["Do vacation days carry over?"].additional_metadata or {})
    labelled = s.labelled_cases()
    assert sorted(tc.input for tc in labelled) == ["How many vacation days do I get?",
                                                   "When does the parking garage open?"]
    assert [tc.input for tc in s.labelled_cases("r1")] == [tc.input for tc in labelled]
    # labels again: the newer labels replace the old ones
    rc, out, _ = run(capsys, "label", _write(tmp_path, [{"key": "c-vacation", "labels": [0, 0, 1]}], "b.jsonl"),
                     "--store", store_path)
    assert rc == 0
    again = {tc.input: tc for tc in open_store(store_path).labelled_cases()}
    assert _view(again["How many vacation days do I get?"])["labels"] == [False, False, True]


def test_label_matches_cases_in_every_run(capsys, tmp_path, store_path):
    evaluate(_cases(), [ContextualPrecisionMetric(model=FakeJudge())], store=store_path, run_id="r2",
             show_progress=False)
    rc, out, _ = run(capsys, "label", _write(tmp_path, [{"input": "Do vacation days carry over?", "labels": [0, 0, 1]}]),
                     "--store", store_path)
    # the same case in r1 and r2 has one key (position and content): one labels entry, seen by both runs
    assert rc == 0 and "labelled 1 case(s)" in out
    s = open_store(store_path)
    assert len(s.labelled_cases("r1")) == 1 and len(s.labelled_cases("r2")) == 1


def test_label_with_nothing_matched_exits_1(capsys, tmp_path, store_path):
    rc, out, _ = run(capsys, "label", _write(tmp_path, [{"input": "Who is the CEO?", "labels": [1, 0, 0]}]),
                     "--store", store_path)
    assert rc == 1 and "labelled 0 case(s)" in out and "FAILED: no record matched" in out


@pytest.mark.parametrize("records, message", [
    ([{"key": "c-vacation", "labels": [1, "maybe", 0]}],
     "labels record 1 (line 1): labels[1]: a label must be yes/no"),
    ([{"key": "c-vacation"}], "labels record 1 (line 1): no label field"),
    ([{"labels": [1, 0, 1]}], "labels record 1 (line 1): say which case it labels"),
    # counts are checked against the matched case, not left for calibrate or the report to trip over
    ([{"key": "c-vacation", "labels": [1, 0, 1, 1]}],
     "labels record 1 (line 1): case 'c-vacation': 4 labels for 3 retrieved"),
    # statement labels name their statements, so a label cannot land on another statement
    ([{"key": "c-vacation", "statement_labels": [1, 1, 0]}],
     "labels record 1 (line 1): 'statement_labels' without 'statements'"),
    # an input that is not a string (a list matched by its printed form): refused with what to do
    ([{"input": ["Do vacation days carry over?"], "labels": [0, 0, 1]}],
     "labels record 1 (line 1): 'input' must be the case's question as a string, got list"),
    # two records for one case: refused, not "the last one wins"
    ([{"key": "c-vacation", "labels": [1, 0, 1]}, {"id": "c-vacation", "labels": [0, 0, 1]}],
     "labels record 2 (line 2) labels case 'c-vacation', which labels record 1 (line 1) labels too"),
])
def test_a_bad_record_is_exit_2_and_nothing_is_written(capsys, tmp_path, store_path, records, message):
    good = {"input": "Do vacation days carry over?", "labels": [0, 0, 1]}
    rc, _, err = run(capsys, "label", _write(tmp_path, records + [good]), "--store", store_path)
    assert rc == 2 and message in err
    assert open_store(store_path).labelled_cases() == []


def test_label_file_errors_are_exit_2(capsys, tmp_path, store_path):
    rc, _, err = run(capsys, "label", str(tmp_path / "missing.jsonl"), "--store", store_path)
    assert rc == 2 and "does not exist" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "c-vacation", "labels": [1]}\n{not json\n')
    rc, _, err = run(capsys, "label", str(bad), "--store", store_path)
    assert rc == 2 and "line 2: not JSON" in err
    # nested too deep for Python's reader: it was a RecursionError naming no file or line
    bad.write_text('{"key": "c-vacation", "labels": [1]}\n{"key": "x", "labels": ' + "[" * 50000 + "]" * 50000 + "}\n")
    rc, _, err = run(capsys, "label", str(bad), "--store", store_path)
    assert rc == 2 and f"{bad}, line 2: not JSON (nested 50001 levels deep, too deep to read" in err, err
    rc, _, err = run(capsys, "label", _write(tmp_path, [{"key": "x", "labels": [1]}]), "--store",
                     str(tmp_path / "nostore.db"))
    assert rc == 2 and "no store at" in err


def test_gold_score_and_score_spread_are_kept_by_the_store(tmp_path):
    s = open_store(str(tmp_path / "keep.db"))
    s.begin_run("k", {})
    tc = LLMTestCase(id="a", input="q", retrieval_context=["x"])
    s.save_case("k", "a", 0, tc)
    m = MetricResult(name="Contextual Precision", score=0.5, threshold=0.5, success=True, gold_score=0.25,
                     score_spread=0.01)
    s.save_result("k", "a", m)
    back = s.load_run("k").test_results[0].metric("Contextual Precision")
    assert back.gold_score == 0.25 and back.score_spread == 0.01


def test_a_version_1_store_is_upgraded_in_place(tmp_path, store_path):
    con = sqlite3.connect(store_path)
    con.execute("ALTER TABLE cj_results DROP COLUMN gold_score")
    con.execute("ALTER TABLE cj_results DROP COLUMN score_spread")
    con.execute("DROP TABLE cj_labels")
    con.execute("DROP TABLE cj_queue")
    con.execute("DROP TABLE cj_spend")
    con.execute("DROP TABLE cj_label_log")
    con.execute("ALTER TABLE cj_runs DROP COLUMN goldens_hash")
    con.execute("ALTER TABLE cj_runs DROP COLUMN goldens_name")
    con.execute("UPDATE cj_meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    s = open_store(store_path)
    assert s.schema_version == SCHEMA_VERSION and len(s.load_run("r1")) == 3  # nothing lost
    matched, unmatched = s.add_labels([{"key": "c-vacation", "labels": [1, 0, 1]}])
    assert [m.case_keys for m in matched] == [["c-vacation"]] and unmatched == []
    con = sqlite3.connect(store_path)
    assert con.execute("SELECT value FROM cj_meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    con.close()


def test_the_summary_shows_the_bias_corrected_mean(capsys):
    judged = [0.9, 0.8, 0.7, 0.6, 0.9, 0.5, 0.8, 0.7, 0.9, 0.6]
    gold = [0.7, 0.6, None, None, 0.8, 0.3, None, None, None, None]
    trs = [TestResult(index=i, name=None, test_case=LLMTestCase(input=f"q{i}"), metrics_data=[
        MetricResult(name="Contextual Precision", score=j, threshold=0.5, success=j >= 0.5, gold_score=g)])
        for i, (j, g) in enumerate(zip(judged, gold, strict=True))]
    result = EvaluationResult(test_results=trs, run_id="r")
    est = result.corrected("Contextual Precision")
    _shared._print_summary(result, _shared._metric_gates(result, None))
    out = capsys.readouterr().out
    assert "bias-corrected with your gold labels" in out
    c, b = est.corrected, est.bias
    assert (f"Contextual Precision: bias-corrected mean {c.estimate:.3f} [{c.low:.3f}, {c.high:.3f}] from 4 labelled "
            f"and 6 unlabelled case(s); judge bias +0.175 [{b.low:+.3f}, {b.high:+.3f}]") in out
    assert "labelled cases alone 0.600" in out
    # the table: mean 0.740 with its t interval, pass rate 1.000 (10 of 10) with its Wilson interval
    iv = result.interval("Contextual Precision")
    assert re.search(rf"Contextual Precision\s+0\.740\s+\[{iv.low:.3f}, {iv.high:.3f}\]\s+1\.000\s+"
                     r"\[0\.722, 1\.000\]\s+10\s+0", out), out


def test_score_of_labelled_deferred_cases_prints_the_correction(capsys, tmp_path):
    pytest.importorskip("contextjudge.metrics._gold")
    path = str(tmp_path / "d.db")
    s = open_store(path)
    s.begin_run("d", {"mode": "deferred"})
    for i, tc in enumerate(_cases() * 2):
        s.save_case("d", f"k{i}", i, tc)
    s.add_labels([{"key": "k0", "labels": [1, 0, 0]}, {"key": "k1", "labels": [0, 1, 0]},
                  {"key": "k2", "labels": [0, 0, 1]}])
    s.close()
    rc, out, err = run(capsys, "score", "--store", path, "--run", "d", "--model", "fake",
                       "--metrics", "contextual_precision", "--threshold", "0")
    assert rc == 0, err
    assert "Contextual Precision: bias-corrected mean" in out and "from 3 labelled and 3 unlabelled" in out


def test_the_summary_shows_tiers_and_repeats(capsys):
    trs = [TestResult(index=i, name=None, test_case=LLMTestCase(input=f"q{i}"), metrics_data=[
        MetricResult(name="Contextual Precision", score=s, threshold=0.5, success=s >= 0.5)])
        for i, s in enumerate([0.2, 0.9])]
    result = EvaluationResult(test_results=trs, run_id="r")
    result.tiers = {"cheap": {"items": 10, "final": 7, "calls": 2, "input_tokens": 0, "output_tokens": 0,
                              "seconds": 0.5},
                    "strong": {"items": 3, "final": 3, "calls": 1, "input_tokens": 900, "output_tokens": 100,
                               "seconds": 2.0}}
    result.repeats = {"k": 3, "judges": {"gpt-x": {"items": 13, "not_unanimous": 2, "disagreement": 0.15}},
                      "deterministic": []}
    _shared._print_summary(result, _shared._metric_gates(result, None))
    out = capsys.readouterr().out
    assert ("judge tiers: cheap 10 item(s), 7 final, 2 call(s), 0 token(s), 0.5s; strong 3 item(s), 3 final, "
            "1 call(s), 1000 token(s), 2.0s") in out
    assert "judge repeats (k=3): gpt-x disagreed with itself on 2 of 13 item(s)" in out


def test_deeply_nested_goldens_and_calibration_files_name_file_and_line(tmp_path):
    """Every reader of a user's JSON file says where a too-deep value is, as it does for any bad JSON."""
    from contextjudge.cases.goldens import load_goldens
    from contextjudge.errors import ConfigurationError, ContextJudgeError
    from contextjudge.judges._calibration import Calibration

    deep = "[" * 30000 + "]" * 30000
    jsonl = tmp_path / "goldens.jsonl"
    jsonl.write_text('{"input": "q"}\n{"input": ' + deep + "}\n")
    with pytest.raises(ContextJudgeError, match=r"goldens.jsonl:2: not a JSON object \(nested 30001 levels deep"):
        load_goldens(str(jsonl))
    whole = tmp_path / "goldens.json"
    whole.write_text('[\n {"input": "q"},\n {"input": ' + deep + "}\n]\n")
    with pytest.raises(ContextJudgeError, match=r"nested 30002 levels deep.*line 3 column"):
        load_goldens(str(whole))
    cal = tmp_path / "cal.json"
    cal.write_text(deep)
    with pytest.raises(ConfigurationError, match="is not valid JSON .nested 30000 levels deep"):
        Calibration.read(str(cal))


def test_calibrate_on_a_store_twice_judges_nothing_new_the_second_time(capsys, tmp_path, store_path, monkeypatch):
    """``calibrate --store`` keeps what the judge said of each labelled case in the store (as the labelling page and
    the store's calibration do): run again on the same labels, it asks the judge nothing; a new label on another
    case is judged alone; the figures are the same each time."""
    import contextjudge.testing as testing  # noqa: PLC0415

    made: list[FakeJudge] = []

    class CountingJudge(FakeJudge):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(testing, "FakeJudge", CountingJudge)

    def asked() -> int:
        return sum(len(j.calls) for j in made)

    rc, _, err = run(capsys, "label", _write(tmp_path, [{"key": "c-vacation", "labels": [1, 0, 1]}]),
                     "--store", store_path)
    assert rc == 0, err

    def calibrate() -> tuple[int, dict]:
        before = asked()
        rc, out, err = run(capsys, "calibrate", "--store", store_path, "--model", "fake", "--json", "--no-save")
        assert rc == 0, err
        return asked() - before, json.loads(out)

    first, report = calibrate()
    assert first > 0 and report["node_usefulness"]["items"] == 3
    second, again = calibrate()
    assert second == 0  # every labelled case's judged work was kept in the store
    assert again["node_usefulness"]["confusion"] == report["node_usefulness"]["confusion"]
    rc, _, err = run(capsys, "label", _write(tmp_path, [{"input": "Do vacation days carry over?", "labels": [0, 0, 1]}],
                                            "more.jsonl"), "--store", store_path)
    assert rc == 0, err
    third, grown = calibrate()
    assert 0 < third <= first  # only the newly labelled case is judged
    assert grown["node_usefulness"]["items"] == 6

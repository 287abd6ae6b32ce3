"""Reports and exports of a large run (report/_bounded.py, store.iter_test_results): every figure counts every
case, the page lists the cases worth reading and a sample of the rest with a note, and export streams a batch at a
time, on a real SQLite store."""

from __future__ import annotations

import json
import re

from contextjudge import LLMTestCase, MetricResult
from contextjudge.cli import main
from contextjudge.report import render_report
from contextjudge.store import open_store

N = 1500


def _big(path: str, run: str = "big", shift: float = 0.0) -> str:
    store = open_store(path)
    rid = store.begin_run(run, {"name": run})
    store.save_cases_queued(rid, [(f"k{i:05d}", i, LLMTestCase(input=f"question {i}", actual_output="a",
                                                               retrieval_context=["n"])) for i in range(N)],
                            enqueue=False)
    for i in range(N):
        score = ((i * 37) % 101) / 100.0
        score = min(1.0, max(0.0, score + shift)) if i % 3 == 0 else score
        store.save_result(rid, f"k{i:05d}", MetricResult(
            name="Contextual Relevancy", score=None if i == 700 else score, threshold=0.5, success=score >= 0.5,
            error="judge timed out" if i == 700 else None, score_spread=0.2 if i == 901 else None,
            verdicts=[{"verdict": "no", "statement": f"statement {i}", "reason": f"why{i}", "rank": 1}]))
    store.end_run(rid, {})
    store.close()
    return rid


def test_a_large_run_lists_the_cases_worth_reading_and_says_what_it_left_out(tmp_path):
    path = str(tmp_path / "big.db")
    _big(path)
    html = render_report(store=path, run="big", max_cases=200)
    cards = re.findall(r"<tr[^>]*data-index=['\"](\d+)['\"]", html) or re.findall(r"id=['\"]case-(\d+)['\"]", html)
    assert "This run has 1,500 cases; this page lists 200 of them in full" in html
    assert "Every figure above" in html and "--max-cases 0" in html
    assert "question 700" in html  # the case whose judging failed
    assert "question 901" in html  # the most uncertain: its judge repeats disagreed
    lowest = [i for i in range(N) if i != 700 and ((i * 37) % 101) == 0]
    assert all(f"question {i}<" in html or f"question {i}\"" in html or f"question {i}'" in html for i in lowest)
    assert html.count("question ") < 3 * 200 + 50  # not every case
    assert "1500 case(s)" in html  # the header counts every case
    full = render_report(store=path, run="big", max_cases=0)
    assert "this page lists" not in full and all(f"question {i}<" in full or f"question {i}" in full
                                                 for i in (3, 1499))
    if cards:
        assert len(set(cards)) <= 200


def test_compare_of_large_runs_lists_the_most_changed(tmp_path, capsys):
    path = str(tmp_path / "two.db")
    _big(path, "base")
    _big(path, "cur", shift=-0.3)
    out = tmp_path / "cmp.html"
    assert main(["report", "cur", "--store", path, "--compare", "base", "-o", str(out), "--max-cases", "150"]) == 0
    html = out.read_text()
    assert "and the 50 that changed most against the baseline" in html and "lists 150 of them" in html


def test_export_streams_a_batch_at_a_time_and_equals_the_whole_run(tmp_path, capsys):
    path = str(tmp_path / "exp.db")
    rid = _big(path)
    store = open_store(path, read_only=True)
    whole = [tr.to_dict() for tr in store.load_run(rid).test_results]
    streamed = store.iter_test_results(rid, batch=64)
    assert iter(streamed) is streamed
    assert [tr.to_dict() for tr in streamed] == whole
    assert main(["export", "big", "--store", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == N and json.loads(lines[700])["metrics"][0]["error"] == "judge timed out"


def test_a_large_runs_page_reads_only_the_listed_cases_verdicts_and_is_the_same_page(tmp_path, monkeypatch):
    from contextjudge.store import ResultsStore

    path = str(tmp_path / "lazy.db")
    _big(path, "base")
    _big(path, "cur", shift=-0.3)
    filled: list[int] = []
    plain_fill = ResultsStore.fill_verdicts

    def spy(self, run_id, test_results):
        filled.append(len(test_results))
        return plain_fill(self, run_id, test_results)

    monkeypatch.setattr(ResultsStore, "fill_verdicts", spy)
    lazy = render_report(store=path, run="cur", compare="base", max_cases=120)
    assert filled and all(n <= 120 for n in filled) and len(filled) == 2  # this run's listed cases, their baselines
    assert len(set(re.findall(r"statement \d+", lazy))) >= 100  # the listed cases show their judge's verdicts
    # the same page as from the whole run read with every verdict
    monkeypatch.setattr(ResultsStore, "count_cases", lambda self, run_id: 0)
    eager = render_report(store=path, run="cur", compare="base", max_cases=120)
    assert len(filled) == 2 and lazy == eager


def test_printed_compare_reads_no_verdicts_and_prints_the_same(tmp_path, capsys, monkeypatch):
    from contextjudge.store import ResultsStore

    path = str(tmp_path / "cmp.db")
    _big(path, "base")
    _big(path, "cur", shift=-0.3)
    asked: list[bool] = []
    plain = ResultsStore.load_run

    def spy(self, run_id=None, *, verdicts=True):
        asked.append(verdicts)
        return plain(self, run_id, verdicts=verdicts)

    monkeypatch.setattr(ResultsStore, "load_run", spy)
    assert main(["compare", "cur", "base", "--store", path]) == 0
    light = capsys.readouterr().out
    assert asked == [False, False] and "Contextual Relevancy" in light
    monkeypatch.setattr(ResultsStore, "load_run", lambda self, run_id=None, verdicts=True: plain(self, run_id))
    assert main(["compare", "cur", "base", "--store", path]) == 0
    assert capsys.readouterr().out == light

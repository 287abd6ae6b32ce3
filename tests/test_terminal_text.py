"""Captured end-user text reaches the operator's terminal shown, never obeyed: every command that prints what a
store holds (a case's input, a run's name, a judge's reason) writes its control characters out (``\\u001b``), so an
input carrying an erase-line, a cursor move, a window title or hidden text cannot rewrite what the operator reads.

The stores are real SQLite files written through the store's own methods, back-dated a day at a time like
tests/test_trend.py's."""

from __future__ import annotations

import io
import json
import random
import time

from backdate import backdate_days

import contextjudge
from contextjudge import LLMTestCase, MetricResult
from contextjudge.cli import main

DAY = 86400.0
# erase the line, cursor up, set the window title, hidden text, a carriage return, a bidi override, a C1 CSI
HOSTILE = "\x1b[2K\x1b[1A\x1b]0;pwned\x07\x1b[8mhidden\x1b[0m\rFAKE\u202eevil\x9b31m"
OBEYED = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


def _store(path: str) -> str:
    """A week where the last day's answers got much worse; every input and the run's name carry escape sequences."""
    store = contextjudge.open_store(path)
    rng = random.Random(3)
    run = store.begin_run(None, {"name": f"prod{HOSTILE}\nrun 1 FAILED", "mode": "worker"})
    day0 = (time.time() // DAY - 6) * DAY
    for d in range(7):
        for i in range(30):
            key = f"d{d}-c{i}"
            tc = LLMTestCase(input=f"question {d * 100 + i}{HOSTILE}", actual_output="25 days",
                             retrieval_context=["Employees get 25 vacation days."])
            store.save_case(run, key, d * 1000 + i, tc)
            score = min(1.0, max(0.0, rng.gauss(0.8 - (0.5 if d == 6 else 0.0), 0.1)))
            store.save_result(run, key, MetricResult(name="Contextual Relevancy", score=score, threshold=0.5,
                                                     success=score >= 0.5, evaluation_model="contextjudge-local"))
    store.end_run(run, {})
    backdate_days(store, 7, day0, DAY)
    store.close()
    return run


def _inert(out: str) -> None:
    for ch in OBEYED:
        assert ch not in out, (ch, out)


def test_trend_fail_on_drop_shows_the_worst_inputs_escape_sequences(tmp_path, capsys):
    path = str(tmp_path / "week.db")
    _store(path)
    rc = main(["trend", "--store", path, "--fail-on-drop"])
    out, err = capsys.readouterr()
    assert rc == 1 and "DROP Contextual Relevancy" in out
    worst = out.split("DROP Contextual Relevancy")[1]
    assert "question 6" in worst and "\\u001b[2K\\u001b[1A\\u001b]0;pwned\\u0007" in worst
    assert "FAKE\\u202eevil\\u009b31m" in worst  # (a carriage return is white space there: a space)
    _inert(out + err)


def test_runs_and_compare_show_the_run_name_and_case_text(tmp_path, capsys):
    path = str(tmp_path / "runs.db")
    run = _store(path)
    rc = main(["runs", "--store", path])
    out, err = capsys.readouterr()
    assert rc == 0 and "prod\\u001b[2K" in out
    assert "\\u000arun 1 FAILED" in out and "\nrun 1 FAILED" not in out  # a stored line break forges no line
    _inert(out + err)
    rc = main(["compare", run, run, "--store", path])
    out, err = capsys.readouterr()
    assert rc == 0 and "prod\\u001b[2K" in out
    _inert(out + err)


def test_the_stdout_guard_keeps_layout_and_json():
    from contextjudge._text import shown  # noqa: PLC0415
    from contextjudge.cli._shared import ShownStdout  # noqa: PLC0415

    buf = io.StringIO()
    guard = ShownStdout(buf)
    value = {"input": "a\x9bb\u2028c", "n": 1}
    guard.write(json.dumps(value, ensure_ascii=False, indent=1) + "\n\tend\x1b[0m\n")
    out = buf.getvalue()
    _inert(out)
    body, tail = out.rsplit("\n\t", 1)
    assert json.loads(body) == value and tail == "end\\u001b[0m\n"
    assert shown("tab\there") == "tab\\u0009here" and shown("tab\there", keep="\t") == "tab\there"

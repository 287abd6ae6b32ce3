"""``contextjudge recommend``: through --answers, through the contextjudge CLI, and through a real pseudo-terminal."""

import io
import json
import os
import select
import subprocess
import sys
import time

import pytest

from contextjudge._recommend import Answers, main, parse_answers, recommend
from contextjudge.testing import FakeJudge


def run(argv):
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(""), stdout=out)
    return code, out.getvalue()


def metrics_of(answers):
    return [p.metric for p in recommend(answers).picks]


def test_the_rules():
    answer = ["FaithfulnessMetric", "AnswerRelevancyMetric"]
    assert metrics_of(Answers(reference=False)) == ["ContextualRelevancyMetric", "ContextUtilizationMetric", *answer]
    assert metrics_of(Answers(reference=True)) == ["ContextualRelevancyMetric", "ContextualPrecisionMetric",
                                                   "ContextualRecallMetric", "ContextUtilizationMetric", *answer]
    assert metrics_of(Answers(chunk_labels=True))[-3:] == ["HitRateMetric", "MRRMetric", "NDCGMetric"]
    assert "HitRateMetric" not in metrics_of(Answers(chunk_labels=True, multi_turn=True))
    assert metrics_of(Answers(multi_turn=True)) == ["TurnContextualRelevancyMetric"]
    assert metrics_of(Answers(multi_turn=True, reference=True)) == [
        "TurnContextualRelevancyMetric", "TurnContextualPrecisionMetric", "TurnContextualRecallMetric"]
    assert metrics_of(Answers(retrieves=False)) == []
    rec = recommend(Answers(images=True, judge="local"))
    assert any("alt text" in n for n in rec.notes) and "MLLMImage" in rec.snippet


def test_answers_non_interactively():
    code, out = run(["--answers", "retrieves=yes,reference=yes,multi_turn=no,judge=llm,images=no"])
    assert code == 0
    for name in ("ContextualPrecisionMetric", "ContextualRecallMetric", "ContextualRelevancyMetric",
                 "ContextUtilizationMetric"):
        assert name in out
    assert "Paste this to start" in out and 'judge = "gpt-4.1-mini"' in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  Contextual")]
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)  # one line each on why


def test_aliases_json_and_defaults():
    assert parse_answers("rag=y, goldens=TRUE; chat=0, judge=offline") == \
        {"retrieves": True, "reference": True, "multi_turn": False, "judge": "local"}
    code, out = run(["metrics", "--answers", '{"retrieves": true, "reference": false}', "--format", "json"])
    data = json.loads(out)
    assert code == 0 and data["answers"]["judge"] == "local"  # unanswered questions take their defaults
    assert [m["metric"] for m in data["metrics"]] == ["ContextualRelevancyMetric", "ContextUtilizationMetric",
                                                      "FaithfulnessMetric", "AnswerRelevancyMetric"]


def test_no_retrieval_says_so():
    code, out = run(["--answers", "retrieves=no"])
    assert code == 0 and "No contextjudge metric fits" in out and "retrieval_context" in out


@pytest.mark.parametrize("spec, words", [("retrieves=maybe", "yes or no"), ("judge=gpt", "'llm'"),
                                         ("colour=blue", "unknown question"), ("retrieves", "key=value"),
                                         ("{bad json", "JSON")])
def test_bad_answers_exit_2_with_a_clear_message(spec, words, capsys):
    code, _ = run(["--answers", spec])
    assert code == 2 and words in capsys.readouterr().err


def test_not_a_terminal_without_answers_exits_2(capsys):
    code, _ = run([])
    assert code == 2 and "--answers" in capsys.readouterr().err


@pytest.mark.parametrize("answers", [
    Answers(reference=True), Answers(reference=False, judge="llm"), Answers(multi_turn=True, reference=True),
    Answers(images=True, reference=True), Answers(multi_turn=True, images=True), Answers(chunk_labels=True),
    Answers(chunk_labels=True, multi_turn=True)])
def test_the_snippet_runs(answers):
    snippet = recommend(answers).snippet
    # the embedded judge is swapped for the fake one so this test needs no model
    line = next(ln for ln in snippet.splitlines() if ln.startswith("judge = "))
    code = snippet.replace(line, "judge = FakeJudge(supports_images=True)")
    ns = {"FakeJudge": FakeJudge, "print": lambda *a, **k: None}
    exec(compile(code, "<snippet>", "exec"), ns)  # noqa: S102 - our own generated code
    result = ns["result"]
    assert result.test_results and all(m.error is None for tr in result for m in tr.metrics_data)


def test_registered_as_a_contextjudge_subcommand(capsys):
    from contextjudge.cli import main as cli_main

    code = cli_main(["recommend", "--answers", "retrieves=yes,reference=yes,judge=local"])
    assert code == 0 and "ContextualRecallMetric" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ a real terminal
def _read_until(fd, needle, timeout=30.0):
    buf = b""
    deadline = time.monotonic() + timeout
    while needle.encode() not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {needle!r}; got {buf.decode(errors='replace')!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_interactive_questionnaire_in_a_pseudo_terminal():
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "contextjudge._recommend"], stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    try:
        transcript = _read_until(master, "retrieve documents")
        os.write(master, b"y\n")
        transcript += _read_until(master, "reference answers")
        os.write(master, b"maybe\n")  # not an answer: asked again
        transcript += _read_until(master, "Please answer yes or no")
        os.write(master, b"yes\n")
        transcript += _read_until(master, "multi-turn")
        os.write(master, b"\n")  # the default: no
        transcript += _read_until(master, "Which judge")
        os.write(master, b"local\n")
        transcript += _read_until(master, "images")
        os.write(master, b"n\n")
        transcript += _read_until(master, "which chunks")
        os.write(master, b"yes\n")
        transcript += _read_until(master, "print(result.summary())")
        assert "NDCGMetric" in transcript
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert "ContextualPrecisionMetric" in transcript and "ContextualRecallMetric" in transcript
    assert "TurnContextual" not in transcript and 'judge = "local"' in transcript

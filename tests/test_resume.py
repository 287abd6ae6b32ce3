"""Kill a large evaluate() run with SIGKILL, run it again with the same run id, and it completes.

The run is a real subprocess. Its store logs, to files, every result it saves and every verdict it caches (a verdict
is cached only after the judge was really asked), and its judge logs every call. After the kill we read what the
store had committed; the second process must then neither rescore any of those (case, metric) pairs nor ask the
judge for any of those verdicts again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent('''
    import sys, time
    from contextjudge import evaluate, LLMTestCase
    from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextUtilizationMetric
    from contextjudge.store import ResultsStore
    from contextjudge.testing import FakeJudge

    db, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def note(line):
        with open(log, "a") as fh:
            fh.write(line + "\\n")
            fh.flush()

    class LoggingStore(ResultsStore):
        def put_verdict(self, key, value):
            super().put_verdict(key, value)
            note("verdict " + key)

        def save_result(self, run_id, key, result):
            super().save_result(run_id, key, result)
            note("result " + key + "|" + result.name)

    class SlowJudge(FakeJudge):
        def answer(self, request):
            time.sleep(0.004)  # long enough to be killed mid-run
            note("call " + request.task)
            return super().answer(request)

    judge = SlowJudge()
    cases = [LLMTestCase(input=f"Question {i}: where is the office of team {i}?",
                         actual_output=f"Team {i} sits in building {i % 7}.",
                         expected_output=f"The office of team {i} is in building {i % 7}. It opens at nine.",
                         retrieval_context=[f"Team {i} has its office in building {i % 7}.",
                                            "The cafeteria serves lunch at noon.",
                                            f"Building {i % 7} opens at nine every weekday."])
             for i in range(n)]
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
               ContextUtilizationMetric(model=judge)]
    result = evaluate(cases, metrics, store=LoggingStore(db), run_id="big-run", max_concurrency=8,
                      show_progress=False)
    print("DONE", len(result), sum(len(tr.metrics_data) for tr in result.test_results))
''')

N_CASES = 120
N_METRICS = 3


def _lines(path, prefix):
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [ln.split(" ", 1)[1].strip() if " " in ln else "" for ln in fh if ln.startswith(prefix)]


def _committed(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        results = {f"{k}|{m}" for k, m in con.execute("select case_key, metric from cj_results where error is null")}
        verdicts = {k for (k,) in con.execute("select key from cj_verdict_cache")}
    finally:
        con.close()
    return results, verdicts


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_run_resumes_without_rescoring_or_rejudging(tmp_path):
    script = tmp_path / "run_eval.py"
    script.write_text(SCRIPT)
    db, log1, log2 = str(tmp_path / "results.db"), str(tmp_path / "first.log"), str(tmp_path / "second.log")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    first = subprocess.Popen([sys.executable, str(script), db, log1, str(N_CASES)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if len(_lines(log1, "result")) >= 90:
                break
            if first.poll() is not None:
                pytest.fail(f"the first run ended before it could be killed: {first.stderr.read().decode()[-2000:]}")
            time.sleep(0.02)
        else:
            pytest.fail("the first run never got going")
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait(30)
    assert first.returncode == -signal.SIGKILL

    done_results, done_verdicts = _committed(db)
    total = N_CASES * N_METRICS
    assert 90 <= len(done_results) < total, "the kill must land mid-run"
    assert done_verdicts

    second = subprocess.run([sys.executable, str(script), db, log2, str(N_CASES)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"DONE {N_CASES} {total}" in second.stdout

    rescored = set(_lines(log2, "result")) & done_results
    assert rescored == set(), f"{len(rescored)} results were scored twice"
    rejudged = set(_lines(log2, "verdict")) & done_verdicts
    assert rejudged == set(), f"{len(rejudged)} stored verdicts were asked of the judge again"
    # the second run did exactly the remaining work
    assert len(_lines(log2, "result")) == total - len(done_results)

    con = sqlite3.connect(db)
    try:
        assert con.execute("select count(*) from cj_results where run_id='big-run' and error is null").fetchone()[0] \
            == total
        assert con.execute("select count(*) from cj_cases where run_id='big-run'").fetchone()[0] == N_CASES
        assert con.execute("select status from cj_runs where run_id='big-run'").fetchone()[0] == "finished"
        # every judge call of both processes is in the usage log, and nothing was judged twice by the survivor
        calls = con.execute("select count(*) from cj_judge_calls where run_id='big-run' and cached=0").fetchone()[0]
    finally:
        con.close()
    assert calls >= len(_lines(log2, "call"))

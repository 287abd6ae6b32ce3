"""Every run that begins, ends: evaluate, capture in each mode, pytest, interpreter exit, and a crashed process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.engine import Run
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

ROOT = Path(__file__).resolve().parents[1]


def _case(i: int = 0) -> LLMTestCase:
    return LLMTestCase(input=f"What is the refund window {i}?", actual_output="30 days",
                       expected_output="30 days.", retrieval_context=["Refunds within 30 days.", "Office in Lyon."])


def _status(path: Path) -> dict[str, str]:
    with open_store(str(path)) as store:
        return {r.run_id: r.status for r in store.list_runs()}


def _run_python(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("CONTEXTJUDGE_MODEL", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_evaluate_ends_its_run(tmp_path):
    db = tmp_path / "r.db"
    result = evaluate([_case()], [ContextualRelevancyMetric(model=FakeJudge())], store=str(db), show_progress=False)
    assert _status(db) == {result.run_id: "finished"}


def test_evaluate_stopped_by_an_error_ends_its_run_as_interrupted(tmp_path):
    class Broken(ContextualRelevancyMetric):
        async def a_score(self, test_case):
            raise RuntimeError("boom")

    db = tmp_path / "r.db"
    with pytest.raises(RuntimeError):
        evaluate([_case()], [Broken(model=FakeJudge())], store=str(db), raise_exceptions=True, show_progress=False,
                 run_id="stopped")
    assert _status(db) == {"stopped": "interrupted"}


def test_a_run_owned_by_the_caller_is_left_open_for_it(tmp_path):
    run = Run(store=str(tmp_path / "r.db"), name="mine")
    evaluate([_case(1)], [ContextualRelevancyMetric(model=FakeJudge())], run=run, show_progress=False)
    evaluate([_case(2)], [ContextualRelevancyMetric(model=FakeJudge())], run=run, show_progress=False)
    assert _status(tmp_path / "r.db") == {run.id: "running"}
    run.end({"cases": 2})
    assert _status(tmp_path / "r.db") == {run.id: "finished"}
    assert len(run.store.load_cases(run.id)) == 2


def test_the_default_judge_lives_in_the_run_not_on_the_metrics():
    metric = ContextualRelevancyMetric()  # built without a model
    result = evaluate([_case()], [metric], model=FakeJudge(), show_progress=False)
    assert result.test_results[0].metrics_data[0].error is None
    assert metric._model_arg is None and metric._model is None  # noqa: SLF001 - the user's object is untouched


@pytest.mark.parametrize("mode", ["background", "deferred", "off"])
def test_capture_runs_end_at_close(tmp_path, mode):
    db = tmp_path / "c.db"
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode=mode, store=str(db))
    for i in range(3):
        session.submit(CapturedCase(_case(i)))
    session.close(10)
    (run_id, status), = _status(db).items()
    assert run_id == session.run_id
    # background scored everything; deferred and off keep their cases unscored in the store for later
    assert status == ("finished" if mode == "background" else "captured")
    with open_store(str(db)) as store:
        assert len(store.load_cases(run_id)) == 3
        assert len(store.unscored_cases(run_id)) == (0 if mode == "background" else 3)


def test_a_deferred_run_ends_when_score_deferred_finishes_it(tmp_path):
    db = tmp_path / "c.db"
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred", store=str(db))
    for i in range(2):
        session.submit(CapturedCase(_case(i)))
    assert set(_status(db).values()) == {"running"}
    result = session.score_deferred(show_progress=False)
    assert len(result) == 2 and all(c.results for c in session.cases)
    assert _status(db) == {session.run_id: "finished"}
    with open_store(str(db)) as store:  # the results are stored under the captured cases' own keys
        assert store.unscored_cases(session.run_id) == []


def test_a_short_script_that_forgets_flush_keeps_its_cases_and_ends_its_run(tmp_path):
    proc = _run_python("""
        from contextjudge import LLMTestCase
        from contextjudge.capture import CapturedCase, CaptureSession
        from contextjudge.metrics import ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge

        session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=3600), store="c.db",
                                 exit_timeout=0.5)
        for i in range(20):
            session.submit(CapturedCase(LLMTestCase(input=f"q{i}", actual_output="a", retrieval_context=["n"])))
        print("done", session.run_id)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[-1]
    assert _status(tmp_path / "c.db") == {run_id: "interrupted"}
    with open_store(str(tmp_path / "c.db")) as store:
        assert len(store.load_cases(run_id)) == 20 and len(store.unscored_cases(run_id)) == 20
    lines = [ln for ln in proc.stderr.splitlines() if "at exit" in ln]
    assert len(lines) == 1 and "20 captured case(s) were not scored" in lines[0] and "contextjudge score" in lines[0]


@pytest.mark.parametrize("mode", ["background", "worker"])
def test_a_session_the_app_let_go_of_still_keeps_its_cases_at_exit(tmp_path, mode):
    # the session is only a local of a function that returned: its running task or writer thread holds it
    proc = _run_python(f"""
        import gc
        from contextjudge import LLMTestCase
        from contextjudge.capture import CapturedCase, CaptureSession
        from contextjudge.metrics import ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge

        def handle_requests():
            session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=3600), store="c.db",
                                     mode={mode!r}, handoff_delay=30.0, exit_timeout=0.5)
            for i in range(5):
                session.submit(CapturedCase(LLMTestCase(input=f"q{{i}}", actual_output="a", retrieval_context=["n"])))

        handle_requests()
        gc.collect()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    with open_store(str(tmp_path / "c.db")) as store:
        (run,) = store.list_runs()
        assert len(store.load_cases(run.run_id)) == 5 and run.status in ("interrupted", "captured")


def test_without_a_store_what_exit_cannot_keep_is_said_in_one_line(tmp_path):
    proc = _run_python("""
        from contextjudge import LLMTestCase
        from contextjudge.capture import CapturedCase, CaptureSession
        from contextjudge.metrics import ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge

        session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=3600), exit_timeout=0.2)
        for i in range(5):
            session.submit(CapturedCase(LLMTestCase(input=f"q{i}", actual_output="a", retrieval_context=["n"])))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "contextjudge" in ln]
    assert len(lines) == 1 and "5 captured case(s) were not scored" in lines[0] and "lost" in lines[0], lines


def test_a_crashed_run_is_marked_interrupted_when_the_store_is_next_opened(tmp_path):
    proc = _run_python("""
        import os
        from contextjudge.engine import Run
        run = Run(store="c.db", name="crashing")
        print(run.begin(), flush=True)
        os._exit(3)  # no atexit, no end: as a kill or a crash leaves it
    """, tmp_path)
    assert proc.returncode == 3
    run_id = proc.stdout.split()[-1]
    assert _status(tmp_path / "c.db") == {run_id: "interrupted"}  # _status opens the store


def test_pytest_session_run_ends_with_pytest(tmp_path):
    (tmp_path / "test_rag.py").write_text(textwrap.dedent("""
        from contextjudge import LLMTestCase, assert_test
        from contextjudge.metrics import ContextualRelevancyMetric

        def test_one():
            assert_test(LLMTestCase(input="Refund window?", actual_output="30 days",
                                    retrieval_context=["Refunds are accepted within 30 days."]),
                        [ContextualRelevancyMetric(threshold=0.0)])

        def test_two():
            assert_test(LLMTestCase(input="Office?", actual_output="Lyon", retrieval_context=["Office in Lyon."]),
                        [ContextualRelevancyMetric(threshold=0.0)])
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--contextjudge-model",
                           "fake", "--contextjudge-store", "res.db", "test_rag.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = _status(tmp_path / "res.db")
    assert list(statuses.values()) == ["finished"]
    with open_store(str(tmp_path / "res.db")) as store:
        info = store.run_info(next(iter(statuses)))
        assert info.cases == 2 and info.summary.get("cases") == 2


def test_capture_going_on_after_score_deferred_resumes_the_run_and_ends_it_again(tmp_path):
    db = tmp_path / "c.db"
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred", store=str(db))
    session.submit(CapturedCase(_case(1)))
    session.score_deferred(show_progress=False)
    assert _status(db) == {session.run_id: "finished"}
    session.submit(CapturedCase(_case(2)))  # more traffic after the deferred scoring
    assert _status(db) == {session.run_id: "running"}
    session.close(5)
    assert _status(db) == {session.run_id: "captured"}  # one case waits for `contextjudge score`
    with open_store(str(db)) as store:
        assert len(store.load_cases(session.run_id)) == 2 and len(store.unscored_cases(session.run_id)) == 1


def test_score_deferred_with_a_store_also_scores_what_memory_let_go(tmp_path):
    db = tmp_path / "c.db"
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="deferred", store=str(db),
                             max_kept=2)
    for i in range(6):
        session.submit(CapturedCase(_case(i)))
    assert len(session.cases) <= 2  # stored cases are forgotten from memory: nothing lost
    result = session.score_deferred(show_progress=False)
    assert len(result) == 6
    assert _status(db) == {session.run_id: "finished"}
    with open_store(str(db)) as store:
        assert store.unscored_cases(session.run_id) == [] and len(store.load_cases(session.run_id)) == 6


def test_a_session_restarts_its_worker_after_close():
    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge())
    session.submit(CapturedCase(_case(1)))
    assert session.close(10)
    session.submit(CapturedCase(_case(2)))  # e.g. a late request after shutdown began
    assert session.flush(10) and all(c.results for c in session.cases)
    assert session._closed is False  # noqa: SLF001 - interpreter exit looks after it again
    session.close(5)


def test_a_case_scored_outside_the_session_never_makes_another_look_scored():
    import gc

    from contextjudge._aio import run_sync

    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=3600), mode="off", max_kept=None)
    quick = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(), mode="off", max_kept=None)
    for i in range(50):  # addresses of freed cases are reused: state must live on the case, not on its id()
        c = CapturedCase(_case(i))
        run_sync(quick.score_case(c))
        del c
        gc.collect()
        session.submit(CapturedCase(_case(100 + i)))
    assert session._mode.keep_unscored() == 50  # noqa: SLF001 - every kept case is still unscored


def test_evaluate_with_a_callers_run_keeps_that_runs_default_judge(tmp_path):
    default = FakeJudge()
    run = Run(store=str(tmp_path / "r.db"), model=default)
    other = FakeJudge(style="json")
    evaluate([_case(1)], [ContextualRelevancyMetric()], run=run, model=other, show_progress=False)
    assert run.context.default_model is default
    assert other.count() > 0 and default.count() == 0
    with pytest.raises(ValueError, match="takes its store"):
        evaluate([_case(2)], [ContextualRelevancyMetric()], run=run, store=str(tmp_path / "x.db"))
    run.end()


def test_a_run_resumed_meanwhile_is_not_marked_interrupted(tmp_path, monkeypatch):
    from contextjudge.store import ResultsStore
    from contextjudge.store import _runs as runs_mod

    db = str(tmp_path / "r.db")
    with open_store(db) as store:
        run_id = store.begin_run("shared", {"name": "x"})
    with open_store(db) as store:
        def owner_gone_but_resumed_meanwhile(pid):
            # the check finds the owner gone; between this read and the update, another process resumes the run
            with ResultsStore(db) as other:  # not open_store: it would check for stale runs itself
                other.begin_run(run_id, {"name": "x"})
            return False

        monkeypatch.setattr(runs_mod, "_alive", owner_gone_but_resumed_meanwhile)
        assert store.mark_interrupted() == []
        assert {r.run_id: r.status for r in store.list_runs()} == {run_id: "running"}
        monkeypatch.setattr(runs_mod, "_alive", lambda pid: False)  # and with nobody resuming it, it is marked
        assert store.mark_interrupted() == [run_id]


def test_at_exit_pending_scores_are_finished_when_the_judge_answers(tmp_path):
    # the exit hook runs while thread pools still take work (store writes and judge calls need them)
    proc = _run_python("""
        from contextjudge import LLMTestCase
        from contextjudge.capture import CapturedCase, CaptureSession
        from contextjudge.metrics import ContextualRelevancyMetric
        from contextjudge.testing import FakeJudge

        session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(delay=0.01), store="c.db")
        for i in range(20):
            session.submit(CapturedCase(LLMTestCase(input=f"q{i}", actual_output="a", retrieval_context=["n"])))
        print("done", session.run_id)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[-1]
    assert _status(tmp_path / "c.db") == {run_id: "finished"}, proc.stderr
    with open_store(str(tmp_path / "c.db")) as store:
        assert store.unscored_cases(run_id) == [] and store.run_info(run_id).results == 20
    assert "contextjudge" not in proc.stderr  # nothing to report

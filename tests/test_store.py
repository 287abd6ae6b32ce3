"""The results store, on both backends: SQLite (a file) and PostgreSQL (the throwaway server of the session fixture
``pg_url`` in tests/conftest.py; skipped, with the reason, only where no server can start)."""

from __future__ import annotations

import sqlite3
import subprocess
import threading

import pytest

from contextjudge import ConversationalTestCase, LLMTestCase, MetricResult, RetrievedNode, Turn, Usage, evaluate
from contextjudge.errors import StoreError
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    TurnContextualRelevancyMetric,
)
from contextjudge.store import SCHEMA_VERSION, ResultsStore, open_store
from contextjudge.testing import FakeJudge


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = open_store(str(tmp_path / "results.db"))
    else:
        s = request.getfixturevalue("pg_store")  # a wiped store on the session's throwaway cluster
    yield s
    s.close()


# ---------------------------------------------------------------------------------------------- helpers
def _cases(n: int = 4) -> list[LLMTestCase]:
    return [LLMTestCase(input=f"What is the capital of France? ({i})", actual_output="Paris is the capital.",
                        expected_output="Paris is the capital of France. Bananas are yellow.",
                        retrieval_context=[RetrievedNode("Paris is the capital of France.", id="doc-1", score=0.91,
                                                         metadata={"source": "wiki"}),
                                           "Berlin is the capital of Germany."]) for i in range(n)]


def _metrics(judge):
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]


# ---------------------------------------------------------------------------------------------- tests
def test_evaluate_writes_runs_cases_nodes_verdicts_results_and_usage(store):
    judge = FakeJudge()
    result = evaluate(_cases(), _metrics(judge), store=store, run_id="run-a", run_name="baseline")
    info = store.run_info("run-a")
    assert info.status == "finished" and info.name == "baseline"
    assert info.cases == 4 and info.results == 16
    assert info.fingerprint and info.judges == [{"name": "fake-judge", "identity": info.judges[0]["identity"]}]
    assert info.summary["summary"]["Contextual Precision"]["mean"] == pytest.approx(result.mean("Contextual Precision"))

    back = store.load_run("run-a")
    assert len(back) == 4
    for orig, got in zip(result.test_results, back.test_results, strict=True):
        assert got.test_case.input == orig.test_case.input
        assert got.test_case.retrieval_context[0].id == "doc-1"
        assert got.test_case.retrieval_context[0].metadata == {"source": "wiki"}
        for m in orig.metrics_data:
            g = got.metric(m.name)
            assert (g.score, g.success, g.reason, g.threshold) == (m.score, m.success, m.reason, m.threshold)
            assert g.verdicts == m.verdicts
            assert g.details == m.details
    calls = store.judge_calls("run-a")
    assert len(calls) == len(judge.calls) and all(c["input_tokens"] > 0 for c in calls)
    assert store.usage("run-a").calls == len(judge.calls)

    from contextjudge.store import _schema as S
    with store.engine.connect() as conn:
        nodes = conn.execute(S.nodes.select().where(S.nodes.c.run_id == "run-a")).all()
        verdicts = conn.execute(S.verdicts.select().where(S.verdicts.c.run_id == "run-a")).all()
    assert len(nodes) == 8 and {n.rank for n in nodes} == {1, 2}
    assert any(v.statement == "Bananas are yellow." and v.verdict == "no" for v in verdicts)


def test_rerun_with_same_id_scores_nothing_again_and_reuses_cached_verdicts(store):
    judge = FakeJudge()
    evaluate(_cases(), _metrics(judge), store=store, run_id="r")
    n = len(judge.calls)
    again = evaluate(_cases(), _metrics(judge), store=store, run_id="r")
    assert len(judge.calls) == n
    assert store.run_info("r").results == 16
    assert len(again) == 4 and all(len(tr.metrics_data) == 4 for tr in again)
    # a new run on the same store asks nothing either: the store is the verdict cache across runs
    other = evaluate(_cases(), _metrics(judge), store=store, run_id="r2")
    assert len(judge.calls) == n
    assert other.usage.cache_hits > 0


def test_errored_results_are_rescored_on_resume(store):
    from contextjudge.judges._options import JudgeOptions
    from contextjudge.testing import JudgeHTTPError

    judge = FakeJudge(failures=[JudgeHTTPError(401)])
    m = ContextualPrecisionMetric(model=judge)
    first = evaluate(_cases(1), [m], store=store, run_id="e", judge_options=JudgeOptions(max_attempts=1))
    assert first.test_results[0].metrics_data[0].error
    assert store.completed_results("e") == {}
    second = evaluate(_cases(1), [m], store=store, run_id="e")
    assert second.test_results[0].metrics_data[0].error is None
    [res] = store.load_run("e").test_results[0].metrics_data
    assert res.error is None and res.score is not None


def test_conversational_cases_round_trip(store):
    conv = ConversationalTestCase(turns=[
        Turn(role="user", content="Tell me about the Eiffel Tower."),
        Turn(role="assistant", content="It is in Paris.", retrieval_context=["The Eiffel Tower is in Paris."]),
        Turn(role="user", content="When was it completed?"),
        Turn(role="assistant", content="In 1889.", retrieval_context=["The Eiffel Tower was completed in 1889.",
                                                                      "Bananas are yellow."]),
    ], name="tower chat")
    evaluate([conv], [TurnContextualRelevancyMetric(model=FakeJudge())], store=store, run_id="c")
    [tr] = store.load_run("c").test_results
    assert isinstance(tr.test_case, ConversationalTestCase) and tr.test_case.name == "tower chat"
    assert tr.test_case.turns[3].retrieval_context[1].text == "Bananas are yellow."
    assert tr.metrics_data[0].name == "Turn Contextual Relevancy"


def test_protocol_calls_from_many_threads(store):
    run = store.begin_run(None, {"name": "threads"})
    tc = _cases(1)[0]
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(15):
                key = f"t{t}-{i}"
                store.save_case(run, key, t * 100 + i, tc)
                store.save_result(run, key, MetricResult(name="Contextual Precision", score=0.5, threshold=0.5,
                                                         success=True, verdicts=[{"rank": 1, "verdict": "yes"}]))
                store.save_judge_call(run, {"judge": "j", "task": "node_usefulness", "metric": "m",
                                            "cached": False, "usage": Usage(calls=1, input_tokens=3)})
                store.put_verdict(f"k{i}", {"verdicts": {"n1": {"verdict": "yes"}}})
                assert store.get_verdict(f"k{i}") is not None
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert store.run_info(run).cases == 90 and store.run_info(run).results == 90
    assert len(store.judge_calls(run)) == 90


def test_save_result_replaces_the_earlier_result_and_its_verdicts(store):
    run = store.begin_run("x", {})
    store.save_case(run, "k", 0, _cases(1)[0])
    store.save_case(run, "k", 0, _cases(1)[0])  # idempotent
    first = MetricResult(name="M", score=0.0, threshold=0.5, success=False, error="boom",
                         verdicts=[{"rank": 1}, {"rank": 2}])
    store.save_result(run, "k", first)
    store.save_result(run, "k", MetricResult(name="M", score=1.0, threshold=0.5, success=True,
                                             verdicts=[{"rank": 1, "verdict": "yes"}]))
    got = store.completed_results(run)[("k", "M")]
    assert got.score == 1.0 and got.verdicts == [{"rank": 1, "verdict": "yes"}]
    assert store.run_info(run).cases == 1


def test_resolve_run_by_latest_name_and_prefix(store):
    a = store.begin_run(None, {"name": "nightly"})
    b = store.begin_run("release-2", {"name": "release"})
    assert store.resolve_run(None) == b
    assert store.resolve_run("latest") == b
    assert store.resolve_run("nightly") == a
    assert store.resolve_run("release-") == b
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.resolve_run("nope")


def test_schema_is_versioned(store):
    from sqlalchemy import select, update

    from contextjudge.store import _schema as S
    with store.engine.connect() as conn:
        assert conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version")).scalar() == \
            str(SCHEMA_VERSION)
    with store.engine.begin() as conn:
        conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION + 1)))
    try:
        with pytest.raises(StoreError, match="a newer contextjudge or another program made it"):
            ResultsStore(store.target)
    finally:
        with store.engine.begin() as conn:
            conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))


def test_a_version_1_store_is_upgraded_in_place_on_both_backends(store):
    """Schema 1 -> the current one through real ALTER TABLE on SQLite and PostgreSQL, one step per version: the
    results gain gold_score and score_spread (2) and the read columns (4), cj_labels, cj_queue and cj_spend are
    created, the recorded version becomes the current one, and nothing stored before is lost."""
    from sqlalchemy import inspect, select, text, update

    from contextjudge.store import _schema as S
    evaluate(_cases()[:2], [ContextualPrecisionMetric(model=FakeJudge())], store=store, run_id="old-run")
    with store.engine.begin() as conn:  # make it a version-1 store: what a contextjudge of schema 1 left behind
        conn.execute(text("DROP TABLE cj_labels"))
        conn.execute(text("DROP TABLE cj_queue"))
        conn.execute(text("DROP TABLE cj_spend"))
        for name in ("captured", "judged", "retriever"):  # schema 4's indexes and columns
            conn.execute(text(f"DROP INDEX IF EXISTS ix_cj_results_{name}"))
        for name, _ in S.FACET_COLUMNS["cj_results"]:
            conn.execute(text(f"ALTER TABLE cj_results DROP COLUMN {name}"))
        conn.execute(text("DROP TABLE cj_label_log"))
        conn.execute(text("ALTER TABLE cj_runs DROP COLUMN goldens_hash"))
        conn.execute(text("ALTER TABLE cj_runs DROP COLUMN goldens_name"))
        conn.execute(text("ALTER TABLE cj_results DROP COLUMN gold_score"))
        conn.execute(text("ALTER TABLE cj_results DROP COLUMN score_spread"))
        conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value="1"))
    store.engine.dispose()
    upgraded = ResultsStore(store.target)
    try:
        assert upgraded.schema_version == SCHEMA_VERSION == 5
        found = inspect(upgraded.engine)
        assert {"gold_score", "score_spread"} <= {c["name"] for c in found.get_columns("cj_results")}
        assert found.has_table("cj_labels") and found.has_table("cj_queue") and found.has_table("cj_spend")
        with upgraded.engine.connect() as conn:
            assert conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version")).scalar() == \
                str(SCHEMA_VERSION)
        back = upgraded.load_run("old-run")  # the old rows read back, their new columns empty
        assert len(back) == 2 and all(m.score is not None and m.gold_score is None
                                      for tr in back.test_results for m in tr.metrics_data)
        key = upgraded.load_cases("old-run")[0].case_key
        matched, _ = upgraded.add_labels([{"key": key, "labels": [1, 0]}])
        assert [m.case_keys for m in matched] == [[key]]
        evaluate(_cases()[:2], [ContextualPrecisionMetric(model=FakeJudge())], store=upgraded, run_id="new-run")
        assert len(upgraded.load_run("new-run")) == 2
    finally:
        upgraded.close()


def _sqlite_file(path, *statements):
    import sqlite3

    conn = sqlite3.connect(path)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return str(path)


def test_a_store_made_by_another_program_or_version_says_so(tmp_path):
    # a table with our name and other columns: another program (or another version) made this database
    foreign = _sqlite_file(tmp_path / "foreign.db", "CREATE TABLE cj_runs (id INTEGER PRIMARY KEY, label TEXT)")
    with pytest.raises(StoreError) as info:
        open_store(foreign)
    msg = str(info.value)
    assert "'cj_runs'" in msg and "another version of contextjudge or another program" in msg
    assert "missing config, created_at," in msg and "unexpected id, label" in msg
    assert "Pass a new path" in msg and "cannot open" not in msg

    # our meta table, recording a schema version from the future, or one that is not a version at all
    for value in (str(SCHEMA_VERSION + 7), "v2-beta"):
        path = _sqlite_file(tmp_path / f"meta-{value}.db",
                            "CREATE TABLE cj_meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)",
                            f"INSERT INTO cj_meta VALUES ('schema_version', '{value}')")
        with pytest.raises(StoreError) as info:
            open_store(path)
        msg = str(info.value)
        assert f"schema version '{value}'" in msg and "a newer contextjudge or another program made it" in msg
        assert "pass a new path" in msg and "cannot open" not in msg

    # not a database at all
    (tmp_path / "notes.db").write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(StoreError, match="not a SQLite database: another program made it. Pass a new path"):
        open_store(str(tmp_path / "notes.db"))

    # another program's SQLite file (tables of its own, none of ours) is refused and left untouched, not written to
    shared = _sqlite_file(tmp_path / "app.db", "CREATE TABLE runs (id INTEGER PRIMARY KEY, label TEXT)")
    with pytest.raises(StoreError, match=r"a SQLite database of another program \(tables: runs\).*nothing was "
                                         r"written to it\. Pass a new path"):
        open_store(shared)
    con = sqlite3.connect(shared)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["runs"]
    con.close()


def test_a_store_whose_results_table_has_gone_is_refused_not_recreated(tmp_path):
    path = str(tmp_path / "r.db")
    s = open_store(path)
    run = s.begin_run("kept", {})
    s.save_case(run, "k", 0, LLMTestCase(input="q", actual_output="a", retrieval_context=["x"]))
    s.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys=OFF")
    con.execute("DROP TABLE cj_verdicts")
    con.execute("DROP TABLE cj_results")
    con.commit()
    con.close()
    for read_only in (False, True):
        with pytest.raises(StoreError, match="cj_results"):
            open_store(path, read_only=read_only)
    con = sqlite3.connect(path)
    assert "cj_results" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()


def test_a_failed_write_is_rolled_back_whole(store):
    run = store.begin_run("tx", {})
    bad = MetricResult(name="M", score=0.5, threshold=0.5, success=True, verdicts=[{"rank": 1}])
    # a crash after the result row is written but before its verdicts are must leave no trace of either
    original = store._upsert

    def upsert_then_fail(conn, row):
        original(conn, row)
        raise RuntimeError("simulated crash mid-transaction")

    store._upsert = upsert_then_fail
    with pytest.raises(RuntimeError):
        store.save_result(run, "k", bad)
    store._upsert = original
    assert store.completed_results(run) == {}


def test_open_store_errors_say_what_to_do(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        open_store(str(tmp_path))
    with pytest.raises(StoreError, match="default"):
        open_store(None)
    with pytest.raises(StoreError, match="cannot open the store|cannot use the store"):
        open_store("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_default_store_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = open_store("default")
    assert (tmp_path / ".contextjudge" / "results.db").exists()
    s.close()


def test_capture_scorer_writes_deferred_cases_to_the_store(tmp_path):
    from contextjudge.capture import CapturedCase, CaptureSession

    s = open_store(str(tmp_path / "cap.db"))
    scorer = CaptureSession(metrics=[ContextualPrecisionMetric(model=FakeJudge())], mode="deferred", store=s,
                           goldens=[{"input": "What is the capital of France? (0)",
                                     "expected_output": "Paris is the capital of France."}])
    for tc in _cases(2):
        tc.expected_output = None
        scorer.submit(CapturedCase(test_case=tc, source="test"))
    run = scorer.run_id
    todo = s.unscored_cases(run)
    assert len(todo) == 2
    assert todo[0].test_case.expected_output == "Paris is the capital of France."
    assert todo[0].test_case.id == todo[0].case_key


_RACER = """
import sys, time
from contextjudge.store import open_store
url, go, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
s = open_store(url)
while time.time() < go:
    time.sleep(0.001)
for i in range(n):
    s.begin_run(f"race-{i}", {"name": "race", "metrics": ["m"]})
print("ok")
"""


def test_two_processes_starting_the_same_run_ids_both_get_the_run(store):
    """Two CI shards, or a worker and its restart, start the same run ids at the same moment: no UNIQUE failure."""
    import sys
    import time

    url = store.engine.url.render_as_string(hide_password=False)
    if store.is_sqlite:
        url = store.engine.url.database
    go = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, url, str(go), "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert {f"race-{i}" for i in range(40)} <= {r.run_id for r in store.list_runs()}
    for i in (0, 39):
        assert store.load_run(f"race-{i}").run_id == f"race-{i}"


def test_a_full_disk_under_evaluate_returns_what_was_scored_with_the_error(tmp_path, caplog):
    """SQLite's own "database or disk is full" (the file capped with max_page_count a few pages past its size):
    evaluate goes on scoring in memory and returns every result with the store's error, instead of raising."""
    from sqlalchemy import event

    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge

    path = str(tmp_path / "full.db")
    s = open_store(path)
    con = sqlite3.connect(path)
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    con.close()

    @event.listens_for(s.engine, "connect")
    def cap(dbapi_conn, _record):
        dbapi_conn.execute(f"PRAGMA max_page_count = {pages + 8}")

    s.engine.dispose()  # new connections get the cap
    cases = [LLMTestCase(input=f"question {i} " * 40, actual_output="an answer " * 200,
                         retrieval_context=["node text " * 300] * 3) for i in range(20)]
    with caplog.at_level("ERROR", logger="contextjudge"):
        res = evaluate(cases, [ContextualRelevancyMetric(model=FakeJudge(default="yes"))], store=s,
                       show_progress=False)
    assert res.store_error and "database or disk is full" in res.store_error
    assert len(res.test_results) == 20
    assert all(tr.metrics_data and tr.metrics_data[0].score is not None for tr in res.test_results)
    assert sum("returns them with this error" in r.getMessage() for r in caplog.records) == 1
    stored = open_store(path, read_only=True)
    assert 0 < stored.list_runs()[0].cases < 20 or stored.list_runs()[0].results < 20  # part of it was written

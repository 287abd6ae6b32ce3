"""The store's read API (contextjudge.open_store: runs, results, cases, trend), `contextjudge trend` (text, --json,
--fail-on-drop) and a read-only store read by every read command.

The stores here are real SQLite files written through the store's own methods; a week of production is made by
writing each day's cases and then back-dating that day's rows (what a capture on that day would have stored). The
end-to-end week through a FastAPI app and a real worker is tests/test_production_week.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time

import pytest
from backdate import backdate_days
from sqlalchemy import text

import contextjudge
from contextjudge import LLMTestCase, MetricResult
from contextjudge.cli import main
from contextjudge.errors import StoreError
from contextjudge.stats import paired_difference, unpaired_difference

DAY = 86400.0
METRICS = ("Contextual Relevancy", "Context Utilization")


def _week(path: str, *, days: int = 7, per_day: int = 30, degraded_day: int | None = 6, judge_change_day: int | None
          = None, drop: float = 0.3, seed: int = 7, questions: int | None = None) -> float:
    """A store with ``days`` days of captured, judged cases (the last day ends now); returns the start of day 0.
    The retriever ``policy_search`` scores about 0.75; on ``degraded_day`` about ``drop`` less. From
    ``judge_change_day`` on, another judge scored the cases."""
    store = contextjudge.open_store(path)
    rng = random.Random(seed)
    run = store.begin_run(None, {"name": "prod", "mode": "worker"})
    day0 = (time.time() // DAY - (days - 1)) * DAY
    for d in range(days):
        for i in range(per_day):
            key = f"d{d}-c{i}"
            q = d * 1000 + i if questions is None else i % questions  # new questions each day, unless asked
            tc = LLMTestCase(input=f"How many vacation days do I get, question {q}?", actual_output="25 days",
                             retrieval_context=["Employees get 25 vacation days."], tags=["prod"],
                             additional_metadata={"retriever": "policy_search" if i % 5 else "faq_search"})
            store.save_case(run, key, d * 1000 + i, tc)
            for m in METRICS:
                base = 0.75 - (drop if d == degraded_day else 0.0)
                score = min(1.0, max(0.0, rng.gauss(base, 0.12)))
                other = judge_change_day is not None and d >= judge_change_day
                store.save_result(run, key, MetricResult(
                    name=m, score=score, threshold=0.5, success=score >= 0.5,
                    evaluation_model="gpt-4o-mini" if other else "contextjudge-local",
                    details={"judge_identity": "other-judge" if other else "local-judge"}))
    store.end_run(run, {})
    backdate_days(store, days, day0, DAY)  # each day's captures (and their results) on their day
    store.close()
    return day0


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------------------------------------- the store API
def test_the_store_api_streams_results_cases_runs_and_a_trend(tmp_path):
    path = str(tmp_path / "prod.db")
    day0 = _week(path, days=3, per_day=12, degraded_day=None)
    store = contextjudge.open_store(path, read_only=True)
    rows = store.results(metric="Contextual Relevancy")
    assert iter(rows) is rows  # an iterator, streamed: not a list held whole
    rows = list(rows)
    assert len(rows) == 36 and {r["metric"] for r in rows} == {"Contextual Relevancy"}
    assert [r["captured_at"] for r in rows] == sorted(r["captured_at"] for r in rows)
    first = rows[0]
    assert first["judge"] == "contextjudge-local" and first["judge_identity"] == "local-judge"
    assert first["retriever"] == "faq_search" and first["tags"] == ["prod"] and first["run_id"]
    # the time range and filters
    day1 = list(store.results(since=day0 + DAY, until=day0 + 2 * DAY))
    assert len(day1) == 24 and all(day0 + DAY <= r["captured_at"] < day0 + 2 * DAY for r in day1)
    assert {r["retriever"] for r in store.results(where={"retriever": "policy_search"})} == {"policy_search"}
    assert list(store.results(where={"tag": "nightly"})) == []
    assert len(list(store.results(since="3d"))) == 72  # a span back from now
    # pandas: the same rows
    df = store.results(metric="Contextual Relevancy", as_="pandas")
    assert len(df) == 36 and df["score"].tolist() == [r["score"] for r in rows]
    cases = list(store.cases())
    assert len(cases) == 36 and cases[0]["input"].startswith("How many") and cases[0]["queue_state"] is None
    runs = list(store.runs())
    assert [r["name"] for r in runs] == ["prod"] and runs[0]["results"] == 72
    # the trend: running sums per window, the same means as the rows give
    trend = store.trend(by="day")
    assert [w.start for w in trend.windows] == [day0, day0 + DAY, day0 + 2 * DAY]
    mw = trend.windows[1].metrics["Contextual Relevancy"]
    mine = [r["score"] for r in day1 if r["metric"] == "Contextual Relevancy"]
    assert mw.n == 12 and mw.mean.estimate == pytest.approx(sum(mine) / 12)
    assert mw.mean.low < mw.mean.estimate < mw.mean.high and mw.judges == {"contextjudge-local": 12}
    assert store.trend(by="day", min_cases=13).windows[0].metrics["Contextual Relevancy"].mean is None
    with pytest.raises(contextjudge.ConfigurationError, match="'24h', '7d'"):
        list(store.results(since="last tuesday"))
    with pytest.raises(contextjudge.ConfigurationError, match="as_="):
        store.results(as_="polars")


def test_a_read_only_store_is_never_written(tmp_path):
    path = str(tmp_path / "ro.db")
    _week(path, days=2, per_day=5, degraded_day=None)
    before = {f: os.stat(os.path.join(tmp_path, f)).st_mtime_ns for f in os.listdir(tmp_path)}
    store = contextjudge.open_store(path, read_only=True)
    assert store.trend().windows and store.load_run("prod").test_results
    with pytest.raises(StoreError):
        store.begin_run("new", {})
    store.close()
    after = {f: os.stat(os.path.join(tmp_path, f)).st_mtime_ns for f in os.listdir(tmp_path)}
    assert {f: t for f, t in after.items() if f.endswith(".db")} == {f: t for f, t in before.items()
                                                                      if f.endswith(".db")}
    with pytest.raises(StoreError, match="opened read-only, so none is made"):
        contextjudge.open_store(str(tmp_path / "missing.db"), read_only=True)


def _immutable(paths: list[str], on: bool) -> bool:
    """Make files and folders immutable (chattr +i), so that even root may not write them: a CI artifact on a
    read-only mount, as this process sees it. False where the file system does not allow it."""
    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", *paths], capture_output=True, check=False)
    return done.returncode == 0


def test_every_read_command_reads_a_store_it_may_not_write(tmp_path, capsys):
    folder = tmp_path / "artifact"
    folder.mkdir()
    path = str(folder / "ci.db")
    _week(path, days=3, per_day=12, degraded_day=None)
    store = contextjudge.open_store(path)
    run2 = store.begin_run(None, {"name": "second"})
    store.save_case(run2, "k", 0, LLMTestCase(input="q", actual_output="a", retrieval_context=["x"]))
    store.save_result(run2, "k", MetricResult(name="Contextual Relevancy", score=0.5, threshold=0.5, success=True))
    store.end_run(run2, {})
    store.close()
    locked = [path, str(folder)]
    if os.geteuid() == 0:
        if not _immutable(locked, True):
            pytest.skip("root writes through any permission, and chattr +i is not available here")
    else:
        os.chmod(path, 0o444)
        os.chmod(folder, 0o555)
    try:
        assert not os.access(path, os.W_OK)
        before = os.stat(path).st_mtime_ns
        out_html = str(tmp_path / "r.html")
        for cmd in (["runs"], ["report", "prod", "-o", out_html], ["export", "prod", "--format",
                    "csv"], ["compare", "prod", "second"], ["trend", "--json"]):
            rc, out, err = _cli(capsys, *cmd, "--store", path)
            assert rc == 0, (cmd, out[-500:], err[-1500:])
        assert json.loads(out)["windows"]
        assert sorted(os.listdir(folder)) == ["ci.db"] and os.stat(path).st_mtime_ns == before
    finally:
        if os.geteuid() == 0:
            _immutable(locked, False)
        else:
            os.chmod(folder, 0o755)


# ---------------------------------------------------------------------------------------------- trend and alerts
def test_trend_prints_windows_with_intervals_and_says_when_too_few(tmp_path, capsys):
    path = str(tmp_path / "t.db")
    _week(path, days=3, per_day=12, degraded_day=None)
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--min-cases", "11", "--filter", "retriever=policy_search")
    assert rc == 0
    # 12 cases a day, of which the faq_search retriever took every fifth (3): 9 left, fewer than 11
    assert out.count("too few cases (< 11)") == 6 and "retriever=policy_search" in out
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--json", "--metric", "Context Utilization")
    data = json.loads(out)
    api = contextjudge.open_store(path).trend(metric="Context Utilization").to_dict()
    assert data == json.loads(json.dumps(api)) and data["metrics"] == ["Context Utilization"]
    rc, _, err = _cli(capsys, "trend", "--store", path, "--filter", "retriever")
    assert rc == 2 and "KEY=VALUE" in err


def test_trend_names_the_store_never_by_its_absolute_path(tmp_path, capsys, monkeypatch):
    """Issue 48 item 9: ``trend`` printed the store's absolute path, also into the shareable HTML page."""
    folder = tmp_path / "home" / "alice" / "secret-project"
    folder.mkdir(parents=True)
    path = str(folder / "prod.db")
    _week(path, days=2, per_day=12, degraded_day=None)
    page = tmp_path / "trend.html"
    monkeypatch.chdir(tmp_path)  # the store lies inside the working folder: its relative path
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--min-cases", "2", "--html", "trend.html")
    assert rc == 0 and str(tmp_path) not in out
    assert out.splitlines()[0].startswith(os.path.join("home", "alice", "secret-project", "prod.db") + ": by day")
    html = page.read_text("utf-8")
    assert "prod.db" in html and "alice" not in html and str(tmp_path) not in html  # the page: the file's name only
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the store lies outside the working folder: its name
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--min-cases", "2")
    assert rc == 0 and out.splitlines()[0].startswith("prod.db: by day") and str(tmp_path) not in out


def test_fail_on_drop_fires_on_the_degraded_day_only(tmp_path, capsys):
    path = str(tmp_path / "week.db")
    day0 = _week(path)
    # each earlier day as the latest window: no drop
    for d in range(1, 6):
        until = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(day0 + (d + 1) * DAY))
        rc, out, _ = _cli(capsys, "trend", "--store", path, "--until", until, "--fail-on-drop")
        assert rc == 0, out
        assert out.count("no drop ") == 2 and "DROP" not in out
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop")
    assert rc == 1
    assert "DROP Contextual Relevancy" in out and "DROP Context Utilization" in out
    assert "2 metric(s) tested, each at a 97.5% interval (Bonferroni for 2 metrics" in out
    assert "(unpaired;" in out and "FAILED: significant drop on" in out
    assert "question" in out.split("DROP Contextual Relevancy")[1]  # the worst cases, by their input
    # against the week before, and machine-readable
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop", "--baseline", "last-week", "--json")
    check = json.loads(out)["drop_check"]
    assert rc == 1 and check["baseline"]["words"] == "the 7 days before"
    assert {d["status"] for d in check["drops"]} == {"drop"}
    assert all(d["difference"]["high"] < 0 for d in check["drops"])
    # a drop smaller than --min-drop does not fire
    rc, _, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop", "--min-drop", "0.5")
    assert rc == 0


def test_inputs_seen_in_both_windows_are_paired(tmp_path, capsys):
    path = str(tmp_path / "golden.db")
    _week(path, days=2, per_day=20, degraded_day=1, drop=0.1, questions=20)  # the same 20 questions each day
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop")
    assert "(paired;" in out and "(unpaired;" not in out


def test_a_changed_judge_is_reported_as_such_never_as_a_drop(tmp_path, capsys):
    path = str(tmp_path / "judge.db")
    _week(path, degraded_day=6, judge_change_day=6)  # the last day is worse AND scored by another judge
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop")
    assert rc == 0 and "DROP" not in out
    assert "JUDGE CHANGED Contextual Relevancy: contextjudge-local -> gpt-4o-mini: not tested" in out
    assert "not a drop of the retriever" in out
    assert "judge changed in " in out  # the trend table's own note
    trend = contextjudge.open_store(path).trend()
    assert [c[1] for c in trend.judge_changes] == list(sorted(METRICS))


def test_the_welch_and_paired_intervals():
    iv = unpaired_difference([0.6, 0.7, 0.8], [0.3, 0.4, 0.5])
    assert iv.estimate == pytest.approx(-0.3) and iv.method == "welch-t"
    assert iv.low == pytest.approx(-0.527, abs=2e-3) and iv.high == pytest.approx(-0.073, abs=2e-3)
    assert unpaired_difference([0.5], [0.4]).low is None
    same = paired_difference([(0.5, 0.4), (0.6, 0.4), (0.7, 0.6)])
    assert same.high == pytest.approx(0.010, abs=2e-3)


def test_the_store_api_and_the_alert_on_postgresql(pg_url, capsys, wipe):
    """The same week on PostgreSQL: rows stream from a server-side cursor, the trend and the alert agree."""
    wipe_store = wipe
    store = contextjudge.open_store(pg_url)
    wipe_store(store)
    store.close()
    _week(pg_url, days=4, per_day=15, degraded_day=3)
    ro = contextjudge.open_store(pg_url, read_only=True)
    rows = ro.results(metric="Context Utilization")
    first = next(rows)  # the first row arrives before the rest is read
    assert first["metric"] == "Context Utilization" and len(list(rows)) == 59
    trend = ro.trend()
    assert len(trend.windows) == 4 and trend.windows[-1].metrics["Contextual Relevancy"].n == 15
    rc, out, _ = _cli(capsys, "trend", "--store", pg_url, "--fail-on-drop")
    assert rc == 1 and "DROP Contextual Relevancy" in out
    rc, out, _ = _cli(capsys, "trend", "--store", pg_url, "--json")
    assert json.loads(out) == json.loads(json.dumps(trend.to_dict()))
    with pytest.raises(StoreError):
        ro.begin_run("no", {})
    wipe_store(contextjudge.open_store(pg_url))


class _MyRelevancyTemplate(__import__("contextjudge.templates", fromlist=["x"]).ContextualRelevancyTemplate):
    """A user's own prompt for relevancy: the same judge model, another prompt."""

    @staticmethod
    def generate_verdicts(*args, **kwargs):
        return "Judge strictly. " + __import__("contextjudge.templates", fromlist=["x"]).ContextualRelevancyTemplate \
            .generate_verdicts(*args, **kwargs)


def test_the_judge_identity_a_result_records_changes_with_the_prompt_and_the_judge(tmp_path):
    from contextjudge import evaluate
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge

    path = str(tmp_path / "id.db")
    cases = [LLMTestCase(input=f"q{i}", actual_output="a", retrieval_context=["x", "y"]) for i in range(3)]
    judge = FakeJudge(default="yes")
    evaluate(cases, [ContextualRelevancyMetric(model=judge)], store=path, show_progress=False)
    evaluate(cases, [ContextualRelevancyMetric(model=judge)], store=path, show_progress=False)
    evaluate(cases, [ContextualRelevancyMetric(model=judge, evaluation_template=_MyRelevancyTemplate)], store=path,
             show_progress=False)
    evaluate(cases, [ContextualRelevancyMetric(model=FakeJudge(default="yes", temperature=0.7))], store=path,
             show_progress=False)
    ids = [r["judge_identity"] for r in contextjudge.open_store(path).results()]
    runs = [ids[i * 3:(i + 1) * 3] for i in range(4)]
    assert all(len(set(r)) == 1 for r in runs)
    assert runs[0] == runs[1]                       # the same judge and prompt: the same identity
    assert len({r[0] for r in runs}) == 3           # another prompt, other parameters: another identity each


def test_fail_on_drop_tests_faithfulness_answer_relevancy_and_a_ranking_metric(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(globals(), "METRICS", ("Faithfulness", "Answer Relevancy", "NDCG@5"))
    path = str(tmp_path / "week.db")
    _week(path)
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop")
    assert rc == 1
    for name in ("Faithfulness", "Answer Relevancy", "NDCG@5"):
        assert f"DROP {name}" in out
    assert "3 metric(s) tested" in out


# ---------------------------------------------------------------------------------------------- in SQL (schema 4)
def _as_version_3(url: str) -> None:
    """Make a store what a contextjudge of schema 3 left behind: no read columns on cj_results, no their indexes."""
    from contextjudge.store import _schema as S

    s = contextjudge.open_store(url)
    with s.engine.begin() as conn:
        for name in ("captured", "judged", "retriever"):
            conn.execute(text(f"DROP INDEX IF EXISTS ix_cj_results_{name}"))
        for name, _ in S.FACET_COLUMNS["cj_results"]:
            conn.execute(text(f"ALTER TABLE cj_results DROP COLUMN {name}"))
        conn.execute(text("UPDATE cj_meta SET value = '3' WHERE key = 'schema_version'"))
    s.close()


def _close(a: dict, b: dict) -> None:
    """Two trends' dicts equal, figures to 1e-9 (sums made in another order)."""
    assert json.dumps(a, sort_keys=True, default=str).count(":") == json.dumps(b, sort_keys=True,
                                                                               default=str).count(":")
    def walk(x, y):
        if isinstance(x, float) or isinstance(y, float):
            assert x == pytest.approx(y, abs=1e-9)
        elif isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                walk(x[k], y[k])
        elif isinstance(x, list):
            assert len(x) == len(y)
            for p, q in zip(x, y, strict=True):
                walk(p, q)
        else:
            assert x == y
    walk(a, b)


def _migration(url: str) -> None:
    _week(url, days=4, per_day=15, degraded_day=3, judge_change_day=2, questions=10)
    before = contextjudge.open_store(url, read_only=True)
    assert before.in_sql() and before.in_sql({"retriever": "x", "tag": "prod"})
    want = {w: before.trend(by=w).to_dict() for w in ("day", "hour")}
    want_filtered = before.trend(where={"retriever": "faq_search", "tag": "prod"}).to_dict()
    before.close()
    _as_version_3(url)
    # read-only, schema 3: read as before (the rows streamed and summed in Python), never written
    old = contextjudge.open_store(url, read_only=True)
    assert old.schema_version == 3 and not old.in_sql()
    _close(old.trend().to_dict(), want["day"])
    with pytest.raises(contextjudge.ConfigurationError, match="schema 4"):
        old.aggregate()
    old.close()
    # opened for writing: upgraded in place, every result's read columns filled from its case and details
    new = contextjudge.open_store(url)
    assert new.schema_version >= 4 and new.in_sql()
    with new.engine.connect() as conn:
        rows = conn.execute(text("SELECT r.captured_at, c.created_at, r.retriever, r.tags, r.judge_identity, "
                                 "r.input_key, r.details FROM cj_results r JOIN cj_cases c ON c.run_id = r.run_id "
                                 "AND c.case_key = r.case_key")).all()
    assert len(rows) == 120
    assert all(r[0] == r[1] and r[2] in ("faq_search", "policy_search") and r[3] == "\x1fprod\x1f" and
               r[4] == json.loads(r[6])["judge_identity"] and len(r[5]) == 32 for r in rows)
    assert len({r[5] for r in rows}) == 10  # ten questions: ten input keys
    for w in ("day", "hour"):
        _close(new.trend(by=w).to_dict(), want[w])
    _close(new.trend(where={"retriever": "faq_search", "tag": "prod"}).to_dict(), want_filtered)
    new.close()


def test_a_version_3_store_is_upgraded_in_place_and_reads_the_same(tmp_path):
    _migration(str(tmp_path / "v3.db"))


def test_a_version_3_store_is_upgraded_in_place_on_postgresql(pg_url, wipe):
    s = contextjudge.open_store(pg_url)
    wipe(s)
    s.close()
    try:
        _migration(pg_url)
    finally:
        wipe(contextjudge.open_store(pg_url))


def _no_rows(store, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a read that should aggregate in SQL streamed the rows")
    monkeypatch.setattr(type(store), "iter_results", refuse)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_trend_and_the_drop_check_aggregate_in_the_database(tmp_path, backend, request, monkeypatch):
    """trend (every window, filters, judge changes) and --fail-on-drop never stream the rows: the database sums
    them; the figures equal those the rows give (the Python path, kept for other metadata filters)."""
    if backend == "postgresql":
        url = request.getfixturevalue("pg_url")
        wipe = request.getfixturevalue("wipe")
        s = contextjudge.open_store(url)
        wipe(s)
        s.close()
    else:
        url = str(tmp_path / "sql.db")
    from contextjudge.store import find_drops
    from contextjudge.store._trend import build_trend

    _week(url, days=5, per_day=20, degraded_day=4, questions=20)  # 16 inputs of policy_search: paired by input
    store = contextjudge.open_store(url, read_only=True)
    rows_trend = {w: build_trend(store.iter_results(light=True), by=w).to_dict() for w in ("hour", "day", "week")}
    slow = {}
    for where in (None, {"retriever": "policy_search"}):
        tr = build_trend(store.iter_results(where=where, light=True))
        drops, info = find_drops(_RowsOnly(store), tr, where=where)
        slow[json.dumps(where)] = (tr, [d.to_dict() for d in drops], info)
    _no_rows(store, monkeypatch)
    for w in ("hour", "day", "week"):
        _close(store.trend(by=w).to_dict(), rows_trend[w])
    for where in (None, {"retriever": "policy_search"}):
        tr, want, info = slow[json.dumps(where)]
        drops, got_info = find_drops(store, store.trend(where=where), where=where)
        _close([d.to_dict() for d in drops], want)
        assert got_info == info and {d.status for d in drops} == {"drop"} and drops[0].method == "paired"
    gone = store.trend(where={"tag": "nightly"})
    assert gone.windows == []
    store.close()
    if backend == "postgresql":
        wipe(contextjudge.open_store(url))


class _RowsOnly:
    """A store seen without its SQL aggregates: the drop check sums the streamed rows."""

    def __init__(self, store):
        self._s = store

    def iter_results(self, **kw):
        return self._s.iter_results(**kw)


def test_a_nan_score_written_by_another_program_is_skipped_counted_and_named(pg_url, capsys, wipe):
    """PostgreSQL keeps a NaN a foreign program writes into ``score`` (SQLite makes it NULL): ``trend`` failed with
    "cannot convert float NaN to integer", naming no row. Now the row is skipped, counted as an error, and named."""
    store = contextjudge.open_store(pg_url)
    wipe(store)
    store.close()
    _week(pg_url, days=3, per_day=15, degraded_day=None)
    store = contextjudge.open_store(pg_url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE cj_results SET score = 'NaN' WHERE case_key IN ('d2-c3', 'd1-c4') "
                          "AND metric = 'Contextual Relevancy'"))
    store.close()
    try:
        for argv in (["trend", "--store", pg_url], ["trend", "--store", pg_url, "--fail-on-drop"],
                     ["trend", "--store", pg_url, "--json"]):
            rc, out, err = _cli(capsys, *argv)
            assert rc == 0, err
            assert "case d2-c3, metric 'Contextual Relevancy': nan is not a score" in err
            assert "case d1-c4" in err and "postgres" in err
        data = json.loads(out)
        last = data["windows"][-1]["metrics"]["Contextual Relevancy"]
        assert last["judged"] == 14 and last["errors"] == 1
        rows = [r for r in contextjudge.open_store(pg_url).results(metric="Contextual Relevancy")
                if r["case_key"] == "d2-c3"]
        assert rows[0]["score"] is None and rows[0]["error_type"] == "InvalidStoredScore"
    finally:
        wipe(contextjudge.open_store(pg_url))


def _popular_week(path: str, seed: int, days: int = 8, per_day: int = 80) -> None:
    """A stable series of popular questions: each day's cases drawn from 40 questions with Zipf weights, each with
    its own mean; nothing changes from day to day (benchmarks/trend_alarms.py's ``popular`` shape)."""
    rng = random.Random(seed)
    questions = [f"question {q}" for q in range(40)]
    effects = [rng.gauss(0.0, 0.15) for _ in questions]
    weights = [1.0 / (q + 1) ** 1.1 for q in range(len(questions))]
    store = contextjudge.open_store(path)
    run = store.begin_run(None, {"name": "prod", "mode": "worker"})
    day0 = (time.time() // DAY - (days - 1)) * DAY
    for d in range(days):
        for i, q in enumerate(rng.choices(range(len(questions)), weights, k=per_day)):
            key = f"d{d}-c{i}"
            score = min(1.0, max(0.0, 0.70 + effects[q] + rng.gauss(0.0, 0.10)))
            store.save_case(run, key, d * 1000 + i, LLMTestCase(input=questions[q], actual_output="a",
                                                               retrieval_context=["c"]))
            store.save_result(run, key, MetricResult(name="Contextual Relevancy", score=score, threshold=0.5,
                                                     success=score >= 0.5, evaluation_model="contextjudge-local"))
    store.end_run(run, {})
    backdate_days(store, days, day0, DAY)  # each day's captures (and their results) on their day
    store.close()


def test_a_stable_series_of_repeated_questions_raises_no_alarm(tmp_path, capsys):
    """The same popular questions asked again and again are not independent draws: pairing each repeat as its own
    case (and pooling cases) alarmed on 11-13.5% of stable series. This one alarmed; counted by input, it does not.
    A real drop of 0.1 on the same traffic still fires."""
    path = str(tmp_path / "popular.db")
    _popular_week(path, seed=8)
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop", "--json")
    [d] = json.loads(out)["drop_check"]["drops"]
    assert rc == 0 and d["status"] == "no drop", d
    assert d["method"] in ("paired", "unpaired") and d["spread"]  # what the spread of the difference counts
    store = contextjudge.open_store(path)
    with store.engine.begin() as conn:  # the latest day 0.1 worse
        conn.execute(text("UPDATE cj_results SET score = MAX(0.0, score - 0.1) WHERE case_key LIKE 'd7-%'"))
    store.close()
    rc, out, _ = _cli(capsys, "trend", "--store", path, "--fail-on-drop")
    assert rc == 1 and "DROP Contextual Relevancy" in out

"""Old stores and rolling upgrades (issue 48, item 5).

A read-only store of schema 3 or 4 (a CI artifact, a file in a folder this process may not write) is read as it is:
``runs``, ``trend``, ``report``, the MCP ``runs`` tool. An older contextjudge still writing after the store was
upgraded leaves results without their capture time: reads leave them out and count them instead of failing the
whole store, and opening the store for writing fills them in. Real SQLite files made with each old version's DDL
(``old_stores.py``) and the throwaway PostgreSQL server."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

import pytest
from old_stores import make_old_store, write_as_old_version

from contextjudge import LLMTestCase, MetricResult
from contextjudge.cli import _shared, main
from contextjudge.store import open_store

DAY = 86400.0


def _fill(path_or_url: str, run_names=("nightly-a", "nightly-b"), start: float | None = None, n: int = 12,
          score: float = 0.8) -> list[str]:
    """Runs of ``n`` scored cases each, written by today's store (one day apart, the last one today)."""
    store = open_store(path_or_url)
    ids = []
    now = time.time() if start is None else start
    for r, name in enumerate(run_names):
        rid = store.begin_run(f"{name}-{r}", {"name": name})
        for i in range(n):
            store.save_case(rid, f"{name}-k{i}", i, LLMTestCase(
                input=f"How many vacation days, {i}?", actual_output="25 days.", tags=["prod"],
                retrieval_context=["Employees get 25 vacation days.", f"Filler {i}."]))
            store.save_result(rid, f"{name}-k{i}", MetricResult(
                name="Contextual Relevancy", score=score - 0.01 * (i % 3), threshold=0.5, success=True,
                evaluation_model="fake-judge", verdicts=[{"verdict": "yes", "reason": "r"}]))
        store.end_run(rid, {"cases": n})
        at = now - (len(run_names) - 1 - r) * DAY
        with store.engine.begin() as conn:
            from sqlalchemy import text
            conn.execute(text("UPDATE cj_cases SET created_at = :at WHERE run_id = :r"), {"at": at, "r": rid})
            conn.execute(text("UPDATE cj_results SET captured_at = :at, created_at = :at WHERE run_id = :r"),
                         {"at": at, "r": rid})
            conn.execute(text("UPDATE cj_runs SET created_at = :at WHERE run_id = :r"), {"at": at, "r": rid})
        ids.append(rid)
    store.close()
    return ids


def _digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.fixture(params=[3, 4])
def old_store(request, tmp_path):
    """A SQLite file of schema 3 or 4 with two runs, that this process may only read."""
    src = str(tmp_path / "today.db")
    ids = _fill(src)
    path = str(tmp_path / f"schema{request.param}.db")
    make_old_store(path, request.param, src)
    os.chmod(path, 0o444)
    return path, request.param, ids


def _read_only_files(monkeypatch, path: str) -> None:
    """The CLI sees ``path`` as a file it may not write (a CI artifact), even when the tests run as root."""
    real = os.access
    monkeypatch.setattr(_shared.os, "access", lambda p, mode, *a, **k: (
        False if (mode & os.W_OK and os.path.abspath(p) in (path, os.path.dirname(path))) else real(p, mode)))


def test_a_read_only_store_of_schema_3_or_4_is_read_as_it_is(old_store):
    path, version, ids = old_store
    before = _digest(path)
    store = open_store(path, read_only=True)
    assert store.schema_version == version
    runs = list(store.runs())
    assert sorted(r["run_id"] for r in runs) == sorted(ids) and all(r["cases"] == 12 for r in runs)
    assert [r.run_id for r in store.list_runs()] == ids[::-1]
    res = store.load_run(ids[-1])
    assert len(res.test_results) == 12 and all(tr.metrics_data[0].score is not None for tr in res.test_results)
    trend = store.trend()
    assert sum(m.n for w in trend.windows for m in w.metrics.values()) == 24 and len(trend.windows) == 2
    assert len(list(store.results())) == 24 and len(list(store.cases())) == 24
    assert store.label_log() == []
    store.close()
    assert _digest(path) == before  # never written


def test_the_cli_and_mcp_read_an_old_read_only_store(old_store, monkeypatch, capsys, tmp_path):
    path, version, ids = old_store
    _read_only_files(monkeypatch, path)
    before = _digest(path)
    assert main(["runs", "--store", path]) == 0
    out = capsys.readouterr().out
    assert ids[0] in out and ids[1] in out
    assert main(["trend", "--store", path]) == 0
    assert "Contextual Relevancy" in capsys.readouterr().out
    assert main(["trend", "--store", path, "--fail-on-drop", "--min-cases", "5"]) == 0
    assert "no drop Contextual Relevancy" in capsys.readouterr().out
    html = str(tmp_path / "report.html")
    assert main(["report", "--store", path, ids[-1], "-o", html]) == 0
    with open(html, encoding="utf-8") as fh:
        assert "Contextual Relevancy" in fh.read()
    from contextjudge.cli._mcp_tools import Tools

    tools = Tools(path, root=str(tmp_path))
    try:
        got = tools.runs()
        assert sorted(r["id"] if "id" in r else r["run_id"] for r in got["runs"]) == sorted(ids), got
    finally:
        tools.close()
    assert _digest(path) == before
    assert open_store(path, read_only=True).schema_version == version  # not migrated


def _rolling(url_or_path: str, source: str) -> tuple[str, str]:
    """A store of this schema with a run of yesterday and a run of today (12 cases each), then an older (schema 3)
    contextjudge, started before the upgrade, still writing 12 cases of today into it."""
    today = time.time() // DAY * DAY + 3600  # one fixed moment: both writers' cases in today's window
    ids = _fill(url_or_path, start=today)
    old_ids = _fill(source, run_names=("old-writer",), score=0.3, start=today)
    store = open_store(url_or_path)
    n = write_as_old_version(store.engine, source, 3)
    assert n == 12
    return ids, old_ids[0]


def _check_rolling(target: str, read_only_first: bool, monkeypatch, capsys) -> None:
    if read_only_first:
        # read-only (a replica, an artifact): the old writer's results are left out and counted; nothing fails
        store = open_store(target, read_only=True)
        trend = store.trend()
        assert trend.unplaced == 12
        assert sum(m.n for w in trend.windows for m in w.metrics.values()) == 24
        assert trend.to_dict()["unplaced"] == 12
        store.close()
        if "://" not in target:
            _read_only_files(monkeypatch, target)
            assert main(["trend", "--store", target]) == 0
            assert "left out: 12 result(s) without a capture time" in capsys.readouterr().out
            assert main(["trend", "--store", target, "--fail-on-drop", "--min-cases", "5"]) == 0
            capsys.readouterr()
            monkeypatch.undo()
    # opened for writing by this version: the old writer's results get their read columns, and count
    store = open_store(target)
    trend = store.trend()
    assert trend.unplaced == 0
    assert sum(m.n for w in trend.windows for m in w.metrics.values()) == 36
    # the drop check sees today's window with the old writer's low scores in it
    assert main(["trend", "--store", target, "--fail-on-drop", "--min-cases", "5"]) == 1
    assert "DROP Contextual Relevancy" in capsys.readouterr().out
    store.close()


def test_an_old_writer_after_the_upgrade_on_sqlite(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "live.db")
    _rolling(path, str(tmp_path / "old-writer.db"))
    _check_rolling(path, True, monkeypatch, capsys)


def test_an_old_writer_after_the_upgrade_on_postgresql(pg_store, tmp_path, monkeypatch, capsys):
    _rolling(pg_store.url, str(tmp_path / "old-writer.db"))
    _check_rolling(pg_store.url, True, monkeypatch, capsys)


def test_the_json_trend_says_how_many_were_left_out(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "live.db")
    _rolling(path, str(tmp_path / "old-writer.db"))
    _read_only_files(monkeypatch, path)
    assert main(["trend", "--store", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unplaced"] == 12


def test_the_html_trend_page_says_how_many_were_left_out(tmp_path, monkeypatch, capsys):
    """The page `trend --html` writes says what the CLI's "left out:" line says (``Trend.unplaced``): the results an
    older writer left with no capture time, in no window; once this version opens the store for writing, nothing."""
    path = str(tmp_path / "live.db")
    _rolling(path, str(tmp_path / "old-writer.db"))
    pages = tmp_path / "pages"
    pages.mkdir()
    _read_only_files(monkeypatch, path)
    assert main(["trend", "--store", path, "--html", str(pages / "trend.html")]) == 0
    assert "left out: 12 result(s) without a capture time" in capsys.readouterr().out
    text = " ".join(re.sub(r"<[^>]+>", "", (pages / "trend.html").read_text(encoding="utf-8")).split())
    assert ("Left out: 12 result(s) without a capture time, written by an older contextjudge after the store was "
            "upgraded; they are in no window below.") in text
    monkeypatch.undo()
    open_store(path).close()  # opened for writing: their capture times are filled in
    assert main(["trend", "--store", path, "--html", str(pages / "after.html")]) == 0
    capsys.readouterr()
    assert "Left out" not in (pages / "after.html").read_text(encoding="utf-8")

"""Stores as older contextjudge versions made them (schema 3 and 4), for the tests of reading old stores and of
rolling upgrades (``tests/test_old_stores.py``). The DDL is what SQLAlchemy emitted for SQLite from the
``store/_schema.py`` of each version (schema 3: before commit 1a87422; schema 4: commit 1a87422, before 3d9cd7e added
schema 5's ``cj_runs.goldens_hash`` / ``goldens_name`` and ``cj_label_log``); the rows are written by today's store
and copied over column by column, so they hold what the old writers wrote (an old writer wrote the same row shapes)."""

from __future__ import annotations

import sqlite3

DDL = {
    3: [
    'CREATE TABLE cj_labels ( case_key VARCHAR(255) NOT NULL, input TEXT, labels TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (case_key) );',
    'CREATE TABLE cj_meta ( "key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, PRIMARY KEY ("key") );',
    'CREATE TABLE cj_runs ( run_id VARCHAR(128) NOT NULL, name TEXT, status VARCHAR(16) NOT NULL, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, finished_at FLOAT, fingerprint VARCHAR(64), judges TEXT, config TEXT, summary TEXT, PRIMARY KEY (run_id) );',
    'CREATE TABLE cj_spend ( scope VARCHAR(255) NOT NULL, window FLOAT NOT NULL, tokens INTEGER NOT NULL, dollars FLOAT NOT NULL, calls INTEGER NOT NULL, refused INTEGER NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (scope, window) );',
    'CREATE TABLE cj_verdict_cache ( "key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY ("key") );',
    'CREATE TABLE cj_cases ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, position INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, name TEXT, input TEXT, actual_output TEXT, expected_output TEXT, fingerprint VARCHAR(64), data TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (run_id, case_key), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE TABLE cj_judge_calls ( id INTEGER NOT NULL, run_id VARCHAR(128) NOT NULL, judge TEXT, task VARCHAR(64), metric VARCHAR(128), method VARCHAR(32), cached BOOLEAN NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, seconds FLOAT NOT NULL, cost FLOAT, created_at FLOAT NOT NULL, PRIMARY KEY (id), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE INDEX ix_cj_judge_calls_run ON cj_judge_calls (run_id);',
    'CREATE TABLE cj_results ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, metric VARCHAR(128) NOT NULL, score FLOAT, threshold FLOAT NOT NULL, success BOOLEAN NOT NULL, strict_mode BOOLEAN NOT NULL, reason TEXT, error TEXT, error_type VARCHAR(128), evaluation_model TEXT, verbose_logs TEXT, usage TEXT, details TEXT, created_at FLOAT NOT NULL, gold_score FLOAT, score_spread FLOAT, PRIMARY KEY (run_id, case_key, metric), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE TABLE cj_nodes ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, turn INTEGER NOT NULL, rank INTEGER NOT NULL, node_id TEXT, text TEXT NOT NULL, score FLOAT, node_metadata TEXT, PRIMARY KEY (run_id, case_key, turn, rank), FOREIGN KEY(run_id, case_key) REFERENCES cj_cases (run_id, case_key) ON DELETE CASCADE );',
    'CREATE TABLE cj_queue ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL, owner VARCHAR(255), lease_until FLOAT, attempts INTEGER NOT NULL, priority INTEGER NOT NULL, enqueued_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, note TEXT, PRIMARY KEY (run_id, case_key), FOREIGN KEY(run_id, case_key) REFERENCES cj_cases (run_id, case_key) ON DELETE CASCADE );',
    'CREATE INDEX ix_cj_queue_lease ON cj_queue (state, lease_until);',
    'CREATE INDEX ix_cj_queue_state ON cj_queue (state, priority, enqueued_at);',
    'CREATE TABLE cj_verdicts ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, metric VARCHAR(128) NOT NULL, position INTEGER NOT NULL, item_id TEXT, rank INTEGER, statement TEXT, verdict VARCHAR(32), reason TEXT, data TEXT NOT NULL, PRIMARY KEY (run_id, case_key, metric, position), FOREIGN KEY(run_id, case_key, metric) REFERENCES cj_results (run_id, case_key, metric) ON DELETE CASCADE );',
    ],
    4: [
    'CREATE TABLE cj_labels ( case_key VARCHAR(255) NOT NULL, input TEXT, labels TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (case_key) );',
    'CREATE TABLE cj_meta ( "key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, PRIMARY KEY ("key") );',
    'CREATE TABLE cj_runs ( run_id VARCHAR(128) NOT NULL, name TEXT, status VARCHAR(16) NOT NULL, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, finished_at FLOAT, fingerprint VARCHAR(64), judges TEXT, config TEXT, summary TEXT, PRIMARY KEY (run_id) );',
    'CREATE TABLE cj_spend ( scope VARCHAR(255) NOT NULL, window FLOAT NOT NULL, tokens INTEGER NOT NULL, dollars FLOAT NOT NULL, calls INTEGER NOT NULL, refused INTEGER NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (scope, window) );',
    'CREATE TABLE cj_verdict_cache ( "key" VARCHAR(64) NOT NULL, value TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY ("key") );',
    'CREATE TABLE cj_cases ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, position INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, name TEXT, input TEXT, actual_output TEXT, expected_output TEXT, fingerprint VARCHAR(64), data TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (run_id, case_key), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE TABLE cj_judge_calls ( id INTEGER NOT NULL, run_id VARCHAR(128) NOT NULL, judge TEXT, task VARCHAR(64), metric VARCHAR(128), method VARCHAR(32), cached BOOLEAN NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, seconds FLOAT NOT NULL, cost FLOAT, created_at FLOAT NOT NULL, PRIMARY KEY (id), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE INDEX ix_cj_judge_calls_run ON cj_judge_calls (run_id);',
    'CREATE TABLE cj_results ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, metric VARCHAR(128) NOT NULL, score FLOAT, threshold FLOAT NOT NULL, success BOOLEAN NOT NULL, strict_mode BOOLEAN NOT NULL, reason TEXT, error TEXT, error_type VARCHAR(128), evaluation_model TEXT, verbose_logs TEXT, usage TEXT, details TEXT, created_at FLOAT NOT NULL, gold_score FLOAT, score_spread FLOAT, captured_at FLOAT, retriever TEXT, tags TEXT, judge_identity TEXT, input_key VARCHAR(32), PRIMARY KEY (run_id, case_key, metric), FOREIGN KEY(run_id) REFERENCES cj_runs (run_id) ON DELETE CASCADE );',
    'CREATE INDEX ix_cj_results_captured ON cj_results (captured_at, metric);',
    'CREATE INDEX ix_cj_results_judged ON cj_results (created_at, metric);',
    'CREATE INDEX ix_cj_results_retriever ON cj_results (retriever, captured_at);',
    'CREATE TABLE cj_nodes ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, turn INTEGER NOT NULL, rank INTEGER NOT NULL, node_id TEXT, text TEXT NOT NULL, score FLOAT, node_metadata TEXT, PRIMARY KEY (run_id, case_key, turn, rank), FOREIGN KEY(run_id, case_key) REFERENCES cj_cases (run_id, case_key) ON DELETE CASCADE );',
    'CREATE TABLE cj_queue ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL, owner VARCHAR(255), lease_until FLOAT, attempts INTEGER NOT NULL, priority INTEGER NOT NULL, enqueued_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, note TEXT, PRIMARY KEY (run_id, case_key), FOREIGN KEY(run_id, case_key) REFERENCES cj_cases (run_id, case_key) ON DELETE CASCADE );',
    'CREATE INDEX ix_cj_queue_state ON cj_queue (state, priority, enqueued_at);',
    'CREATE INDEX ix_cj_queue_lease ON cj_queue (state, lease_until);',
    'CREATE TABLE cj_verdicts ( run_id VARCHAR(128) NOT NULL, case_key VARCHAR(255) NOT NULL, metric VARCHAR(128) NOT NULL, position INTEGER NOT NULL, item_id TEXT, rank INTEGER, statement TEXT, verdict VARCHAR(32), reason TEXT, data TEXT NOT NULL, PRIMARY KEY (run_id, case_key, metric, position), FOREIGN KEY(run_id, case_key, metric) REFERENCES cj_results (run_id, case_key, metric) ON DELETE CASCADE );',
    ],
}


def make_old_store(path: str, version: int, source: str) -> None:
    """A SQLite file at ``path`` holding schema ``version``'s tables (``DDL``) filled with the rows of the store at
    ``source`` (a file of today's schema), only the columns that version had, and recording that version."""
    conn = sqlite3.connect(path)
    try:
        for stmt in DDL[version]:
            conn.execute(stmt)
        conn.execute("ATTACH DATABASE ? AS src", (source,))
        for (table,) in conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'").fetchall():
            cols = [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})").fetchall()]
            names = ", ".join(f'"{c}"' for c in cols)
            if table == "cj_meta":
                conn.execute("INSERT INTO cj_meta (key, value) VALUES ('schema_version', ?)", (str(version),))
                continue
            conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
        conn.commit()
        conn.execute("DETACH DATABASE src")
    finally:
        conn.close()


def old_columns(version: int, table: str) -> list[str]:
    """The columns ``table`` had in schema ``version`` (read from its DDL)."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in DDL[version]:
            conn.execute(stmt)
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]
    finally:
        conn.close()


def write_as_old_version(engine, source: str, version: int = 3) -> int:
    """What a process of schema ``version`` still running after the store was upgraded writes: the cases and results
    of the store file ``source`` (written by today's store), copied into the store of ``engine`` (SQLite or
    PostgreSQL) with only the columns that version knew, as its inserts named them. Returns the results copied."""
    from sqlalchemy import text

    src = sqlite3.connect(source)
    src.row_factory = sqlite3.Row
    copied = 0
    try:
        with engine.begin() as conn:
            for table in ("cj_runs", "cj_cases", "cj_nodes", "cj_results"):
                cols = old_columns(version, table)
                rows = [dict(r) for r in src.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()]
                for row in rows:
                    for k in ("success", "strict_mode"):
                        if k in row:
                            row[k] = bool(row[k])
                if rows:
                    conn.execute(text(f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                                      f"({', '.join(':' + c for c in cols)})"), rows)
                if table == "cj_results":
                    copied = len(rows)
    finally:
        src.close()
    return copied

"""The results store: runs, test cases, ranked nodes, verdicts, metric results and judge usage, in SQL.

One implementation on SQLAlchemy Core serves SQLite (a file path; the embedded default) and PostgreSQL (a URL such
as ``postgresql+psycopg://user@host/db``). Every write is one transaction, so a process killed at any moment leaves
only whole cases and whole results behind, and a run started again with the same id resumes where it stopped.
The store is also the judge-verdict cache across runs. It is safe to use from several threads at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import and_, bindparam, create_engine, delete, event, func, insert, inspect, or_, select, text, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from .._result import EvaluationResult, MetricResult, TestResult, Usage
from ..cases.identity import new_run_id
from ..cases.testcase import LLMTestCase
from ..errors import ConfigurationError, StoreError
from . import _schema as S
from ._queue import QueueStore
from ._read import ReadStore
from ._rows import (
    StoredCase,
    _attach_labels,
    _case_from_json,
    _case_input,
    _dumps,
    _loads,
    case_rows,
    judge_call_row,
    result_from_row,
    result_rows,
    stored_case,
)
from ._spend import SpendStore

__all__ = ["DEFAULT_STORE_PATH", "LabelMatch", "ResultsStore", "RunInfo", "StoredCase", "open_store"]

logger = logging.getLogger("contextjudge")

DEFAULT_STORE_PATH = ".contextjudge/results.db"
# runs that many callers add to (capture, pytest): differing configurations there are expected
_SHARED_MODES = ("background", "deferred", "off", "pytest")


@dataclass
class RunInfo:
    """One run as the store knows it."""

    run_id: str
    name: str | None
    status: str
    created_at: float
    finished_at: float | None
    fingerprint: str | None
    judges: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    cases: int = 0
    results: int = 0


@dataclass
class LabelMatch:
    """What one labels record matched: its position in the file (from 1), the key and input it gave, the case keys
    it labelled, and how it matched (``"key"``, ``"input"``, or None: no case)."""

    record: int
    key: str | None
    input: str | None
    case_keys: list[str]
    by: str | None


def _to_url(target: str, create: bool = True) -> str:
    """A SQLAlchemy URL for a path or URL, defaulting PostgreSQL to the psycopg (3) driver. ``create=False``: a
    SQLite file must exist already (a read-only store), and nothing is made."""
    if "://" in target:
        for plain in ("postgresql://", "postgres://"):
            if target.startswith(plain):
                return "postgresql+psycopg://" + target[len(plain):]
        return target
    path = Path(target).expanduser()
    if path.exists() and path.is_dir():
        raise StoreError(f"store path {str(path)!r} is a directory: pass a file path such as "
                         f"{str(path / 'results.db')!r}.")
    if not create:
        if not path.exists():
            raise StoreError(f"no store at {str(path)!r} (opened read-only, so none is made): check the path.")
        return f"sqlite:///{path.resolve()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the folder for the store {str(path)!r}: {exc}. Pass a writable path.") \
            from exc
    return f"sqlite:///{path.resolve()}"


class ResultsStore(QueueStore, SpendStore, ReadStore):
    """A results store on one SQL database. Create it with ``open_store(path_or_url)``.

    ``read_only``: never write (no table created, nothing migrated or marked): for a store you may not write to, such
    as a CI artifact or a replica. A SQLite file is then opened with ``mode=ro`` (and, when even its journal files
    cannot be made, as an immutable file)."""

    def __init__(self, target: str, *, echo: bool = False, read_only: bool = False) -> None:
        self.target = target
        self.read_only = bool(read_only)
        self.url = _to_url(target, create=not self.read_only)
        self.is_sqlite = self.url.startswith("sqlite")
        # a coroutine's calls to a SQLite store run one at a time in a thread of their own (_aio.in_store_thread)
        self.serial_calls = self.is_sqlite
        # SQLite allows one writer at a time: serialise our own writers instead of meeting "database is locked"
        self._write_lock = threading.RLock()
        try:
            if self.is_sqlite and self.read_only:
                self.engine: Engine = _read_only_sqlite(self.url, echo)
            elif self.is_sqlite:
                self.engine = create_engine(self.url, echo=echo,
                                            connect_args={"timeout": 60, "check_same_thread": False})
                event.listen(self.engine, "connect", _sqlite_pragmas)
            elif self.read_only:  # the server refuses any write in these sessions, whatever asks for one
                self.engine = create_engine(self.url, echo=echo, pool_pre_ping=True,
                                            connect_args={"options": "-c default_transaction_read_only=on"})
            else:
                self.engine = create_engine(self.url, echo=echo, pool_pre_ping=True)
        except ImportError as exc:
            raise StoreError(f"the store URL {_redact(self.url)!r} needs a database driver that is not installed "
                             f"({exc}). For PostgreSQL: pip install 'contextjudge[postgres]'.") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot use the store {_redact(self.url)!r}: {exc}. Pass a file path for SQLite or a "
                             "SQLAlchemy URL such as postgresql+psycopg://user@host/db.") from exc
        self._setup()

    def __repr__(self) -> str:
        return f"ResultsStore({_redact(self.url)!r})"

    # ------------------------------------------------------------------------------------------ plumbing
    def _setup(self) -> None:
        if self.read_only:
            self._setup_read_only()
            return
        try:
            self._check_not_foreign()
            before = self._recorded_version()
            if before is not None and before < S.SCHEMA_VERSION:
                self._migrate(before)  # before the columns check: an older store lacks the newer columns
            self._check_foreign_tables()
            for attempt in range(3):
                try:
                    with self._write_lock:
                        S.metadata.create_all(self.engine, checkfirst=True)
                    break
                except (OperationalError, IntegrityError):
                    if attempt == 2:  # another process may be creating the same tables right now
                        raise
                    time.sleep(0.2)
            self._add_indexes()
            with self._begin() as conn:
                row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version")).first()
                if row is None:
                    self._insert_ignore(conn, S.meta, {"key": "schema_version", "value": str(S.SCHEMA_VERSION)},
                                        ["key"])
                    recorded: Any = S.SCHEMA_VERSION
                else:
                    recorded = row[0]
                version = _schema_version(recorded)
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            if "file is not a database" in _short(exc):
                raise StoreError(f"the store {_redact(self.url)!r} is a file but not a SQLite database: another "
                                 "program made it. Pass a new path for the store.") from exc
            raise StoreError(f"cannot open the store {_redact(self.url)!r}: {_short(exc)}. Check the path or URL, "
                             "that the database server is running, and that you may write to it.") from exc
        if version is None or version > S.SCHEMA_VERSION:
            raise StoreError(f"the store {_redact(self.url)!r} records schema version {recorded!r}, which this "
                             f"contextjudge (schema version {S.SCHEMA_VERSION}) does not know: a newer contextjudge "
                             "or another program made it. Upgrade contextjudge to read it, or pass a new path (or "
                             "another database) for this version's store.")
        if version < S.SCHEMA_VERSION:  # pragma: no cover - migrated above; a store older than its meta row
            self._migrate(version)
        self.schema_version = S.SCHEMA_VERSION
        self._q = self._statements()

    def _add_indexes(self) -> None:
        """Create the indexes a store made by an earlier version lacks (``create_all`` adds indexes only with their
        tables). Another process may be adding the same index at the same moment: that is fine."""
        have: dict[str, set[str]] = {}
        found = inspect(self.engine)
        for table in S.metadata.sorted_tables:
            for index in table.indexes:
                names = have.setdefault(table.name, {str(i["name"]) for i in found.get_indexes(table.name)})
                if index.name in names:
                    continue
                try:
                    with self._write_lock:
                        index.create(self.engine, checkfirst=True)
                except SQLAlchemyError:
                    if index.name not in {i["name"] for i in inspect(self.engine).get_indexes(table.name)}:
                        raise

    def _setup_read_only(self) -> None:
        """Check a store opened read-only: ours, of a schema this version reads; write nothing."""
        try:
            self._check_not_foreign()
            found = inspect(self.engine)
            if not found.has_table(S.meta.name):
                raise StoreError(f"the store {_redact(self.url)!r} holds no contextjudge tables (opened read-only, "
                                 "so none were made): check the path or URL.")
            version = self._recorded_version()
            if version is None or version > S.SCHEMA_VERSION:
                raise StoreError(f"the store {_redact(self.url)!r} records a schema version this contextjudge "
                                 f"(schema {S.SCHEMA_VERSION}) does not know: upgrade contextjudge to read it.")
            existing = set(found.get_table_names())
            missing = [t.name for t in S.metadata.sorted_tables if t.name not in existing and t.name in (
                S.runs.name, S.cases.name, S.results.name)]
            if missing:
                raise StoreError(f"the store {_redact(self.url)!r} lacks its table(s) {', '.join(missing)}: it was "
                                 "damaged, or made by an older contextjudge and never opened for writing since.")
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the store {_redact(self.url)!r}: {_short(exc)}. Check the path or URL "
                             "and that you may read it.") from exc
        self.schema_version = version
        self._q = self._statements()

    def _check_not_foreign(self) -> None:
        """Refuse a database that another program made (a SQLite file with tables and none of ours), and a store of
        ours whose core tables have gone (writing to it would silently start over)."""
        found = inspect(self.engine)
        existing = set(found.get_table_names())
        ours = {t.name for t in S.metadata.sorted_tables}
        if self.is_sqlite and existing and not existing & ours:
            shown = ", ".join(sorted(existing)[:5]) + (" ..." if len(existing) > 5 else "")
            raise StoreError(f"the file {_redact(self.url)!r} is a SQLite database of another program (tables: "
                             f"{shown}), not a contextjudge store; nothing was written to it. Pass a new path for "
                             "the store.")
        if S.meta.name in existing:
            gone = [n for n in (S.runs.name, S.cases.name, S.results.name) if n not in existing]
            version = self._recorded_version() if gone else None
            if gone and version is not None and version <= S.SCHEMA_VERSION:  # ours, and it had these tables
                raise StoreError(f"the store {_redact(self.url)!r} has lost its table(s) {', '.join(gone)} (its "
                                 "other tables are there): it was damaged or partly dropped. It was not recreated, "
                                 "so nothing is silently started over: restore it from a backup, or pass a new "
                                 "path (or database) for the store.")

    def _check_foreign_tables(self) -> None:
        """Refuse a database whose tables carry our names but not our columns: another version of contextjudge or
        another program made them, and writing into them would fail later, or mix two formats. (When
        ``SCHEMA_VERSION`` is bumped, a store of the older version must reach ``_migrate`` before this check.)"""
        found = inspect(self.engine)
        existing = set(found.get_table_names())
        for table in S.metadata.sorted_tables:
            if table.name not in existing:
                continue
            have = {c["name"] for c in found.get_columns(table.name)}
            want = {c.name for c in table.columns}
            if have == want:
                continue
            diff = "; ".join(part for part in (
                f"missing {', '.join(sorted(want - have))}" if want - have else "",
                f"unexpected {', '.join(sorted(have - want))}" if have - want else "") if part)
            raise StoreError(f"the store {_redact(self.url)!r} has a table {table.name!r} whose columns are not "
                             f"this contextjudge's ({diff}): another version of contextjudge or another program made "
                             "it. Pass a new path (or another database) for the store; or, if nothing in it is "
                             "needed, delete the file (or drop its cj_* tables) and run again.")

    def _statements(self) -> dict[str, Any]:
        """Every write statement, built once with bind parameters so SQLAlchemy compiles each only once."""
        def ignore(table: Any, keys: list[str]) -> Any:
            return self._dialect_insert(table).on_conflict_do_nothing(index_elements=keys)

        res_keys = ["run_id", "case_key", "metric"]
        ins = self._dialect_insert(S.results)
        upsert = ins.on_conflict_do_update(
            index_elements=res_keys, set_={c.name: ins.excluded[c.name] for c in S.results.c if c.name not in res_keys})
        return {
            "case": ignore(S.cases, ["run_id", "case_key"]),
            "node": ignore(S.nodes, ["run_id", "case_key", "turn", "rank"]),
            "result": upsert,
            "verdicts_delete": delete(S.verdicts).where(and_(
                S.verdicts.c.run_id == bindparam("b_run"), S.verdicts.c.case_key == bindparam("b_key"),
                S.verdicts.c.metric == bindparam("b_metric"))),
            "verdict": insert(S.verdicts),
            "call": insert(S.judge_calls),
            "cache_get": select(S.verdict_cache.c.value).where(S.verdict_cache.c.key == bindparam("b_key")),
            "cache_put": ignore(S.verdict_cache, ["key"]),
            "queue": ignore(S.queue, ["run_id", "case_key"]),
            "spend_row": ignore(S.spend, ["scope", "window"]),
        }

    def _recorded_version(self) -> int | None:
        """The schema version the store records, or None (a new store, or a meta table another program wrote)."""
        if not inspect(self.engine).has_table(S.meta.name):
            return None
        with self._begin(write=False) as conn:
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version")).first()
        return None if row is None else _schema_version(row[0])

    def _migrate(self, version: int) -> None:
        """Bring a store of an older schema to this one, in place, keeping everything in it. 1 -> 2: results gain
        ``gold_score`` and ``score_spread``; the labels table is created. 2 -> 3: the queue and spend tables are
        created (new tables only)."""
        if version not in (1, 2):
            raise StoreError(f"the store has schema version {version} and no migration to {S.SCHEMA_VERSION} "
                             "exists. Pass a new path (or another database) for the store.")
        with self._write_lock:
            for table, columns in S.ADDED_COLUMNS.items():
                for name, sql_type in columns:
                    found = inspect(self.engine)
                    if not found.has_table(table) or name in {c["name"] for c in found.get_columns(table)}:
                        continue
                    try:
                        with self.engine.begin() as conn:
                            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}"))
                    except SQLAlchemyError:
                        # another process may have added it at the same moment; anything else is a real failure
                        if name not in {c["name"] for c in inspect(self.engine).get_columns(table)}:
                            raise
            S.metadata.create_all(self.engine, checkfirst=True)
            with self.engine.begin() as conn:
                conn.execute(update(S.meta).where(S.meta.c.key == "schema_version")
                             .values(value=str(S.SCHEMA_VERSION)))
        logger.info("contextjudge: the store %s was upgraded from schema %d to %d.", _redact(self.url), version,
                    S.SCHEMA_VERSION)

    @contextlib.contextmanager
    def _begin(self, write: bool = True) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        if write and self.read_only:
            raise StoreError(f"the store {_redact(self.url)!r} was opened read-only (open_store(..., read_only=True)"
                             "): nothing is written to it. Open it without read_only to write.")
        serial = self._write_lock if (write and self.is_sqlite) else contextlib.nullcontext()
        with serial, self.engine.begin() as conn:
            yield conn

    def _dialect_insert(self, table: Any) -> Any:
        name = self.engine.dialect.name
        if name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert  # noqa: PLC0415

            return pg_insert(table)
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # noqa: PLC0415

            return sqlite_insert(table)
        raise StoreError(f"the store supports SQLite and PostgreSQL, not {name!r}: pass a file path or a "
                         "postgresql+psycopg:// URL.")

    def _insert_ignore(self, conn: Connection, table: Any, row: dict[str, Any], keys: list[str]) -> None:
        conn.execute(self._dialect_insert(table).values(**row).on_conflict_do_nothing(index_elements=keys))

    def _upsert(self, conn: Connection, row: dict[str, Any]) -> None:
        conn.execute(self._q["result"], row)

    def _guard(self, what: str) -> _Guard:
        return _Guard(self, what)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ the runner's protocol
    def begin_run(self, run_id: str | None, config: dict[str, Any]) -> str:
        """Start a run, or resume it when ``run_id`` is already in the store. Returns the run id."""
        config = dict(config or {})
        config["owner"] = {"host": socket.gethostname(), "pid": os.getpid()}  # for mark_interrupted after a crash
        fingerprint = config.pop("fingerprint", None) or _fingerprint(
            {k: v for k, v in config.items() if k not in ("owner", "cases")})
        judges = config.get("judges") or []
        now = time.time()
        with self._guard("start a run"), self._begin() as conn:
            if run_id is not None:
                row = conn.execute(select(S.runs.c.fingerprint, S.runs.c.config)
                                   .where(S.runs.c.run_id == run_id)).first()
                if row is not None:
                    old_cfg = _loads(row.config, {}) or {}
                    if (row.fingerprint and row.fingerprint != fingerprint
                            and old_cfg.get("mode") not in _SHARED_MODES and config.get("mode") not in _SHARED_MODES):
                        logger.warning("contextjudge: resuming run %s with a different configuration than it was "
                                       "started with (metrics, thresholds or judge changed); results from both are "
                                       "kept side by side. Use a new run id to keep them apart.", run_id)
                    conn.execute(update(S.runs).where(S.runs.c.run_id == run_id).values(
                        status="running", updated_at=now, finished_at=None,
                        config=_dumps({**old_cfg, "owner": config["owner"]})))
                    logger.info("contextjudge: resuming run %s", run_id)
                    return run_id
            new_id = run_id or new_run_id(now)
            # insert-or-nothing: another process may start the same run id between the look-up and here (two CI
            # shards, a restarted worker); it then simply joins the run that the other one created
            self._insert_ignore(conn, S.runs, {
                "run_id": new_id, "name": config.get("name"), "status": "running", "created_at": now,
                "updated_at": now, "finished_at": None, "fingerprint": fingerprint, "judges": _dumps(judges),
                "config": _dumps(config), "summary": None}, ["run_id"])
        return new_id

    def completed_results(self, run_id: str) -> dict[tuple[str, str], MetricResult]:
        """The results of ``run_id`` that need no rescoring (those without an error), by (case key, metric name)."""
        out = {}
        for (key, metric), result in self._results(run_id).items():
            if result.error is None:
                out[(key, metric)] = result
        return out

    def save_case(self, run_id: str, key: str, index: int, test_case: Any) -> None:
        """Keep a test case and its ranked nodes (once: saving the same key again changes nothing)."""
        row, node_rows = case_rows(run_id, key, index, test_case)
        with self._guard("save a test case"), self._begin() as conn:
            conn.execute(self._q["case"], row)
            if node_rows:
                conn.execute(self._q["node"], node_rows)

    def save_result(self, run_id: str, key: str, result: MetricResult) -> None:
        """Keep one metric result with its verdicts, replacing an earlier result of the same metric on this case."""
        with self._guard("save a metric result"), self._begin() as conn:
            self._write_result(conn, run_id, key, result)

    def _write_result(self, conn: Connection, run_id: str, key: str, result: MetricResult) -> None:
        """The writes of one result in an open transaction (its verdicts replaced): ``save_result`` and the queue's
        ``complete`` use it."""
        row, vrows = result_rows(run_id, key, result)
        conn.execute(self._q["verdicts_delete"], {"b_run": run_id, "b_key": key, "b_metric": result.name})
        self._upsert(conn, row)
        if vrows:
            conn.execute(self._q["verdict"], vrows)

    def save_judge_call(self, run_id: str, event: dict[str, Any]) -> None:
        """Keep one judge call's usage: tokens, seconds, whether the cache answered it."""
        with self._guard("save a judge call"), self._begin() as conn:
            conn.execute(self._q["call"], judge_call_row(run_id, event))

    def end_run(self, run_id: str, summary: dict[str, Any], status: str = "finished") -> None:
        """Mark ``run_id`` ended (``finished``, or ``interrupted`` when it stopped early) and keep its summary."""
        now = time.time()
        with self._guard("finish a run"), self._begin() as conn:
            conn.execute(update(S.runs).where(S.runs.c.run_id == run_id).values(
                status=status, finished_at=now, updated_at=now, summary=_dumps(summary or {})))

    def mark_interrupted(self) -> list[str]:
        """Mark as ``interrupted`` every run still ``running`` whose process, on this machine, is gone (a crash, a
        kill); returns their ids. Runs of other machines are left as they are: their processes cannot be seen."""
        host = socket.gethostname()
        with self._guard("read runs"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.runs.c.run_id, S.runs.c.config, S.runs.c.updated_at)
                                .where(S.runs.c.status == "running")).all()
        stale = []
        for row in rows:
            owner = (_loads(row.config, {}) or {}).get("owner") or {}
            if owner.get("host") == host and isinstance(owner.get("pid"), int) and not _alive(owner["pid"]):
                stale.append(row)
        gone = []
        if stale:
            now = time.time()
            with self._guard("mark interrupted runs"), self._begin() as conn:
                for row in stale:
                    # only if nobody resumed it since it was read (a resume rewrites its owner and updated_at)
                    hit = conn.execute(update(S.runs).where(
                        S.runs.c.run_id == row.run_id, S.runs.c.status == "running",
                        S.runs.c.updated_at == row.updated_at).values(
                        status="interrupted", finished_at=now, updated_at=now))
                    if hit.rowcount:
                        gone.append(row.run_id)
        if gone:
            logger.warning("contextjudge: %d run(s) were left running by a process that is gone; marked "
                           "interrupted: %s (`contextjudge score --run ID` finishes their unscored cases).",
                           len(gone), ", ".join(gone))
        return gone

    def get_verdict(self, key: str) -> dict[str, Any] | None:
        """A cached judge answer, or None."""
        with self._guard("read the verdict cache"), self._begin(write=False) as conn:
            row = conn.execute(self._q["cache_get"], {"b_key": key}).first()
        return None if row is None else _loads(row[0])

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        """Cache a judge answer for every later run that uses this store."""
        with self._guard("write the verdict cache"), self._begin() as conn:
            conn.execute(self._q["cache_put"], {"key": key, "value": _dumps(value), "created_at": time.time()})

    # ------------------------------------------------------------------------------------------ reading back
    def list_runs(self) -> list[RunInfo]:
        """Every run, newest first, with how many cases and results it holds."""
        with self._guard("list runs"), self._begin(write=False) as conn:
            n_cases: dict[str, int] = dict(conn.execute(select(S.cases.c.run_id, func.count()).group_by(S.cases.c.run_id)).all())
            n_results: dict[str, int] = dict(conn.execute(select(S.results.c.run_id, func.count())
                                          .group_by(S.results.c.run_id)).all())
            rows = conn.execute(select(S.runs).order_by(S.runs.c.created_at.desc(), S.runs.c.run_id.desc())).all()
        return [RunInfo(run_id=r.run_id, name=r.name, status=r.status, created_at=r.created_at,
                        finished_at=r.finished_at, fingerprint=r.fingerprint, judges=_loads(r.judges, []) or [],
                        config=_loads(r.config, {}) or {}, summary=_loads(r.summary, {}) or {},
                        cases=int(n_cases.get(r.run_id, 0)), results=int(n_results.get(r.run_id, 0)))
                for r in rows]

    def run_info(self, run_id: str) -> RunInfo:
        for info in self.list_runs():
            if info.run_id == run_id:
                return info
        raise StoreError(f"no run {run_id!r} in {self}.")

    def resolve_run(self, ref: str | None = None) -> str:
        """A run id from ``ref``: an id, a unique id prefix, a run name (its latest run), or None/"latest"."""
        runs = self.list_runs()
        if not runs:
            raise StoreError(f"the store {_redact(self.url)!r} holds no runs yet: run `contextjudge eval` or "
                             "evaluate(..., store=...) first, or check the --store path.")
        if ref is None or ref == "latest":
            return runs[0].run_id
        for r in runs:
            if r.run_id == ref:
                return r.run_id
        named = [r for r in runs if r.name == ref]
        if named:
            return named[0].run_id
        prefixed = [r for r in runs if r.run_id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0].run_id
        shown = ", ".join(r.run_id for r in runs[:5]) + (" ..." if len(runs) > 5 else "")
        if len(prefixed) > 1:
            raise StoreError(f"run {ref!r} is ambiguous ({len(prefixed)} runs start with it): give more of the id. "
                             f"Runs: {shown}")
        raise StoreError(f"no run {ref!r} in the store; `contextjudge runs --store ...` lists them. Latest: {shown}")

    def load_cases(self, run_id: str) -> list[StoredCase]:
        """The test cases of ``run_id`` in their order, with how many metric results each has. A case with labels
        attached by ``add_labels`` carries them in ``additional_metadata["gold_labels"]`` (replacing any the case
        came with)."""
        with self._guard("read test cases"), self._begin(write=False) as conn:
            counts: dict[str, int] = dict(conn.execute(select(S.results.c.case_key, func.count()).where(S.results.c.run_id == run_id)
                                       .group_by(S.results.c.case_key)).all())
            rows = conn.execute(select(S.cases).where(S.cases.c.run_id == run_id)
                                .order_by(S.cases.c.position, S.cases.c.created_at)).all()
            labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels).join(
                S.cases, S.cases.c.case_key == S.labels.c.case_key).where(S.cases.c.run_id == run_id)).all())
        return [stored_case(r, labels.get(r.case_key), scored=int(counts.get(r.case_key, 0))) for r in rows]

    # ------------------------------------------------------------------------------------------ gold labels
    def add_labels(self, records: Iterable[dict[str, Any]], check: Callable[[Any, dict[str, Any]], list[str]] | None
                   = None, *, lines: list[int] | None = None) -> tuple[list[LabelMatch], list[LabelMatch]]:
        """Attach gold labels to the store's captured cases; returns (matched, unmatched), one ``LabelMatch`` per
        record, in order.

        Each record holds label fields (``labels``, ``relevance_labels``, ``utilization_labels``,
        ``statement_labels``, ``statements``: see ``contextjudge.cases.labels``) and says which case it labels: by
        ``key`` (or ``id``: the case's key in the store, which is its own id when it has one), else by ``input``
        (normalised: case, punctuation and white space do not matter). A record matches every case with that key
        or input, in any run. Labels replace earlier labels of the same case. A record with no label field, or a
        label that is not yes/no, raises ConfigurationError naming it, and nothing is written. ``check(test_case,
        labels) -> problems`` (``contextjudge.metrics._gold.label_problems``: counts against the case's nodes and
        statements) is asked about every case a record matched; any problem raises ConfigurationError naming the
        record, and nothing is written.
        """
        from ..cases.goldens import normalize_input  # noqa: PLC0415 - layer 2, read only here

        def where(i: int) -> str:  # a record as the user finds it: its line in the file when known
            return f"labels record {i} (line {lines[i - 1]})" if lines and i - 1 < len(lines) else \
                f"labels record {i}"

        parsed = _parse_label_records(records, where)
        with self._guard("read test cases"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.cases.c.case_key, S.cases.c.input)).all()
        by_key: dict[str, str | None] = {}
        by_input: dict[str, list[str]] = {}
        for r in rows:
            by_key.setdefault(r.case_key, r.input)
            if r.input:
                keys = by_input.setdefault(normalize_input(r.input), [])
                if r.case_key not in keys:
                    keys.append(r.case_key)
        matched: list[LabelMatch] = []
        unmatched: list[LabelMatch] = []
        writes: dict[str, dict[str, Any]] = {}
        first_record: dict[str, int] = {}
        for i, key, text_in, labels in parsed:
            if key is not None and key in by_key:
                hit, by = [key], "key"
            elif text_in and normalize_input(str(text_in)) in by_input:
                hit, by = by_input[normalize_input(str(text_in))], "input"
            else:
                unmatched.append(LabelMatch(i, key, text_in, [], None))
                continue
            for k in hit:
                if k in first_record:
                    raise ConfigurationError(f"{where(i)} labels case {k!r}, which {where(first_record[k])} "
                                             "labels too: keep one record per case (two would leave whichever "
                                             "came last). Nothing was written.")
                first_record[k] = i
            matched.append(LabelMatch(i, key, text_in, list(hit), by))
            for k in hit:
                writes[k] = {"case_key": k, "input": by_key.get(k), "labels": _dumps(labels),
                             "created_at": time.time()}
        if writes and check is not None:
            self._check_labels(writes, matched, check, where)
        if writes:
            ins = self._dialect_insert(S.labels)
            upsert = ins.on_conflict_do_update(index_elements=["case_key"], set_={
                "input": ins.excluded.input, "labels": ins.excluded.labels, "created_at": ins.excluded.created_at})
            with self._guard("save gold labels"), self._begin() as conn:
                conn.execute(upsert, list(writes.values()))
        return matched, unmatched

    def _check_labels(self, writes: dict[str, dict[str, Any]], matched: list[LabelMatch],
                      check: Callable[[Any, dict[str, Any]], list[str]], where: Callable[[int], str]) -> None:
        """Ask ``check`` about every case the labels are for; raise ConfigurationError naming the records whose
        labels do not fit their case (nothing is written then)."""
        record_of = {k: m.record for m in matched for k in m.case_keys}
        with self._guard("read test cases"), self._begin(write=False) as conn:
            found = conn.execute(select(S.cases.c.case_key, S.cases.c.kind, S.cases.c.data)
                                 .where(S.cases.c.case_key.in_(list(writes)))).all()
        problems = []
        for c in found:
            for problem in check(_case_from_json(c.kind, c.data, c.case_key), _loads(writes[c.case_key]["labels"],
                                                                                         {}) or {}):
                text_p = f"{where(record_of[c.case_key])}: {problem}"
                if text_p not in problems:
                    problems.append(text_p)
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise ConfigurationError(" ".join(problems[:5]) + more + " Nothing was written.")

    def labelled_cases(self, run: str | None = None) -> list[LLMTestCase]:
        """The single-turn cases that carry gold labels (attached with ``add_labels``, or brought by their golden),
        with the labels in ``additional_metadata["gold_labels"]``: those of ``run`` (an id, name or prefix), or with
        ``run=None`` those of every run, each case key once (from its newest run)."""
        from ..cases.labels import labels_of  # noqa: PLC0415

        if run is not None:
            cases = [sc.test_case for sc in self.load_cases(self.resolve_run(run))]
        else:
            with self._guard("read test cases"), self._begin(write=False) as conn:
                labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels)).all())
                # only cases that may carry labels: a labels-table entry, or label fields in the case's own data
                rows = conn.execute(select(S.cases).where(S.cases.c.kind == "llm").where(or_(
                    S.cases.c.case_key.in_(select(S.labels.c.case_key)), S.cases.c.data.like('%labels"%')))
                    .order_by(S.cases.c.created_at.desc())).all()
            cases, seen = [], set()
            for r in rows:
                if r.case_key in seen:
                    continue
                seen.add(r.case_key)
                tc = _case_from_json(r.kind, r.data, r.case_key)
                if r.case_key in labels:
                    _attach_labels(tc, _loads(labels[r.case_key], {}) or {})
                cases.append(tc)
            cases.reverse()  # oldest first, as runs list their cases
        out = []
        for tc in cases:
            if not isinstance(tc, LLMTestCase):
                continue
            try:
                if labels_of(tc):
                    out.append(tc)
            except ConfigurationError as exc:
                logger.warning("contextjudge: case %s has gold labels that cannot be read (%s); left out.", tc.id,
                               exc)
        return out

    def unscored_cases(self, run_id: str) -> list[StoredCase]:
        """Cases that have no metric result yet, e.g. captured in deferred mode."""
        return [c for c in self.load_cases(run_id) if c.scored == 0]

    def _results(self, run_id: str) -> dict[tuple[str, str], MetricResult]:
        with self._guard("read results"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.results).where(S.results.c.run_id == run_id)).all()
            vrows = conn.execute(select(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.data)
                                 .where(S.verdicts.c.run_id == run_id)
                                 .order_by(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.position)).all()
        by: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for vr in vrows:
            by.setdefault((vr.case_key, vr.metric), []).append(_loads(vr.data, {}))
        return {(r.case_key, r.metric): result_from_row(r, by.get((r.case_key, r.metric), [])) for r in rows}

    def usage(self, run_id: str) -> Usage:
        """Judge usage of ``run_id`` summed over its calls."""
        with self._guard("read judge usage"), self._begin(write=False) as conn:
            row = conn.execute(select(
                func.count(), func.coalesce(func.sum(S.judge_calls.c.input_tokens), 0),
                func.coalesce(func.sum(S.judge_calls.c.output_tokens), 0),
                func.coalesce(func.sum(S.judge_calls.c.seconds), 0.0),
                func.sum(S.judge_calls.c.cost),
            ).where(and_(S.judge_calls.c.run_id == run_id, S.judge_calls.c.cached.is_(False)))).one()
            hits = conn.execute(select(func.count()).where(
                and_(S.judge_calls.c.run_id == run_id, S.judge_calls.c.cached.is_(True)))).scalar()
        return Usage(calls=int(row[0]), cache_hits=int(hits or 0), input_tokens=int(row[1]),
                     output_tokens=int(row[2]), seconds=float(row[3]), cost=None if row[4] is None else float(row[4]))

    def judge_calls(self, run_id: str) -> list[dict[str, Any]]:
        """Every judge call of ``run_id``, in order."""
        with self._guard("read judge calls"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.judge_calls).where(S.judge_calls.c.run_id == run_id)
                                .order_by(S.judge_calls.c.id)).all()
        return [dict(r._mapping) for r in rows]

    def load_run(self, run_id: str | None = None) -> EvaluationResult:
        """A stored run as an ``EvaluationResult`` (cases in order, with their results and verdicts)."""
        run_id = self.resolve_run(run_id)
        info = self.run_info(run_id)
        results = self._results(run_id)
        order: dict[str, int] = {}
        for _key, metric in results:
            order.setdefault(metric, len(order))
        metric_order = _metric_order(info, list(order))
        trs = []
        for i, sc in enumerate(self.load_cases(run_id)):
            mine = [r for (k, _), r in results.items() if k == sc.case_key]
            mine.sort(key=lambda r: metric_order.get(r.name, 99))
            trs.append(TestResult(index=i, name=getattr(sc.test_case, "name", None), test_case=sc.test_case,
                                  metrics_data=mine))
        return EvaluationResult(test_results=trs, usage=self.usage(run_id), run_id=run_id,
                                duration_seconds=float(info.summary.get("duration_seconds") or 0.0))

    def iter_records(self, run_id: str) -> Iterator[dict[str, Any]]:
        """One flat record per (case, metric) of ``run_id``, for export."""
        res = self.load_run(run_id)
        for tr in res.test_results:
            tc = tr.test_case
            metrics: list[MetricResult | None] = list(tr.metrics_data) or [None]
            for m in metrics:
                rec = {"run_id": run_id, "case_key": tc.id, "case_index": tr.index, "case_name": tr.name,
                       "input": _case_input(tc)}
                if m is None:
                    rec.update({"metric": None, "score": None})
                else:
                    rec.update({"metric": m.name, "score": m.score, "threshold": m.threshold, "success": m.success,
                                "reason": m.reason, "error": m.error, "evaluation_model": m.evaluation_model,
                                "judge_calls": m.usage.calls, "input_tokens": m.usage.input_tokens,
                                "output_tokens": m.usage.output_tokens})
                yield rec


class _Guard:
    """Turns database errors into a ``StoreError`` that says what failed and what to check."""

    def __init__(self, store: ResultsStore, what: str) -> None:
        self.store, self.what = store, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is not None and isinstance(exc, SQLAlchemyError):
            raise StoreError(f"could not {self.what} in the store {_redact(self.store.url)!r}: {_short(exc)}. "
                             "Check that the database is reachable and writable.") from exc
        return False


def _parse_label_records(records: Iterable[dict[str, Any]], where: Callable[[int], str]
                         ) -> list[tuple[int, str | None, Any, dict[str, Any]]]:
    """The label records of ``add_labels`` checked and read: (record number, key, input, normalised labels)."""
    from ..cases.labels import normalize_labels  # noqa: PLC0415

    parsed = []
    for i, rec in enumerate(records, start=1):
        if not isinstance(rec, dict):
            raise ConfigurationError(f"{where(i)}: expected a JSON object with 'key', 'id' or 'input' "
                                     f"and label fields, got {type(rec).__name__}.")
        labels = normalize_labels(rec, where(i))
        if "statement_labels" in labels and "statements" not in labels:
            raise ConfigurationError(f"{where(i)}: 'statement_labels' without 'statements': give the statements "
                                     "the labels are for (the expected output's claims, in order), so a label "
                                     "cannot silently land on another statement. Nothing was written.")
        if not any(k != "statements" for k in labels):
            raise ConfigurationError(f"{where(i)}: no label field; give at least one of 'labels', "
                                     "'relevance_labels', 'utilization_labels', 'statement_labels'.")
        key = rec.get("key") if rec.get("key") is not None else rec.get("id")
        text_in = rec.get("input")
        if key is None and not text_in:
            raise ConfigurationError(f"{where(i)}: say which case it labels with 'key', 'id' or "
                                     "'input'.")
        parsed.append((i, None if key is None else str(key), text_in, labels))
    return parsed


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        # WAL: readers never block the writer; NORMAL sync keeps every commit across a killed process
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=60000")
    finally:
        cur.close()


def _read_only_sqlite(url: str, echo: bool) -> Engine:
    """An engine that opens a SQLite file read-only (``mode=ro``); when even that fails (the folder is not writable
    and the file has a write-ahead log to read, or its journal files cannot be made), as an immutable file, which
    SQLite reads without any lock or side file."""
    import sqlite3  # noqa: PLC0415
    from urllib.parse import quote  # noqa: PLC0415

    path = url[len("sqlite:///"):]

    def make(flags: str) -> Engine:
        def connect() -> Any:
            return sqlite3.connect(f"file:{quote(path)}?{flags}", uri=True, timeout=60, check_same_thread=False)
        return create_engine("sqlite://", echo=echo, creator=connect)

    engine = make("mode=ro")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM sqlite_master")).scalar()
        return engine
    except SQLAlchemyError:
        engine.dispose()
        return make("mode=ro&immutable=1")


def _alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (a signal-0 probe; on Windows, where signal 0 would end
    the process, every process counts as alive)."""
    if pid == os.getpid() or os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists (another user's), or the probe is not allowed here: assume alive
    return True


def _schema_version(value: Any) -> int | None:
    """The schema version a store records, or None when it is not one (another program wrote the meta table)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _redact(url: str) -> str:
    """The URL without its password."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


def _fingerprint(config: dict[str, Any]) -> str:
    stable = {k: v for k, v in config.items() if k not in ("name", "cases")}
    return hashlib.sha256(_dumps(stable).encode()).hexdigest()[:16]


def _metric_order(info: RunInfo, seen: list[str]) -> dict[str, int]:
    names: list[str] = []
    for m in info.config.get("metrics") or []:
        n = m.get("name") if isinstance(m, dict) else None
        if n and n not in names:
            names.append(n)
    for n in seen:
        if n not in names:
            names.append(n)
    return {n: i for i, n in enumerate(names)}


def open_store(target: Any = None, *, read_only: bool = False) -> ResultsStore:
    """Open (creating when needed) the results store at ``target``.

    ``target`` is a file path (SQLite), a SQLAlchemy URL (``postgresql+psycopg://user@host/db``; a plain
    ``postgresql://`` URL uses psycopg too), an open ``ResultsStore`` (returned as is), or ``"default"`` for
    ``.contextjudge/results.db`` under the current directory. Nothing is written anywhere you did not name.
    ``read_only=True``: the store must exist, and nothing is ever written to it (a CI artifact, a replica, a file
    you may only read); its read API (``runs``, ``results``, ``cases``, ``trend``, ``load_run``) works as usual.
    """
    if isinstance(target, ResultsStore):
        return target
    if target is None or target is True:
        raise StoreError("open_store() needs a path or URL; pass 'default' for .contextjudge/results.db.")
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str) or not target.strip():
        raise StoreError(f"a store is a file path or a database URL, not {target!r}.")
    target = target.strip()
    if target == "default":
        target = DEFAULT_STORE_PATH
    store = ResultsStore(target, read_only=read_only)
    if read_only:
        return store
    try:
        store.mark_interrupted()  # runs left "running" by a crashed process end here, as interrupted
    except Exception:  # noqa: BLE001 - a read-only store, or another process marking them at the same time
        logger.debug("contextjudge: could not check for interrupted runs", exc_info=True)
    return store

"""The results store: runs, test cases, ranked nodes, verdicts, metric results and judge usage, in SQL.

One implementation on SQLAlchemy Core serves SQLite (a file path; the embedded default) and PostgreSQL (a URL such
as ``postgresql+psycopg://user@host/db``). Every write is one transaction, so a process killed at any moment leaves
only whole cases and whole results behind, and a run started again with the same id resumes where it stopped.
The store is also the judge-verdict cache across runs. It is safe to use from several threads at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from ..errors import StoreError
from . import _schema as S
from ._aggregate import AggregateStore
from ._base import Guard, redact, short
from ._labels import CalibrationKeep, LabelMatch, LabelStore
from ._migrate import Migrations
from ._queue import QueueStore
from ._retention import PruneReport, RetentionStore
from ._rows import StoredCase
from ._runs import RunInfo
from ._spend import SpendStore

__all__ = ["DEFAULT_STORE_PATH", "LabelMatch", "PruneReport", "ResultsStore", "RunInfo", "StoredCase", "open_store"]

logger = logging.getLogger("contextjudge")

DEFAULT_STORE_PATH = ".contextjudge/results.db"


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


class ResultsStore(Migrations, QueueStore, LabelStore, CalibrationKeep, SpendStore, RetentionStore, AggregateStore):
    """A results store on one SQL database. Create it with ``open_store(path_or_url)``.

    This class holds the engine, the schema checks and migration, and the transactions; its methods come from its
    parts: ``RunStore`` (runs), ``WriteStore`` (cases, results, judge calls, the verdict cache), ``LoadStore`` (a run
    read back), ``LabelStore`` (gold labels), ``QueueStore`` (the work queue), ``SpendStore`` (budget windows),
    ``RetentionStore`` (``prune`` and the retention setting), ``ReadStore`` (``runs``/``results``/``cases``/``trend``)
    with ``AggregateStore`` (its sums in SQL) and ``Migrations`` (the steps that bring an older store's schema to this one).

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
            raise StoreError(f"the store URL {redact(self.url)!r} needs a database driver that is not installed "
                             f"({exc}). For PostgreSQL: pip install 'contextjudge[postgres]'.") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot use the store {redact(self.url)!r}: {exc}. Pass a file path for SQLite or a "
                             "SQLAlchemy URL such as postgresql+psycopg://user@host/db.") from exc
        self._setup()

    def __repr__(self) -> str:
        return f"ResultsStore({redact(self.url)!r})"

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
            if "file is not a database" in short(exc):
                raise StoreError(f"the store {redact(self.url)!r} is a file but not a SQLite database: another "
                                 "program made it. Pass a new path for the store.") from exc
            raise StoreError(f"cannot open the store {redact(self.url)!r}: {short(exc)}. Check the path or URL, "
                             "that the database server is running, and that you may write to it.") from exc
        if version is None or version > S.SCHEMA_VERSION:
            raise StoreError(f"the store {redact(self.url)!r} records schema version {recorded!r}, which this "
                             f"contextjudge (schema version {S.SCHEMA_VERSION}) does not know: a newer contextjudge "
                             "or another program made it. Upgrade contextjudge to read it, or pass a new path (or "
                             "another database) for this version's store.")
        if version < S.SCHEMA_VERSION:  # pragma: no cover - migrated above; a store older than its meta row
            self._migrate(version)
        self.schema_version = S.SCHEMA_VERSION
        self._q = _statements(self._dialect_insert)
        try:  # the results an older contextjudge wrote after the upgrade (a rolling upgrade): their read columns
            self.backfill_old_writers()
        except (SQLAlchemyError, StoreError):  # reads leave them out, counted, until a later open fills them
            logger.warning("contextjudge: could not fill the read columns of results an older contextjudge wrote "
                           "to %s", redact(self.url), exc_info=True)

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
                raise StoreError(f"the store {redact(self.url)!r} holds no contextjudge tables (opened read-only, "
                                 "so none were made): check the path or URL.")
            version = self._recorded_version()
            if version is None or version > S.SCHEMA_VERSION:
                raise StoreError(f"the store {redact(self.url)!r} records a schema version this contextjudge "
                                 f"(schema {S.SCHEMA_VERSION}) does not know: upgrade contextjudge to read it.")
            existing = set(found.get_table_names())
            missing = [t.name for t in S.metadata.sorted_tables if t.name not in existing and t.name in (
                S.runs.name, S.cases.name, S.results.name)]
            # an older schema, read as it is (never migrated read-only): what it lacks reads as None / nothing
            self._missing_tables = frozenset(t.name for t in S.metadata.sorted_tables if t.name not in existing)
            self._missing_columns = {
                t.name: gone for t in S.metadata.sorted_tables if t.name in existing
                for gone in [{c.name for c in t.c} - {c["name"] for c in found.get_columns(t.name)}] if gone}
            if missing:
                raise StoreError(f"the store {redact(self.url)!r} lacks its table(s) {', '.join(missing)}: it was "
                                 "damaged, or made by an older contextjudge and never opened for writing since.")
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the store {redact(self.url)!r}: {short(exc)}. Check the path or URL "
                             "and that you may read it.") from exc
        self.schema_version = version
        self._q = _statements(self._dialect_insert)

    def _check_not_foreign(self) -> None:
        """Refuse a database that another program made (a SQLite file with tables and none of ours), and a store of
        ours whose core tables have gone (writing to it would silently start over)."""
        found = inspect(self.engine)
        existing = set(found.get_table_names())
        ours = {t.name for t in S.metadata.sorted_tables}
        if self.is_sqlite and existing and not existing & ours:
            shown = ", ".join(sorted(existing)[:5]) + (" ..." if len(existing) > 5 else "")
            raise StoreError(f"the file {redact(self.url)!r} is a SQLite database of another program (tables: "
                             f"{shown}), not a contextjudge store; nothing was written to it. Pass a new path for "
                             "the store.")
        if S.meta.name in existing:
            gone = [n for n in (S.runs.name, S.cases.name, S.results.name) if n not in existing]
            version = self._recorded_version() if gone else None
            if gone and version is not None and version <= S.SCHEMA_VERSION:  # ours, and it had these tables
                raise StoreError(f"the store {redact(self.url)!r} has lost its table(s) {', '.join(gone)} (its "
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
            raise StoreError(f"the store {redact(self.url)!r} has a table {table.name!r} whose columns are not "
                             f"this contextjudge's ({diff}): another version of contextjudge or another program made "
                             "it. Pass a new path (or another database) for the store; or, if nothing in it is "
                             "needed, delete the file (or drop its cj_* tables) and run again.")

    def _recorded_version(self) -> int | None:
        """The schema version the store records, or None (a new store, or a meta table another program wrote)."""
        if not inspect(self.engine).has_table(S.meta.name):
            return None
        with self._begin(write=False) as conn:
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == "schema_version")).first()
        return None if row is None else _schema_version(row[0])

    @contextlib.contextmanager
    def _begin(self, write: bool = True) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        if write and self.read_only:
            raise StoreError(f"the store {redact(self.url)!r} was opened read-only (open_store(..., read_only=True)"
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

    def _guard(self, what: str) -> Guard:
        return Guard(self.url, what)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()



def _statements(dialect_insert: Callable[[Any], Any]) -> dict[str, Any]:
    """Every write statement, built once with bind parameters so SQLAlchemy compiles each only once;
    ``dialect_insert`` is the store's ``_dialect_insert`` (SQLite's or PostgreSQL's insert)."""
    def ignore(table: Any, keys: list[str]) -> Any:
        return dialect_insert(table).on_conflict_do_nothing(index_elements=keys)

    res_keys = ["run_id", "case_key", "metric"]
    ins = dialect_insert(S.results)
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
        "case_facets": select(S.cases.c.created_at, S.cases.c.input, S.cases.c.data).where(
            S.cases.c.run_id == bindparam("b_run"), S.cases.c.case_key == bindparam("b_key")),
        "cache_get": select(S.verdict_cache.c.value).where(S.verdict_cache.c.key == bindparam("b_key")),
        "cache_put": ignore(S.verdict_cache, ["key"]),
        "queue": ignore(S.queue, ["run_id", "case_key"]),
        "spend_row": ignore(S.spend, ["scope", "window"]),
    }


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        # incremental auto-vacuum: pruned pages can be given back (it takes effect only in a new file; a store made
        # before it keeps its free pages for new rows until `contextjudge prune --vacuum`)
        cur.execute("PRAGMA auto_vacuum=INCREMENTAL")
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


def _schema_version(value: Any) -> int | None:
    """The schema version a store records, or None when it is not one (another program wrote the meta table)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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

"""What every part of the store shares: the error guard around database calls, short error texts, URLs without
their password, and the plumbing the parts rely on (``StoreBase``: declared here, given by ``ResultsStore``).

The parts of the store are mixins, each holding one kind of thing: ``_runs.py`` run bookkeeping, ``_writes.py`` the
runner's writes and the verdict cache, ``_load.py`` one run read back, ``_labels.py`` gold labels, ``_queue.py`` the
work queue, ``_spend.py`` the budget windows, ``_read.py`` the documented read API. ``_store.py`` composes them.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["Guard", "StoreBase", "redact", "short"]


class StoreBase:
    """The store's plumbing as its parts see it: ``ResultsStore`` sets these up (the engine, the prepared write
    statements ``_q``) and gives the transactions (``_begin``), the error guard (``_guard``) and the dialect's
    insert (``_dialect_insert``, ``_insert_ignore``). Declared only for the type checker."""

    url: str
    engine: Engine
    read_only: bool
    _q: dict[str, Any]
    # what an older read-only store lacks (``ResultsStore._setup_read_only``): table name -> its columns missing, and
    # the tables missing; empty for a store of this schema (every store opened for writing is migrated to it)
    _missing_columns: dict[str, set[str]] = {}
    _missing_tables: frozenset[str] = frozenset()

    def _present(self, table: Any) -> list[Any]:
        """The columns of ``table`` this store holds: all of them, but for a read-only store of an older schema,
        which is read as it is (a column it lacks reads as None: ``getattr(row, name, None)``)."""
        gone = self._missing_columns.get(table.name)
        return list(table.c) if not gone else [c for c in table.c if c.name not in gone]

    if TYPE_CHECKING:
        def _begin(self, write: bool = True) -> AbstractContextManager[Connection]: ...

        def _guard(self, what: str) -> Guard: ...

        def _dialect_insert(self, table: Any) -> Any: ...

        def _insert_ignore(self, conn: Connection, table: Any, row: dict[str, Any], keys: list[str]) -> None: ...


class Guard:
    """Turns database errors into a ``StoreError`` that says what failed and what to check."""

    def __init__(self, url: str, what: str) -> None:
        self.url, self.what = url, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is not None and isinstance(exc, SQLAlchemyError):
            raise StoreError(f"could not {self.what} in the store {redact(self.url)!r}: {short(exc)}. "
                             "Check that the database is reachable and writable.") from exc
        return False


def short(exc: BaseException) -> str:
    """The first line of a database error (at most 300 characters), or its type's name."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def store_label(url: str, *, shareable: bool = False) -> str:
    """A store as a person reads it, never its absolute path: a SQLite file relative to the working folder when it
    lies inside it, else its file name; another database as its URL without the password. ``shareable`` (what goes
    into a page others read): a SQLite file by its name only, another database by its kind and name (no host, no
    user)."""
    try:
        u = make_url(url)
    except Exception:  # noqa: BLE001 - not a URL: a label, not a failure
        return os.path.basename(url) if shareable else url
    if u.get_backend_name() == "sqlite":
        db = u.database or ""
        if not db or db == ":memory:" or db.startswith("file::memory:"):
            return "SQLite in memory"
        if shareable:
            return os.path.basename(db)
        try:
            rel = os.path.relpath(os.path.abspath(db))
        except ValueError:  # another drive (Windows)
            return os.path.basename(db)
        return os.path.basename(db) if rel.startswith("..") else rel
    if shareable:
        return f"{u.get_backend_name()} database {u.database or ''}".strip()
    return redact(url)


def redact(url: str) -> str:
    """The URL without its password."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url

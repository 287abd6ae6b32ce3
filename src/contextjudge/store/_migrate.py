"""The steps that bring a store of an older schema to this one, in place (``Migrations._migrate``, called by
``ResultsStore`` when it opens a store for writing). One method per step, version -> version + 1, listed in
``_MIGRATIONS``; each step's version is recorded when it is done, so a migration stopped half way resumes at the
step it stopped in. A new schema version adds its step at the end."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, bindparam, inspect, select, text, tuple_, update
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError
from . import _schema as S
from ._base import StoreBase, redact

__all__ = ["Migrations"]

logger = logging.getLogger("contextjudge")


class Migrations(StoreBase):
    """Mixed into ``ResultsStore``: the schema migration. ``self`` is the store."""

    _write_lock: Any

    def _migrate(self, version: int) -> None:
        """Bring a store of an older schema to this one, in place, keeping everything in it: one step per version
        (``_MIGRATIONS``: version -> the method that makes it version + 1), each recorded when it is done, so a
        migration stopped half way resumes at the step it stopped in. 1 -> 2: results gain ``gold_score`` and
        ``score_spread``; the labels table is created. 2 -> 3: the queue and spend tables are created. 3 -> 4:
        results gain the columns reads group and filter by, backfilled from the JSON. 4 -> 5: runs gain
        ``goldens_hash`` and ``goldens_name``, the label log is created, and positional node labels are keyed to the
        nodes of the case they were given for (``_labels.key_stored_labels``)."""
        if version not in self._MIGRATIONS:
            raise StoreError(f"the store has schema version {version} and no migration to {S.SCHEMA_VERSION} "
                             "exists. Pass a new path (or another database) for the store.")
        start = version
        with self._write_lock:
            while version < S.SCHEMA_VERSION:
                getattr(self, self._MIGRATIONS[version])()
                version += 1
                with self.engine.begin() as conn:
                    conn.execute(update(S.meta).where(S.meta.c.key == "schema_version").values(value=str(version)))
        logger.info("contextjudge: the store %s was upgraded from schema %d to %d.", redact(self.url), start,
                    S.SCHEMA_VERSION)

    # version -> the step that makes a store of that version the next one (a later version adds its own step here)
    _MIGRATIONS = {1: "_migrate_1_2", 2: "_migrate_2_3", 3: "_migrate_3_4", 4: "_migrate_4_5"}

    def _add_columns(self, added: Mapping[str, tuple[tuple[str, str], ...]]) -> None:
        for table, columns in added.items():
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

    def _migrate_1_2(self) -> None:
        self._add_columns(S.ADDED_COLUMNS)
        S.labels.create(self.engine, checkfirst=True)

    def _migrate_2_3(self) -> None:
        S.queue.create(self.engine, checkfirst=True)
        S.spend.create(self.engine, checkfirst=True)

    def _migrate_3_4(self) -> None:
        """Results gain ``captured_at``, ``retriever``, ``tags``, ``judge_identity`` and ``input_key``, filled from
        each result's case and details a batch at a time (in key order, each batch one transaction); their indexes
        are made after (``_add_indexes``)."""
        self._add_columns(S.FACET_COLUMNS)
        self._fill_facets()

    def _fill_facets(self, only_missing: bool = False) -> int:
        """Fill the read columns of results from each result's case and details, a batch at a time in key order,
        each batch one transaction; returns how many rows were filled. ``only_missing``: only the rows without a
        ``captured_at``, which an older contextjudge still writing after the store was migrated leaves (a rolling
        upgrade): ``backfill_old_writers`` fills them when a store is opened for writing."""
        from ._rows import _loads, case_facets  # noqa: PLC0415

        r, c = S.results, S.cases
        pk = tuple_(r.c.run_id, r.c.case_key, r.c.metric)
        base = select(r.c.run_id, r.c.case_key, r.c.metric, r.c.details, r.c.created_at,
                      c.c.created_at.label("case_at"), c.c.input, c.c.data).select_from(
            r.outerjoin(c, and_(c.c.run_id == r.c.run_id, c.c.case_key == r.c.case_key)))
        if only_missing:
            base = base.where(r.c.captured_at.is_(None))
        fill = update(r).where(r.c.run_id == bindparam("b_run"), r.c.case_key == bindparam("b_key"),
                               r.c.metric == bindparam("b_metric")).values(
            captured_at=bindparam("b_at"), retriever=bindparam("b_retriever"), tags=bindparam("b_tags"),
            judge_identity=bindparam("b_identity"), input_key=bindparam("b_input"))
        after: tuple[Any, ...] | None = None
        done = 0
        while True:
            q = base if after is None else base.where(pk > tuple_(*after))
            with self._write_lock, self.engine.begin() as conn:
                rows = conn.execute(q.order_by(r.c.run_id, r.c.case_key, r.c.metric).limit(self._BACKFILL)).all()
                if not rows:
                    break
                facets: dict[tuple[str, str], dict[str, Any]] = {}
                params = []
                for row in rows:
                    f = facets.get((row.run_id, row.case_key))
                    if f is None:
                        f = facets[(row.run_id, row.case_key)] = (
                            case_facets(row.case_at, row.input, row.data) if row.case_at is not None else
                            {"captured_at": None, "retriever": None, "tags": None, "input_key": None})
                    details = _loads(row.details, {})
                    identity = details.get("judge_identity") if isinstance(details, dict) else None
                    params.append({"b_run": row.run_id, "b_key": row.case_key, "b_metric": row.metric,
                                   "b_at": f["captured_at"] if f["captured_at"] is not None else row.created_at,
                                   "b_retriever": f["retriever"], "b_tags": f["tags"], "b_input": f["input_key"],
                                   "b_identity": None if identity is None else str(identity)})
                conn.execute(fill, params)
            done += len(rows)
            after = (rows[-1].run_id, rows[-1].case_key, rows[-1].metric)
            if done % (self._BACKFILL * 50) == 0:
                logger.info("contextjudge: filling the read columns of the store's results: %d so far", done)
        return done

    def backfill_old_writers(self) -> int:
        """Fill the read columns (capture time, retriever, tags, judge identity, input key) of the results an older
        contextjudge wrote after the store was migrated (a process started before the upgrade, still writing):
        without them those results have no capture time, and reads leave them out (counted). Called when a store
        is opened for writing; one indexed lookup when there are none. Returns how many were filled."""
        r = S.results
        with self.engine.connect() as conn:
            if conn.execute(select(r.c.run_id).where(r.c.captured_at.is_(None)).limit(1)).first() is None:
                return 0
        n = self._fill_facets(only_missing=True)
        if n:
            logger.warning("contextjudge: the store %s held %d result(s) without their capture time, written by an "
                           "older contextjudge after the store was upgraded (a process started before the upgrade "
                           "still writing?); their read columns were filled from their cases. Upgrade every process "
                           "that writes to the store.", redact(self.url), n)
        return n

    _BACKFILL = 5000

    def _migrate_4_5(self) -> None:
        from ._labels import key_stored_labels  # noqa: PLC0415

        self._add_columns(S.GOLDENS_COLUMNS)
        S.label_log.create(self.engine, checkfirst=True)
        key_stored_labels(self.engine)

"""Retention: what leaves the store, and when (``contextjudge prune``, ``store.prune(...)``, the worker's schedule).

    store.prune(older_than="90d")            # cases captured more than 90 days ago, with everything that follows them
    store.prune(keep_runs=20, dry_run=True)  # what would go if only the 20 newest runs were kept
    store.set_retention(older_than="90d")    # the store's setting: every worker on it applies it, hourly

A case goes with its ranked nodes, its results and their verdicts, and its queue row. Judge-call rows and verdict
cache entries go by their own time (older than the cutoff); spend windows when untouched since the cutoff; a run
when it has ended and no case is left in it. Never pruned: a case a worker still has to score (queued or claimed), a
case a spent budget set aside (skipped with a ``budget`` note: ``contextjudge worker --requeue-skipped`` scores it
when a window opens; unless ``skipped=True``), a case with gold labels and the labels themselves (unless
``labels=True``); goldens live in your files, not the store.

Deletes run in batches of ``batch`` cases, each its own short transaction, so a worker writing at the same time
waits at most one batch: on PostgreSQL each batch takes the rows it deletes with ``FOR UPDATE SKIP LOCKED`` and
gives up a lock it would wait for more than a second on (``lock_timeout``), and never touches a queued or claimed
row (which is all a worker locks). SQLite then gives the freed pages back to the file system
(``PRAGMA incremental_vacuum``: a store made by this version is in incremental auto-vacuum; an older one keeps its
free pages for new rows, or is converted once with ``vacuum=True``, a full ``VACUUM``). PostgreSQL's autovacuum makes
the space of deleted rows reusable.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, delete, exists, func, select, text, tuple_, update
from sqlalchemy.exc import OperationalError

from ..errors import ConfigurationError
from . import _schema as S
from ._base import StoreBase

__all__ = ["PruneReport", "RetentionStore", "parse_age"]

logger = logging.getLogger("contextjudge")

_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
RETENTION_KEY = "retention"
RAN_KEY = "retention_ran_at"


def parse_age(value: Any, what: str = "older_than") -> float | None:
    """Seconds from an age: a number of seconds, or a span such as ``"90d"``, ``"12h"``, ``"2w"``; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str):
        t = value.strip().lower()
        if t and t[-1] in _UNIT:
            try:
                n = float(t[:-1])
            except ValueError:
                n = -1.0
            if n > 0:
                return n * _UNIT[t[-1]]
    raise ConfigurationError(f"{what}={value!r}: give an age such as '90d', '12h' or '2w' (or seconds > 0).")


@dataclass
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove), by kind of row; ``cutoff``: the capture time before
    which cases went (None: no age given); ``runs``: the ids of the runs that went whole; ``freed_bytes``: what the
    SQLite file gave back."""

    dry_run: bool
    cutoff: float | None
    counts: dict[str, int] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    kept_pending: int = 0
    kept_labelled: int = 0
    kept_skipped: int = 0
    seconds: float = 0.0
    freed_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "cutoff": self.cutoff, "counts": dict(self.counts), "runs": list(self.runs),
                "kept_pending": self.kept_pending, "kept_labelled": self.kept_labelled,
                "kept_skipped": self.kept_skipped, "seconds": self.seconds,
                "freed_bytes": self.freed_bytes}

    def line(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        parts = ", ".join(f"{n:,} {k}" for k, n in self.counts.items() if n) or "nothing"
        more = []
        if self.runs:
            more.append(f"{len(self.runs)} run(s) whole")
        if self.kept_pending:
            more.append(f"kept {self.kept_pending:,} case(s) a worker has still to score")
        if self.kept_skipped:
            more.append(f"kept {self.kept_skipped:,} case(s) a spent budget set aside, for `contextjudge worker "
                        "--requeue-skipped` (--skipped prunes them)")
        if self.kept_labelled:
            more.append(f"kept {self.kept_labelled:,} case(s) with gold labels (--labels prunes them)")
        if self.freed_bytes:
            more.append(f"{self.freed_bytes / 1e6:.1f} MB given back to the file system")
        return f"prune {verb} {parts}" + (f" ({'; '.join(more)})" if more else "")


class RetentionStore(StoreBase):
    """Mixed into ``ResultsStore``: ``prune``, the store's retention setting and its schedule. ``self`` is the
    store."""

    is_sqlite: bool

    # ------------------------------------------------------------------------------------------ the setting
    def retention(self) -> dict[str, Any] | None:
        """The store's retention setting (``older_than``, ``keep_runs``, ``labels``, ``skipped``), or None."""
        with self._guard("read the retention setting"), self._begin(write=False) as conn:
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == RETENTION_KEY)).first()
        if row is None:
            return None
        try:
            got = json.loads(row[0])
        except ValueError:
            return None
        return got if isinstance(got, dict) and (got.get("older_than") or got.get("keep_runs")) else None

    def set_retention(self, older_than: Any = None, keep_runs: int | None = None, *, labels: bool = False,
                      skipped: bool = False) -> None:
        """Keep the retention setting in the store (None for both: no setting): every worker on the store applies it
        on its own schedule (``Worker(prune_every=...)``, hourly by default)."""
        if older_than is not None:
            parse_age(older_than)
        if keep_runs is not None and int(keep_runs) < 1:
            raise ConfigurationError(f"keep_runs={keep_runs}: keep at least 1 run.")
        with self._guard("keep the retention setting"), self._begin() as conn:
            conn.execute(delete(S.meta).where(S.meta.c.key == RETENTION_KEY))
            if older_than is not None or keep_runs is not None:
                conn.execute(S.meta.insert().values(key=RETENTION_KEY, value=json.dumps(
                    {"older_than": older_than, "keep_runs": None if keep_runs is None else int(keep_runs),
                     "labels": bool(labels), **({"skipped": True} if skipped else {})})))

    def retention_due(self, every: float) -> bool:
        """True, once per ``every`` seconds across every process on the store, for the one that should apply the
        retention setting now (a conditional write of when it last ran: two workers never prune at once)."""
        now = time.time()
        with self._guard("schedule retention"), self._begin() as conn:
            self._insert_ignore(conn, S.meta, {"key": RAN_KEY, "value": "0"}, ["key"])
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == RAN_KEY)).first()
            last = row[0] if row else "0"
            try:
                if now - float(last) < every:
                    return False
            except ValueError:
                pass
            hit = conn.execute(update(S.meta).where(S.meta.c.key == RAN_KEY, S.meta.c.value == last)
                               .values(value=repr(now)))
            return bool(hit.rowcount)

    def apply_retention(self) -> PruneReport | None:
        """Prune by the store's setting (None when it has none)."""
        setting = self.retention()
        if setting is None:
            return None
        return self.prune(older_than=setting.get("older_than"), keep_runs=setting.get("keep_runs"),
                          labels=bool(setting.get("labels")), skipped=bool(setting.get("skipped")))

    # ------------------------------------------------------------------------------------------ prune
    def prune(self, older_than: Any = None, keep_runs: int | None = None, *, dry_run: bool = False,
              labels: bool = False, skipped: bool = False, batch: int = 500, vacuum: bool = False,
              now: float | None = None) -> PruneReport:
        """Remove the cases captured before ``older_than`` ago (``"90d"``) and every run but the ``keep_runs``
        newest (a run still running is never removed whole), with what follows them (see the module). ``dry_run``:
        count only. ``labels``: prune labelled cases and labels too. ``skipped``: prune the cases a spent budget set
        aside too (kept without it, for ``contextjudge worker --requeue-skipped``). ``vacuum``: on SQLite, a full ``VACUUM`` after
        (converts an older store to incremental auto-vacuum; it needs the file to itself for a while)."""
        if older_than is None and keep_runs is None:
            raise ConfigurationError("prune needs older_than (e.g. '90d') or keep_runs (e.g. 20): nothing to prune "
                                     "by.")
        age = parse_age(older_than)
        if keep_runs is not None and int(keep_runs) < 1:
            raise ConfigurationError(f"keep_runs={keep_runs}: keep at least 1 run.")
        t0 = time.perf_counter()
        cutoff = None if age is None else (time.time() if now is None else now) - age
        old_runs = self._runs_beyond(int(keep_runs)) if keep_runs is not None else []
        report = PruneReport(dry_run=dry_run, cutoff=cutoff)
        c, q, lab = S.cases, S.queue, S.labels
        pending = exists().where(q.c.run_id == c.c.run_id, q.c.case_key == c.c.case_key,
                                 q.c.state.in_(("queued", "claimed")))
        labelled = exists().where(lab.c.case_key == c.c.case_key)
        # set aside by a spent budget: they wait for `worker --requeue-skipped` (queue.requeue_skipped's rows)
        budget_skipped = exists().where(q.c.run_id == c.c.run_id, q.c.case_key == c.c.case_key,
                                        q.c.state == "skipped", q.c.note.like("budget%"))
        scopes = []
        if cutoff is not None:
            scopes.append(c.c.created_at < cutoff)
        if old_runs:
            scopes.append(c.c.run_id.in_(old_runs))
        from sqlalchemy import or_  # noqa: PLC0415

        scope = or_(*scopes) if len(scopes) > 1 else scopes[0] if scopes else None
        goes = None
        if scope is not None:
            with self._guard("count what to prune"), self._begin(write=False) as conn:
                report.kept_pending = int(conn.execute(select(func.count()).where(scope, pending)).scalar() or 0)
                if not skipped:
                    report.kept_skipped = int(conn.execute(select(func.count()).where(scope, budget_skipped))
                                              .scalar() or 0)
                if not labels:
                    report.kept_labelled = int(conn.execute(select(func.count()).where(
                        scope, labelled, ~pending, *([] if skipped else [~budget_skipped]))).scalar() or 0)
            kept = [~pending, *([] if labels else [~labelled]), *([] if skipped else [~budget_skipped])]
            goes = and_(scope, *kept)
            if dry_run:
                self._count_cases(goes, report)
            else:
                self._delete_cases(goes, report, batch)
        self._prune_by_time(cutoff, report, dry_run, batch)
        self._prune_runs(cutoff, old_runs, report, dry_run, goes)
        if labels and cutoff is not None:
            self._prune_labels(cutoff, report, dry_run)
        if not dry_run and self.is_sqlite:
            report.freed_bytes = self._give_back_space(full=vacuum)
        report.seconds = time.perf_counter() - t0
        logger.info("contextjudge: %s", report.line())
        return report

    def _runs_beyond(self, keep: int) -> list[str]:
        """The ids of the runs older than the ``keep`` newest, that have ended."""
        r = S.runs
        with self._guard("list runs"), self._begin(write=False) as conn:
            rows = conn.execute(select(r.c.run_id, r.c.status).order_by(r.c.created_at.desc(), r.c.run_id.desc())
                                ).all()
        return [row.run_id for row in rows[keep:] if row.status != "running"]

    def _count_cases(self, goes: Any, report: PruneReport) -> None:
        c = S.cases
        keys = select(c.c.run_id, c.c.case_key).where(goes).subquery()
        with self._guard("count what to prune"), self._begin(write=False) as conn:
            report.counts["cases"] = int(conn.execute(select(func.count()).select_from(keys)).scalar() or 0)
            for name, table in (("results", S.results), ("verdicts", S.verdicts), ("nodes", S.nodes),
                                ("queue rows", S.queue)):
                n = conn.execute(select(func.count()).select_from(table).where(
                    tuple_(table.c.run_id, table.c.case_key).in_(select(keys.c.run_id, keys.c.case_key)))).scalar()
                report.counts[name] = int(n or 0)

    def _batch_tx(self) -> Any:
        """One batch's transaction; on PostgreSQL it gives up rather than wait more than a second for a lock."""
        return _BatchTx(self)

    def _delete_cases(self, goes: Any, report: PruneReport, batch: int) -> None:
        c = S.cases
        pick = select(c.c.run_id, c.c.case_key).where(goes).limit(max(1, int(batch)))
        if not self.is_sqlite:
            pick = pick.with_for_update(skip_locked=True, of=c)
        for name in ("cases", "results", "verdicts", "nodes", "queue rows"):
            report.counts.setdefault(name, 0)
        while True:
            with self._guard("prune old cases"), self._batch_tx() as conn:
                keys = conn.execute(pick).all()
                if not keys:
                    return
                by_run: dict[str, list[str]] = {}
                for run_id, key in keys:
                    by_run.setdefault(run_id, []).append(key)
                # per run, the keys as one list: an index scan on both backends (a list of (run, key) pairs makes
                # PostgreSQL scan the table)
                for name, table in (("verdicts", S.verdicts), ("results", S.results), ("nodes", S.nodes),
                                    ("queue rows", S.queue), ("cases", S.cases)):
                    for run_id, mine in by_run.items():
                        hit = conn.execute(delete(table).where(table.c.run_id == run_id, table.c.case_key.in_(mine)))
                        report.counts[name] += max(0, hit.rowcount or 0)
            # (on SQLite the store's write lock is let go between batches: a worker's write waits one batch at most)

    def _prune_by_time(self, cutoff: float | None, report: PruneReport, dry_run: bool, batch: int) -> None:
        """Judge calls and verdict cache entries older than the cutoff; spend windows untouched since."""
        if cutoff is None:
            return
        j, v, sp = S.judge_calls, S.verdict_cache, S.spend
        for name, table, key, cond in (("judge calls", j, j.c.id, j.c.created_at < cutoff),
                                       ("cache entries", v, v.c.key, v.c.created_at < cutoff),
                                       ("spend windows", sp, None, sp.c.updated_at < cutoff)):
            if dry_run:
                with self._guard("count what to prune"), self._begin(write=False) as conn:
                    report.counts[name] = int(conn.execute(select(func.count()).select_from(table).where(cond))
                                              .scalar() or 0)
                continue
            report.counts[name] = 0
            while True:
                n = -1  # stays -1 when the batch gave up on a lock: tried again
                with self._guard(f"prune old {name}"), self._batch_tx() as conn:
                    if key is None:  # a few rows per budget and window: one statement
                        stmt = delete(table).where(cond)
                    else:
                        stmt = delete(table).where(key.in_(select(key).where(cond).limit(max(1, int(batch)))
                                                           .scalar_subquery()))
                    hit = conn.execute(stmt)
                    n = max(0, hit.rowcount or 0)
                if n < 0:
                    continue
                report.counts[name] += n
                if key is None or n == 0:
                    break

    def _prune_runs(self, cutoff: float | None, old_runs: list[str], report: PruneReport, dry_run: bool,
                    goes: Any) -> None:
        """Runs that have ended with no case left, created before the cutoff or beyond ``keep_runs``: the run row,
        with its judge calls and any result left without its case."""
        r, c = S.runs, S.cases
        cond = [r.c.status != "running", ~exists().where(c.c.run_id == r.c.run_id)]
        old = []
        if cutoff is not None:
            old.append(r.c.created_at < cutoff)
        if old_runs:
            old.append(r.c.run_id.in_(old_runs))
        if not old:
            return
        from sqlalchemy import or_  # noqa: PLC0415

        if dry_run:  # the runs that would be left with no case: those with no case that stays
            with self._guard("count what to prune"), self._begin(write=False) as conn:
                stays = select(c.c.run_id).distinct() if goes is None else \
                    select(c.c.run_id).where(~goes).distinct()
                alive = {row[0] for row in conn.execute(stays).all()}
                ended = {row[0] for row in conn.execute(select(r.c.run_id).where(r.c.status != "running",
                                                                                 or_(*old))).all()}
            report.runs = sorted(ended - alive)
            report.counts["runs"] = len(report.runs)
            return
        with self._guard("find runs to prune"), self._begin(write=False) as conn:
            gone = [row[0] for row in conn.execute(select(r.c.run_id).where(*cond, or_(*old))).all()]
        for run_id in gone:
            with self._guard("prune a run"), self._batch_tx() as conn:
                for table in (S.judge_calls, S.verdicts, S.results):
                    conn.execute(delete(table).where(table.c.run_id == run_id))
                conn.execute(delete(r).where(r.c.run_id == run_id, ~exists().where(c.c.run_id == r.c.run_id)))
        report.runs = gone
        report.counts["runs"] = len(gone)

    def _prune_labels(self, cutoff: float, report: PruneReport, dry_run: bool) -> None:
        lab = S.labels
        n: Any = 0
        with self._guard("prune labels"), (self._begin(write=False) if dry_run else self._batch_tx()) as conn:
            if dry_run:
                n = conn.execute(select(func.count()).select_from(lab).where(lab.c.created_at < cutoff)).scalar()
            else:
                n = conn.execute(delete(lab).where(lab.c.created_at < cutoff)).rowcount
        report.counts["labels"] = int(n or 0)

    def _give_back_space(self, full: bool = False) -> int:
        """SQLite: hand the free pages back to the file system (incremental auto-vacuum, a few thousand pages per
        step); ``full``: ``VACUUM`` (which also turns incremental auto-vacuum on for an older store). Returns the
        bytes given back."""
        import os  # noqa: PLC0415

        path = self.url[len("sqlite:///"):]
        before = os.path.getsize(path) if os.path.exists(path) else 0
        lock = self._write_lock  # type: ignore[attr-defined]
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            if full:
                with lock:
                    cur.execute("PRAGMA auto_vacuum=INCREMENTAL")
                    cur.execute("VACUUM")
            elif cur.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                # a thousand pages a step, the write lock let go between steps: a writer waits one step at most
                while cur.execute("PRAGMA freelist_count").fetchone()[0] > 0:
                    with lock:
                        cur.execute("PRAGMA incremental_vacuum(1000)").fetchall()
                        raw.commit()
            # the freed pages leave the file when the log is copied back; PASSIVE never waits for a writer
            cur.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            raw.commit()
        finally:
            raw.close()
        after = os.path.getsize(path) if os.path.exists(path) else 0
        return max(0, before - after)


class _BatchTx:
    """A write transaction for one prune batch: on PostgreSQL with ``lock_timeout`` of one second (and a retry after
    a pause when it runs out: the worker's transaction goes first)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cm: Any = None

    def __enter__(self) -> Any:
        self._cm = self.store._begin()
        conn = self._cm.__enter__()
        if not self.store.is_sqlite:
            conn.execute(text("SET LOCAL lock_timeout = '1s'"))
        return conn

    def __exit__(self, et: Any, exc: Any, tb: Any) -> bool:
        done = self._cm.__exit__(et, exc, tb)
        if isinstance(exc, OperationalError) and "lock timeout" in str(exc).lower():
            logger.info("contextjudge: a prune batch waited over a second for a lock; it will be tried again")
            time.sleep(0.5)
            return True  # swallowed: the caller's loop picks the batch again
        return bool(done)

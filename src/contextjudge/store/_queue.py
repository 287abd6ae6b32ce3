"""The work queue of a store (``cj_queue``): cases waiting for a worker, claimed with leases that expire.

Used by capture mode ``"worker"`` (the app writes cases and queue rows, nothing else), ``contextjudge worker``
(claims, scores, completes) and, in issue 18, the Ray engine. The rules:

- a row is ``queued`` until a worker claims it (``claimed``, with ``owner`` and ``lease_until``); a claimed row whose
  lease has expired may be claimed by anyone (its worker died or hangs): only the judge calls that were in flight are
  repeated;
- ``complete`` writes a case's results and marks its row ``done`` in ONE transaction, and only while the caller still
  holds the lease (owner matches and the row is ``claimed``); otherwise it writes nothing and returns False. So the
  results of a case are written once;
- ``release`` gives a case back (``queued``, e.g. at a clean shutdown) or sets it aside (``skipped`` with a note:
  budget spent, claimed too many times).

PostgreSQL: several workers claim at once (``FOR UPDATE SKIP LOCKED``). SQLite: one worker (SQLite has one writer).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import and_, func, literal, null, or_, select, tuple_, update

from .._locks import try_lock as _try_lock
from .._result import MetricResult
from ..errors import StoreError
from . import _rows  # the row builders, shared with _writes.py
from . import _schema as S
from ._writes import WriteStore

__all__ = ["QueueStore"]

_Q = S.queue


def _claimable(now: float) -> Any:
    """Rows a worker may claim: waiting, or claimed by a worker whose lease has passed (it died or hangs)."""
    return or_(_Q.c.state == "queued", and_(_Q.c.state == "claimed", _Q.c.lease_until < now))


class QueueStore(WriteStore):
    """Mixed into ``ResultsStore``: the queue methods (a completed case's results are written by ``WriteStore``'s
    ``_write_result``, in the queue's own transaction). ``self`` is the store."""

    is_sqlite: bool

    def save_cases_queued(self, run_id: str, items: Sequence[tuple[str, int, Any]], *, enqueue: bool = True,
                          priority: int = 0, isolate: bool = False) -> list[tuple[str, BaseException]]:
        """Save several cases ``(key, position, test_case)`` with their nodes and (``enqueue``) a queue row each, in
        one transaction (capture mode "worker" writes its batches with this). Saving a key again changes nothing.

        ``isolate``: a case the database refuses costs only itself. When the batch's transaction fails on its data
        (a row the database will not take, not a store that is unreachable or busy, which raises ``StoreError`` as
        without it), each case is written again in a transaction of its own; returned are the cases that still
        could not be written, ``(key, error)``, for the caller to count and name (empty when all were written)."""
        if not items:
            return []
        now = time.time()
        built: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = []
        failed: list[tuple[str, BaseException]] = []
        for i, (key, position, test_case) in enumerate(items):
            try:
                row, nodes = _rows.case_rows(run_id, key, position, test_case)
            except Exception as exc:
                if not isolate:
                    raise
                failed.append((key, exc))
                continue
            built.append((key, row, nodes, [_queue_row(run_id, key, now + i * 1e-6, priority)] if enqueue else []))
        try:
            _insert_cases(self, built)
            return failed
        except Exception as exc:
            if not isolate or _store_trouble(exc):
                raise
            if len(built) == 1:
                return [*failed, (built[0][0], exc)]
        for one in built:  # the batch failed on a row's data: each case in a transaction of its own
            try:
                _insert_cases(self, [one])
            except Exception as exc:
                if _store_trouble(exc):
                    raise
                failed.append((one[0], exc))
        return failed

    def enqueue(self, run_id: str, keys: Sequence[str] | None = None, *, priority: int = 0,
                only_unscored: bool = True) -> int:
        """Add queue rows for stored cases of ``run_id`` (``keys``, or every case of the run), skipping cases that
        already have a row and, with ``only_unscored``, cases that already have results. Returns rows added."""
        now = time.time()
        # INSERT ... SELECT: the rows are made in the database, never held in memory (a run may have millions)
        cols = [S.cases.c.run_id, S.cases.c.case_key, literal("queued").label("state"),
                null().label("owner"), null().label("lease_until"), literal(0).label("attempts"),
                literal(int(priority)).label("priority"),
                (literal(now) + S.cases.c.position * 1e-6).label("enqueued_at"), literal(now).label("updated_at"),
                null().label("note")]
        base = select(*cols).where(S.cases.c.run_id == run_id)  # a case with a row already: ON CONFLICT skips it
        if only_unscored:
            base = base.where(~select(S.results.c.case_key).where(and_(
                S.results.c.run_id == run_id, S.results.c.case_key == S.cases.c.case_key)).exists())
        wanted = None if keys is None else sorted(set(keys))
        parts = [base] if wanted is None else [base.where(S.cases.c.case_key.in_(wanted[i:i + 500]))
                                               for i in range(0, len(wanted), 500)]
        names = [c.name for c in _Q.c]
        # rows added: counted, as the drivers' rowcount of an INSERT ... SELECT is not reliable (psycopg gives -1)
        count = select(func.count()).select_from(_Q).where(_Q.c.run_id == run_id)
        with self._guard("enqueue test cases"), self._begin() as conn:
            before = conn.execute(count).scalar() or 0
            for part in parts:
                conn.execute(self._dialect_insert(_Q).from_select(names, part).on_conflict_do_nothing(
                    index_elements=["run_id", "case_key"]))
            return int((conn.execute(count).scalar() or 0) - before)

    def claim(self, owner: str, *, limit: int = 8, lease: float = 60.0, run_id: str | None = None,
              now: float | None = None, max_attempts: int = 5) -> list[Any]:
        """Claim up to ``limit`` rows (queued, or claimed with an expired lease), oldest first, for ``owner`` until
        ``now + lease``; return them as ``StoredCase`` objects (with ``run_id`` set). A row already claimed
        ``max_attempts`` times is marked skipped instead (a case that kills its worker must not kill them all)."""
        if limit <= 0:
            return []
        now = time.time() if now is None else float(now)
        scope = [] if run_id is None else [_Q.c.run_id == run_id]
        pg = not self.is_sqlite
        cols = (_Q.c.run_id, _Q.c.case_key, _Q.c.attempts, _Q.c.priority, _Q.c.enqueued_at)
        # Two bounded picks, each served by an index in its own order, so a claim costs the same with ten queued
        # rows or a million: the oldest queued rows (ix_cj_queue_state: state, priority, enqueued_at) and the
        # longest-expired claims (ix_cj_queue_lease: state, lease_until). An OR of the two in one query could use
        # neither index for the ORDER BY ... LIMIT, and sorted every claimable row on every claim.
        queued = (select(*cols).where(_Q.c.state == "queued", *scope)
                  .order_by(_Q.c.priority, _Q.c.enqueued_at).limit(int(limit)))
        expired = (select(*cols).where(_Q.c.state == "claimed", _Q.c.lease_until < now, *scope)
                   .order_by(_Q.c.lease_until).limit(int(limit)))
        if pg:  # several workers at once: each takes rows nobody else is taking right now
            queued = queued.with_for_update(skip_locked=True)
            expired = expired.with_for_update(skip_locked=True)
        with self._guard("claim queued test cases"), self._begin() as conn:
            rows = list(conn.execute(queued).all()) + list(conn.execute(expired).all())
            rows.sort(key=lambda r: (r.priority, r.enqueued_at))
            rows = rows[:int(limit)]
            # cases that were claimed too often (each claim whose worker never completed nor released it) are set
            # aside, so one case that kills its worker cannot take every worker down in turn
            worn = [(r.run_id, r.case_key) for r in rows if r.attempts >= max_attempts]
            take = [(r.run_id, r.case_key) for r in rows if r.attempts < max_attempts]
            if worn:
                conn.execute(update(_Q).where(tuple_(_Q.c.run_id, _Q.c.case_key).in_(worn), _claimable(now)).values(
                    state="skipped", owner=None, lease_until=None, updated_at=now,
                    note=f"claimed {max_attempts} times without finishing: its scoring failed, or its worker died or "
                         "hung, each time"))
            if not take:
                return []
            got = conn.execute(
                update(_Q).where(tuple_(_Q.c.run_id, _Q.c.case_key).in_(take), _claimable(now))
                .values(state="claimed", owner=owner, lease_until=now + float(lease), attempts=_Q.c.attempts + 1,
                        updated_at=now, note=None)
                .returning(_Q.c.run_id, _Q.c.case_key, _Q.c.attempts)).all()
            if not got:
                return []
            out = []
            by_run: dict[str, dict[str, int]] = {}
            for r in got:
                by_run.setdefault(r.run_id, {})[r.case_key] = r.attempts
            for rid, attempts in by_run.items():
                found = conn.execute(select(S.cases).where(S.cases.c.run_id == rid, S.cases.c.case_key.in_(
                    list(attempts)))).all()
                labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels).where(
                    S.labels.c.case_key.in_(list(attempts)))).all())
                out += [_rows.stored_case(row, labels.get(row.case_key), run_id=rid, attempts=attempts[row.case_key])
                        for row in found]
        out.sort(key=lambda sc: (sc.run_id, sc.position))
        return out

    def renew(self, owner: str, items: Sequence[tuple[str, str]], *, lease: float = 60.0,
              now: float | None = None) -> int:
        """Extend the leases ``owner`` still holds on ``(run_id, case_key)`` items; returns how many it holds."""
        items = list(items)
        if not items:
            return 0
        now = time.time() if now is None else float(now)
        held = 0
        with self._guard("renew leases"), self._begin() as conn:
            for start in range(0, len(items), 500):
                part = items[start:start + 500]
                hit = conn.execute(update(_Q).where(
                    _Q.c.owner == owner, _Q.c.state == "claimed",
                    tuple_(_Q.c.run_id, _Q.c.case_key).in_(part)).values(
                    lease_until=now + float(lease), updated_at=now))
                held += max(0, int(hit.rowcount or 0))
        return held

    def held(self, owner: str, items: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``(run_id, case_key)`` items ``owner`` still holds (claimed by it; its lease may have passed as
        long as nobody claimed the case since)."""
        items = list(items)
        if not items:
            return set()
        with self._guard("read leases"), self._begin(write=False) as conn:
            rows = conn.execute(select(_Q.c.run_id, _Q.c.case_key).where(
                _Q.c.owner == owner, _Q.c.state == "claimed",
                tuple_(_Q.c.run_id, _Q.c.case_key).in_(items))).all()
        return {(r.run_id, r.case_key) for r in rows}

    def complete(self, owner: str, run_id: str, key: str, results: Sequence[MetricResult], *,
                 judge_calls: Sequence[dict[str, Any]] = ()) -> bool:
        """Write ``results`` (and the judge calls' usage) and mark the row done, in one transaction, only while
        ``owner`` holds the lease; returns False, writing nothing, when it does not (the lease expired and another
        worker claimed the case)."""
        return self.complete_many(owner, [(run_id, key, results, judge_calls)])[0]

    def complete_many(self, owner: str, items: Sequence[tuple[str, str, Sequence[MetricResult],
                                                       Sequence[dict[str, Any]]]]) -> list[bool]:
        """``complete`` of several cases ``(run_id, key, results, judge_calls)`` in ONE transaction, with a few
        statements for them all (the queue rows marked in one UPDATE ... RETURNING, the results, verdicts and judge
        calls each written with one executemany): a worker completes what it has scored together, so a case costs a
        fraction of a round trip and of a commit. The same rule per case: its results are written only while
        ``owner`` holds its lease; returns, per item, whether it was written (a key given twice is written once, the
        second gets False)."""
        items = list(items)
        if not items:
            return []
        now = time.time()
        refs = list(dict.fromkeys((run_id, key) for run_id, key, _r, _c in items))
        with self._guard("complete queued test cases"), self._begin() as conn:
            held: set[tuple[str, str]] = set()
            for start in range(0, len(refs), 500):  # locks the rows on PostgreSQL until this commits (see complete)
                part = refs[start:start + 500]
                got = conn.execute(update(_Q).where(
                    tuple_(_Q.c.run_id, _Q.c.case_key).in_(part), _Q.c.owner == owner, _Q.c.state == "claimed")
                    .values(state="done", lease_until=None, updated_at=now, note=None)
                    .returning(_Q.c.run_id, _Q.c.case_key)).all()
                held.update((r.run_id, r.case_key) for r in got)
            written: list[bool] = []
            todo: list[tuple[str, str, Sequence[MetricResult], Sequence[dict[str, Any]]]] = []
            for run_id, key, results, calls in items:
                ok = (run_id, key) in held
                held.discard((run_id, key))  # a second item of the same key is not written again
                written.append(ok)
                if ok:
                    todo.append((run_id, key, results, calls))
            self._write_results_many(conn, [(run_id, key, results) for run_id, key, results, _c in todo])
            call_rows = [_rows.judge_call_row(run_id, e) for run_id, _k, _r, calls in todo for e in calls]
            if call_rows:
                conn.execute(self._q["call"], call_rows)
        return written

    def release(self, owner: str, run_id: str, key: str, *, state: str = "queued", note: str | None = None,
                failed: bool = False) -> bool:
        """Give back a case ``owner`` holds (``queued``) or set it aside (``skipped``, with ``note``). A case given
        back on purpose (a clean stop, the judge down) does not count its claim as an attempt; one given back
        because scoring it failed (``failed``) does, so a case that fails every time is set aside after
        ``max_attempts`` claims instead of being claimed again forever."""
        if state not in ("queued", "skipped"):
            raise StoreError(f"release(state={state!r}): a case is given back as 'queued' or set aside as 'skipped'.")
        now = time.time()
        values: dict[str, Any] = {"state": state, "owner": None, "lease_until": None, "updated_at": now, "note": note}
        if state == "queued" and not failed:  # given back on purpose: that claim does not count as a failure
            values["attempts"] = func.max(_Q.c.attempts - 1, 0) if self.is_sqlite else \
                func.greatest(_Q.c.attempts - 1, 0)
        with self._guard("release a queued test case"), self._begin() as conn:
            hit = conn.execute(update(_Q).where(
                _Q.c.run_id == run_id, _Q.c.case_key == key, _Q.c.owner == owner, _Q.c.state == "claimed")
                .values(**values))
            return bool(hit.rowcount)

    def requeue_skipped(self, run_id: str | None = None, *, reason: str = "budget") -> int:
        """Queue again the cases set aside (``skipped``) whose note starts with ``reason`` (``"budget"``: a spent
        budget), their attempts reset; returns how many. ``contextjudge worker --requeue-skipped`` calls it when a
        budget window opens."""
        now = time.time()
        conds = [_Q.c.state == "skipped", _Q.c.note.like(f"{reason}%")]
        if run_id is not None:
            conds.append(_Q.c.run_id == run_id)
        with self._guard("requeue skipped test cases"), self._begin() as conn:
            hit = conn.execute(update(_Q).where(*conds).values(state="queued", owner=None, lease_until=None,
                                                               attempts=0, updated_at=now, note=None))
            return max(0, int(hit.rowcount or 0))

    def queue_counts(self, run_id: str | None = None) -> dict[str, int]:
        """Rows per state (``queued``, ``claimed``, ``expired`` (claimed, lease passed), ``done``, ``skipped``)."""
        now = time.time()
        expired = and_(_Q.c.state == "claimed", _Q.c.lease_until < now)
        q = select(_Q.c.state, expired.label("expired"), func.count()).group_by(_Q.c.state, expired)
        if run_id is not None:
            q = q.where(_Q.c.run_id == run_id)
        out = {"queued": 0, "claimed": 0, "expired": 0, "done": 0, "skipped": 0}
        with self._guard("count queued test cases"), self._begin(write=False) as conn:
            for state, is_expired, n in conn.execute(q).all():
                name = "expired" if (state == "claimed" and is_expired) else state
                out[name] = out.get(name, 0) + int(n)
        return out

    def results_since(self, run_id: str, since: float) -> list[tuple[str, MetricResult, float]]:
        """``(case_key, result, created_at)`` of the results of ``run_id`` written after ``since``, oldest first
        (a capture session in mode "worker" polls this to send results back as framework events)."""
        with self._guard("read results"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.results).where(S.results.c.run_id == run_id, S.results.c.created_at > since)
                                .order_by(S.results.c.created_at, S.results.c.case_key, S.results.c.metric)).all()
            keys = sorted({r.case_key for r in rows})
            verdicts: dict[tuple[str, str], list[Any]] = {}
            for start in range(0, len(keys), 500):
                for vr in conn.execute(select(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.data).where(
                        S.verdicts.c.run_id == run_id, S.verdicts.c.case_key.in_(keys[start:start + 500]))
                        .order_by(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.position)).all():
                    verdicts.setdefault((vr.case_key, vr.metric), []).append(vr.data)
        return [(r.case_key, _rows.result_from_row(r, verdicts.get((r.case_key, r.metric), [])), float(r.created_at))
                for r in rows]

    # ------------------------------------------------------------------------------------------ one worker on SQLite
    @contextlib.contextmanager
    def worker_slot(self, owner: str) -> Iterator[None]:
        """Held by a worker while it runs. PostgreSQL: any number of workers (nothing to hold). SQLite: one worker
        per store file, held with an OS file lock next to the database (released when the process ends, however it
        ends); a second worker gets a ``StoreError`` that says to use PostgreSQL for several."""
        if not self.is_sqlite:
            yield
            return
        path = self.engine.url.database
        if not path or path == ":memory:":
            yield
            return
        lock_path = path + ".worker-lock"
        fh = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the block
        try:
            if not _try_lock(fh):
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise StoreError(f"SQLite allows one worker, and {holder} is already working on the store {path!r}. "
                                 "Stop it first, or use PostgreSQL (--store postgresql+psycopg://...) for several "
                                 "workers.")
            fh.seek(0)
            fh.truncate()
            fh.write(f"worker {owner} (pid {os.getpid()})")
            fh.flush()
            yield
        finally:
            fh.close()  # closing the file releases the lock


def _insert_cases(store: Any, built: Sequence[tuple[str, dict[str, Any], list[dict[str, Any]],
                                                  list[dict[str, Any]]]]) -> None:
    """``save_cases_queued``'s one transaction: the case, node and queue rows of ``built``
    (``(key, case row, node rows, queue rows)`` each)."""
    case_rows = [row for _k, row, _n, _q in built]
    node_rows = [n for _k, _r, nodes, _q in built for n in nodes]
    queue_rows = [q for _k, _r, _n, qs in built for q in qs]
    if not case_rows:
        return
    with store._guard("save queued test cases"), store._begin() as conn:  # noqa: SLF001 - the store's own plumbing
        conn.execute(store._q["case"], case_rows)  # noqa: SLF001
        if node_rows:
            conn.execute(store._q["node"], node_rows)  # noqa: SLF001
        if queue_rows:
            conn.execute(store._q["queue"], queue_rows)  # noqa: SLF001


def _store_trouble(exc: BaseException) -> bool:
    """Whether a failed write failed on the store (unreachable, busy, locked, out of connections: every row would
    fail the same) rather than on a row's data (a value the database refuses, a trigger, a constraint)."""
    from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError  # noqa: PLC0415
    from sqlalchemy.exc import TimeoutError as PoolTimeout  # noqa: PLC0415

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (OperationalError, InterfaceError, DisconnectionError, PoolTimeout, ConnectionError,
                            TimeoutError)):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _queue_row(run_id: str, key: str, at: float, priority: int) -> dict[str, Any]:
    return {"run_id": run_id, "case_key": key, "state": "queued", "owner": None, "lease_until": None, "attempts": 0,
            "priority": int(priority), "enqueued_at": at, "updated_at": at, "note": None}

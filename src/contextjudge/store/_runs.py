"""Run bookkeeping of a store (``cj_runs``): start or resume a run, end it, mark the runs a dead process left
running as interrupted, list the runs and find one by id, prefix or name."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update

from ..cases.identity import new_run_id
from ..errors import StoreError
from . import _schema as S
from ._base import StoreBase, redact
from ._rows import _dumps, _loads

__all__ = ["RunInfo", "RunStore"]

logger = logging.getLogger("contextjudge")

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
    goldens: dict[str, Any] | None = None  # {"hash", "name"} of the goldens the run ran (schema 5), else None


class RunStore(StoreBase):
    """Mixed into ``ResultsStore``: the runs. ``self`` is the store."""

    def begin_run(self, run_id: str | None, config: dict[str, Any]) -> str:
        """Start a run, or resume it when ``run_id`` is already in the store. Returns the run id."""
        config = dict(config or {})
        config["owner"] = {"host": socket.gethostname(), "pid": os.getpid()}  # for mark_interrupted after a crash
        fingerprint = config.pop("fingerprint", None) or _fingerprint(
            {k: v for k, v in config.items() if k not in ("owner", "cases")})
        judges = config.get("judges") or []
        given = config.get("goldens_fingerprint")
        goldens: dict[str, Any] = given if isinstance(given, dict) else {}
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
                "config": _dumps(config), "summary": None, "goldens_hash": goldens.get("hash"),
                "goldens_name": goldens.get("name")}, ["run_id"])
        return new_id

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

    def list_runs(self, *, counts: bool = True) -> list[RunInfo]:
        """Every run, newest first, with how many cases and results it holds (``counts=False``: without, which
        saves counting every row of a large store when only a run's id or name is wanted)."""
        n_cases: dict[str, int] = {}
        n_results: dict[str, int] = {}
        with self._guard("list runs"), self._begin(write=False) as conn:
            if counts:
                n_cases = dict(conn.execute(select(S.cases.c.run_id, func.count()).group_by(S.cases.c.run_id)).all())
                n_results = dict(conn.execute(select(S.results.c.run_id, func.count())
                                              .group_by(S.results.c.run_id)).all())
            # a read-only store of schema 3 or 4 has no goldens columns: its runs recorded no goldens
            rows = conn.execute(select(*self._present(S.runs)).order_by(S.runs.c.created_at.desc(),
                                                                        S.runs.c.run_id.desc())).all()
        return [RunInfo(run_id=r.run_id, name=r.name, status=r.status, created_at=r.created_at,
                        finished_at=r.finished_at, fingerprint=r.fingerprint, judges=_loads(r.judges, []) or [],
                        config=_loads(r.config, {}) or {}, summary=_loads(r.summary, {}) or {},
                        cases=int(n_cases.get(r.run_id, 0)), results=int(n_results.get(r.run_id, 0)),
                        goldens=({"hash": r.goldens_hash, "name": getattr(r, "goldens_name", None)}
                                 if getattr(r, "goldens_hash", None) else None))
                for r in rows]

    def goldens_changes(self, since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
        """Where the goldens changed between runs: for each pair of consecutive runs (by start time, within
        ``since``/``until`` when given) that both recorded their goldens (schema 5) and recorded different ones,
        ``{"before": run id, "after": run id, "goldens_before": {...}, "goldens_after": {...}}``."""
        runs = [r for r in reversed(self.list_runs()) if r.goldens
                and (since is None or r.created_at >= since) and (until is None or r.created_at < until)]
        return [{"before": a.run_id, "after": b.run_id, "goldens_before": a.goldens, "goldens_after": b.goldens}
                for a, b in zip(runs, runs[1:], strict=False) if a.goldens != b.goldens]

    def run_info(self, run_id: str) -> RunInfo:
        for info in self.list_runs():
            if info.run_id == run_id:
                return info
        raise StoreError(f"no run {run_id!r} in {self}.")

    def resolve_run(self, ref: str | None = None) -> str:
        """A run id from ``ref``: an id, a unique id prefix, a run name (its latest run), or None/"latest"."""
        runs = self.list_runs(counts=False)
        if not runs:
            raise StoreError(f"the store {redact(self.url)!r} holds no runs yet: run `contextjudge eval` or "
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


def _fingerprint(config: dict[str, Any]) -> str:
    stable = {k: v for k, v in config.items() if k not in ("name", "cases")}
    return hashlib.sha256(_dumps(stable).encode()).hexdigest()[:16]

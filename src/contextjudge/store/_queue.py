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

from typing import Any, Sequence

from .._result import MetricResult

__all__ = ["QueueStore"]


class QueueStore:
    """Mixed into ``ResultsStore``: the queue methods. ``self`` is the store (``_begin``, ``_dialect_insert``...)."""

    def save_cases_queued(self, run_id: str, items: Sequence[tuple[str, int, Any]], *, enqueue: bool = True,
                          priority: int = 0) -> None:
        """Save several cases ``(key, position, test_case)`` with their nodes and (``enqueue``) a queue row each, in
        one transaction (capture mode "worker" writes its batches with this). Saving a key again changes nothing."""
        raise NotImplementedError

    def enqueue(self, run_id: str, keys: Sequence[str] | None = None, *, priority: int = 0,
                only_unscored: bool = True) -> int:
        """Add queue rows for stored cases of ``run_id`` (``keys``, or every case of the run), skipping cases that
        already have a row and, with ``only_unscored``, cases that already have results. Returns rows added."""
        raise NotImplementedError

    def claim(self, owner: str, *, limit: int = 8, lease: float = 60.0, run_id: str | None = None,
              now: float | None = None, max_attempts: int = 5) -> list[Any]:
        """Claim up to ``limit`` rows (queued, or claimed with an expired lease), oldest first, for ``owner`` until
        ``now + lease``; return them as ``StoredCase`` objects (with ``run_id`` set). A row already claimed
        ``max_attempts`` times is marked skipped instead (a case that kills its worker must not kill them all)."""
        raise NotImplementedError

    def renew(self, owner: str, items: Sequence[tuple[str, str]], *, lease: float = 60.0,
              now: float | None = None) -> int:
        """Extend the leases ``owner`` still holds on ``(run_id, case_key)`` items; returns how many it holds."""
        raise NotImplementedError

    def complete(self, owner: str, run_id: str, key: str, results: Sequence[MetricResult], *,
                 judge_calls: Sequence[dict[str, Any]] = ()) -> bool:
        """Write ``results`` (and the judge calls' usage) and mark the row done, in one transaction, only while
        ``owner`` holds the lease; returns False, writing nothing, when it does not (the lease expired and another
        worker claimed the case)."""
        raise NotImplementedError

    def release(self, owner: str, run_id: str, key: str, *, state: str = "queued", note: str | None = None) -> bool:
        """Give back a case ``owner`` holds (``queued``) or set it aside (``skipped``, with ``note``)."""
        raise NotImplementedError

    def queue_counts(self, run_id: str | None = None) -> dict[str, int]:
        """Rows per state (``queued``, ``claimed``, ``expired`` (claimed, lease passed), ``done``, ``skipped``)."""
        raise NotImplementedError

    def results_since(self, run_id: str, since: float) -> list[tuple[str, MetricResult, float]]:
        """``(case_key, result, created_at)`` of the results of ``run_id`` written after ``since``, oldest first
        (a capture session in mode "worker" polls this to send results back as framework events)."""
        raise NotImplementedError

"""``Worker``: score the cases a store's queue holds, out of the app's process (``contextjudge worker``).

A worker claims batches of queued cases with leases (``store/_queue.py``), scores each with ``score_case`` inside a
``Run`` that has no store (so nothing is written outside ``complete``) and whose verdict cache is backed by the
store (a verdict one worker paid for serves them all), keeps its leases alive from a heartbeat thread while it
scores, and completes each case in one transaction that writes its results only while it still holds the lease.
So every case's results are written once; a killed worker's cases are claimed again when their leases expire, and
only the judge calls that were in flight are repeated.

Several workers may share a PostgreSQL store; a SQLite store takes one (``QueueStore.worker_slot``), except the Ray
engine's actors on one machine (``exclusive=False``).

One concept a module:

- ``_loop``: ``Worker``, the claim loop (claim, start, nap, wind down, signals) and its public face;
- ``_scoring``: ``_CaseScoring``, one case scored and settled (completed in a group commit, given back or set aside);
- ``_leases``: ``_Leases``, the cases held and the heartbeat that renews them;
- ``_outage``: the judge down (``judge_down``) and the pause in claiming while it lasts (``_Outage``);
- ``_budget``: ``_SetAside``, cases a spent budget set aside, queued again when its window ends;
- ``_calibration``: ``_StoreCalibration``, the embedded judge calibrated on the store's labels, kept current;
- ``_retention``: ``_RetentionThread``, the store's retention setting applied while the worker runs;
- ``_metrics``: which metrics a run is scored with (``metrics_for_run``, ``DEFAULT_METRIC_KEYS``);
- ``_counts``: what the worker did (``WorkerCounts``) and its budget's spend (``budget_windows``), for its metrics;
- ``_cpu``: the process kept off part of the machine (``limit_cpu``, ``pin_threads``, ``usable_cores``).

Threads: the worker's event loop (the caller's thread), where cases are scored; ``contextjudge-heartbeat``, which
renews the leases every third of the lease and cancels the cases whose lease was lost (another worker took them,
after this one stalled for longer than the lease); ``contextjudge-retention`` (``prune_every``); store writes run
in the store's threads (``_aio.in_store_thread``).
"""

from __future__ import annotations

from ._counts import SKIPPED_ADVICE, WorkerCounts
from ._cpu import limit_cpu, pin_threads, usable_cores
from ._loop import OnResults, Worker
from ._metrics import DEFAULT_METRIC_KEYS, metrics_for_run

__all__ = ["DEFAULT_METRIC_KEYS", "SKIPPED_ADVICE", "OnResults", "Worker", "WorkerCounts", "limit_cpu",
           "metrics_for_run", "pin_threads", "usable_cores"]

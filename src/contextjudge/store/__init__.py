"""The results store: keep runs, cases, nodes, verdicts, metric results and judge usage in SQLite or PostgreSQL.

    from contextjudge.store import open_store
    store = open_store("results.db")                          # SQLite file (created when missing)
    store = open_store("postgresql+psycopg://me@db/evals")    # PostgreSQL (pip install 'contextjudge[postgres]')
    result = evaluate(cases, metrics, store=store, run_id="nightly-42")   # resumable: rerun with the same id
    store.load_run("nightly-42")                               # back as an EvaluationResult
    store.add_labels([{"input": "...", "labels": [1, 0, 1]}])    # gold labels on captured cases (contextjudge label)
    store.labelled_cases()                                     # the cases that carry labels, for calibrate

The documented read API (read-only, streaming; see ``_read.py``): ``store.runs()``, ``store.results(run=...,
metric=..., since=..., where=..., as_="records"|"pandas")``, ``store.cases(...)``, ``store.trend(by="day")``.
``open_store(url, read_only=True)`` reads a store you may not write to. ``trend``, the drop check and
``store.aggregate(by=...)`` sum in the database (schema 4). Retention (see ``_retention.py``):
``store.prune(older_than="90d", keep_runs=20, dry_run=True)``, ``store.set_retention(older_than="90d")``.
What each door uses of a store is a Protocol (``RunWrites``, ``RunReads``, ``CalibrationStore``, ``SpendWindows``;
see ``_protocols.py``), which ``ResultsStore`` satisfies.
"""

from ._base import store_label
from ._protocols import CalibrationStore, RunReads, RunWrites, SpendWindows
from ._schema import SCHEMA_VERSION
from ._store import DEFAULT_STORE_PATH, LabelMatch, PruneReport, ResultsStore, RunInfo, StoredCase, open_store
from ._trend import Drop, MetricWindow, Trend, TrendWindow, find_drops

__all__ = ["DEFAULT_STORE_PATH", "SCHEMA_VERSION", "CalibrationStore", "Drop", "LabelMatch", "MetricWindow",
           "PruneReport", "ResultsStore", "RunInfo", "RunReads", "RunWrites", "SpendWindows", "StoredCase", "Trend",
           "TrendWindow", "find_drops", "open_store", "store_label"]

"""The runner's writes to a store: a test case with its ranked nodes, a metric result with its verdicts, a judge
call's usage, and the cross-run verdict cache (``cj_verdict_cache``). Each write is one transaction; the work queue's
``complete`` writes its results through ``_write_result`` inside its own."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from .._result import MetricResult
from . import _schema as S
from ._base import StoreBase
from ._rows import _dumps, _loads, case_facets, case_rows, judge_call_row, result_rows

__all__ = ["WriteStore"]


class WriteStore(StoreBase):
    """Mixed into ``ResultsStore``: cases, results, judge calls and the verdict cache. ``self`` is the store."""

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
        row.update(self._facets(conn, run_id, key))
        if row["captured_at"] is None:  # no case row (a result written on its own): placed when it was judged
            row["captured_at"] = row["created_at"]
        conn.execute(self._q["verdicts_delete"], {"b_run": run_id, "b_key": key, "b_metric": result.name})
        self._upsert(conn, row)
        if vrows:
            conn.execute(self._q["verdict"], vrows)

    def _write_results_many(self, conn: Connection,
                            items: Sequence[tuple[str, str, Sequence[MetricResult]]]) -> None:
        """``_write_result`` of the results of several cases ``(run_id, key, results)`` with one statement per
        kind of row (each an executemany): the old verdicts of each (case, metric) deleted, the results upserted,
        the new verdicts inserted. A metric given twice for a case keeps its last result, as two writes would."""
        if not items:
            return
        self._facets_many(conn, [(run_id, key) for run_id, key, _r in items])
        rows: dict[tuple[str, str, str], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        for run_id, key, results in items:
            facets = self._facets(conn, run_id, key)
            for result in results:
                row, vrows = result_rows(run_id, key, result)
                row.update(facets)
                if row["captured_at"] is None:
                    row["captured_at"] = row["created_at"]
                rows[(run_id, key, result.name)] = (row, vrows)
        if not rows:
            return
        conn.execute(self._q["verdicts_delete"], [{"b_run": r, "b_key": k, "b_metric": m} for r, k, m in rows])
        conn.execute(self._q["result"], [row for row, _v in rows.values()])
        vrows_all = [v for _row, vrows in rows.values() for v in vrows]
        if vrows_all:
            conn.execute(self._q["verdict"], vrows_all)

    def _facets_many(self, conn: Connection, refs: Sequence[tuple[str, str]]) -> None:
        """Read the facets of the cases ``refs`` not kept yet, one query per run (``_facets`` then finds them)."""
        kept: dict[tuple[str, str], dict[str, Any]] = self.__dict__.setdefault("_facets_kept", {})
        missing: dict[str, list[str]] = {}
        for run_id, key in dict.fromkeys(refs):
            if (run_id, key) not in kept:
                missing.setdefault(run_id, []).append(key)
        if not missing:
            return
        if len(kept) + len(refs) >= self._FACETS_KEPT:
            kept.clear()
        for run_id, keys in missing.items():
            found = {}
            for start in range(0, len(keys), 500):
                found.update({row.case_key: case_facets(row.created_at, row.input, row.data)
                              for row in conn.execute(select(S.cases.c.case_key, S.cases.c.created_at,
                                                             S.cases.c.input, S.cases.c.data).where(
                                  S.cases.c.run_id == run_id, S.cases.c.case_key.in_(keys[start:start + 500])))})
            for key in keys:
                kept[(run_id, key)] = found.get(key) or {"captured_at": None, "retriever": None, "tags": None,
                                                         "input_key": None}

    _FACETS_KEPT = 4096

    def _facets(self, conn: Connection, run_id: str, key: str) -> dict[str, Any]:
        """The columns a result takes from its case (``case_facets``), read once per case and kept for the case's
        next results (a case row never changes once written)."""
        kept: dict[tuple[str, str], dict[str, Any]] = self.__dict__.setdefault("_facets_kept", {})
        got = kept.get((run_id, key))
        if got is None:
            case = conn.execute(self._q["case_facets"], {"b_run": run_id, "b_key": key}).first()
            got = ({"captured_at": None, "retriever": None, "tags": None, "input_key": None} if case is None
                   else case_facets(case.created_at, case.input, case.data))
            if len(kept) >= self._FACETS_KEPT:
                kept.clear()
            kept[(run_id, key)] = got
        return got

    def _upsert(self, conn: Connection, row: dict[str, Any]) -> None:
        """Write one result row, replacing the earlier one of its (run, case, metric)."""
        conn.execute(self._q["result"], row)

    def save_judge_call(self, run_id: str, event: dict[str, Any]) -> None:
        """Keep one judge call's usage: tokens, seconds, whether the cache answered it."""
        with self._guard("save a judge call"), self._begin() as conn:
            conn.execute(self._q["call"], judge_call_row(run_id, event))

    def get_verdict(self, key: str) -> dict[str, Any] | None:
        """A cached judge answer, or None."""
        with self._guard("read the verdict cache"), self._begin(write=False) as conn:
            row = conn.execute(self._q["cache_get"], {"b_key": key}).first()
        return None if row is None else _loads(row[0])

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        """Cache a judge answer for every later run that uses this store."""
        with self._guard("write the verdict cache"), self._begin() as conn:
            conn.execute(self._q["cache_put"], {"key": key, "value": _dumps(value), "created_at": time.time()})

    def get_verdicts(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The verdict-cache entries of ``keys`` found (key -> value), read in one transaction (batches of 500):
        calibration's judged labelled cases (``engine._judged``) read a whole refresh's worth at once."""
        out: dict[str, dict[str, Any]] = {}
        wanted = sorted(set(keys))
        c = S.verdict_cache.c
        with self._guard("read the verdict cache"), self._begin(write=False) as conn:
            for at in range(0, len(wanted), 500):
                for key, value in conn.execute(select(c.key, c.value).where(c.key.in_(wanted[at:at + 500]))).all():
                    got = _loads(value)
                    if isinstance(got, dict):
                        out[key] = got
        return out

    def put_verdicts(self, entries: dict[str, dict[str, Any]]) -> None:
        """Keep verdict-cache entries (key -> value) in one transaction, replacing those of the same keys (an
        entry may grow: calibration adds the rows of items labelled since)."""
        if not entries:
            return
        ins = self._dialect_insert(S.verdict_cache)
        upsert = ins.on_conflict_do_update(index_elements=["key"], set_={
            "value": ins.excluded.value, "created_at": ins.excluded.created_at})
        now = time.time()
        with self._guard("write the verdict cache"), self._begin() as conn:
            conn.execute(upsert, [{"key": k, "value": _dumps(v), "created_at": now} for k, v in entries.items()])

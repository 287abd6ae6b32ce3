"""One run of a store read back whole: its cases in order (with the labels attached to them), its results with
their verdicts, its judge usage and calls, as an ``EvaluationResult`` and as flat records for export. (The
streaming read API over many runs is ``_read.py``.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import and_, func, select, tuple_

from .._result import EvaluationResult, MetricResult, TestResult, Usage
from . import _schema as S
from ._rows import StoredCase, _case_input, _loads, result_from_row, stored_case
from ._runs import RunInfo, RunStore

__all__ = ["LoadStore"]


class LoadStore(RunStore):
    """Mixed into ``ResultsStore``: a run read back (it finds runs through ``RunStore``). ``self`` is the store."""

    def load_cases(self, run_id: str) -> list[StoredCase]:
        """The test cases of ``run_id`` in their order, with how many metric results each has. A case with labels
        attached by ``add_labels`` carries them in ``additional_metadata["gold_labels"]`` (replacing any the case
        came with)."""
        with self._guard("read test cases"), self._begin(write=False) as conn:
            counts: dict[str, int] = dict(conn.execute(select(S.results.c.case_key, func.count()).where(S.results.c.run_id == run_id)
                                       .group_by(S.results.c.case_key)).all())
            rows = conn.execute(select(S.cases).where(S.cases.c.run_id == run_id)
                                .order_by(S.cases.c.position, S.cases.c.created_at)).all()
            labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels).join(
                S.cases, S.cases.c.case_key == S.labels.c.case_key).where(S.cases.c.run_id == run_id)).all())
        return [stored_case(r, labels.get(r.case_key), scored=int(counts.get(r.case_key, 0))) for r in rows]

    def completed_results(self, run_id: str) -> dict[tuple[str, str], MetricResult]:
        """The results of ``run_id`` that need no rescoring (those without an error), by (case key, metric name)."""
        out = {}
        for (key, metric), result in self._results(run_id).items():
            if result.error is None:
                out[(key, metric)] = result
        return out

    def unscored_cases(self, run_id: str) -> list[StoredCase]:
        """Cases that have no metric result yet, e.g. captured in deferred mode."""
        return [c for c in self.load_cases(run_id) if c.scored == 0]

    def _results(self, run_id: str, verdicts: bool = True) -> dict[tuple[str, str], MetricResult]:
        with self._guard("read results"), self._begin(write=False) as conn:
            rows = conn.execute(select(*self._present(S.results)).where(S.results.c.run_id == run_id)).all()
            vrows = [] if not verdicts else conn.execute(
                select(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.data)
                .where(S.verdicts.c.run_id == run_id)
                .order_by(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.position)).all()
        by: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for vr in vrows:
            by.setdefault((vr.case_key, vr.metric), []).append(_loads(vr.data, {}))
        return {(r.case_key, r.metric): result_from_row(r, by.get((r.case_key, r.metric), [])) for r in rows}

    def usage(self, run_id: str) -> Usage:
        """Judge usage of ``run_id`` summed over its calls."""
        with self._guard("read judge usage"), self._begin(write=False) as conn:
            row = conn.execute(select(
                func.count(), func.coalesce(func.sum(S.judge_calls.c.input_tokens), 0),
                func.coalesce(func.sum(S.judge_calls.c.output_tokens), 0),
                func.coalesce(func.sum(S.judge_calls.c.seconds), 0.0),
                func.sum(S.judge_calls.c.cost),
            ).where(and_(S.judge_calls.c.run_id == run_id, S.judge_calls.c.cached.is_(False)))).one()
            hits = conn.execute(select(func.count()).where(
                and_(S.judge_calls.c.run_id == run_id, S.judge_calls.c.cached.is_(True)))).scalar()
        return Usage(calls=int(row[0]), cache_hits=int(hits or 0), input_tokens=int(row[1]),
                     output_tokens=int(row[2]), seconds=float(row[3]), cost=None if row[4] is None else float(row[4]))

    def judge_calls(self, run_id: str) -> list[dict[str, Any]]:
        """Every judge call of ``run_id``, in order."""
        with self._guard("read judge calls"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.judge_calls).where(S.judge_calls.c.run_id == run_id)
                                .order_by(S.judge_calls.c.id)).all()
        return [dict(r._mapping) for r in rows]

    def count_cases(self, run_id: str) -> int:
        """How many test cases ``run_id`` holds (counted in the database)."""
        with self._guard("count test cases"), self._begin(write=False) as conn:
            return int(conn.execute(select(func.count()).select_from(S.cases).where(
                S.cases.c.run_id == run_id)).scalar() or 0)

    def fill_verdicts(self, run_id: str, test_results: list[TestResult]) -> None:
        """Read the verdicts of ``test_results`` (cases of ``run_id`` loaded with ``load_run(verdicts=False)``)
        into their metric results, in place, 500 cases a query: a report reads only those of the cases it lists."""
        by_key = {getattr(tr.test_case, "id", None): tr for tr in test_results}
        keys = sorted(k for k in by_key if k is not None)
        got: dict[tuple[str, str], list[dict[str, Any]]] = {}
        with self._guard("read verdicts"), self._begin(write=False) as conn:
            for start in range(0, len(keys), 500):
                for vr in conn.execute(select(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.data).where(
                        S.verdicts.c.run_id == run_id, S.verdicts.c.case_key.in_(keys[start:start + 500]))
                        .order_by(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.position)).all():
                    got.setdefault((vr.case_key, vr.metric), []).append(_loads(vr.data, {}))
        for key in keys:
            for m in by_key[key].metrics_data:
                m.verdicts = got.get((key, m.name), [])

    def load_run(self, run_id: str | None = None, *, verdicts: bool = True) -> EvaluationResult:
        """A stored run as an ``EvaluationResult`` (cases in order, with their results and, unless ``verdicts`` is
        False, their verdicts: ``fill_verdicts`` reads them later for the cases that need them)."""
        run_id = self.resolve_run(run_id)
        info = self.run_info(run_id)
        results = self._results(run_id, verdicts=verdicts)
        order: dict[str, int] = {}
        for _key, metric in results:
            order.setdefault(metric, len(order))
        metric_order = _metric_order(info, list(order))
        by_case: dict[str, list[MetricResult]] = {}
        for (k, _), r in results.items():  # grouped once: a run's cases times its results would be quadratic
            by_case.setdefault(k, []).append(r)
        trs = []
        for i, sc in enumerate(self.load_cases(run_id)):
            mine = by_case.get(sc.case_key, [])
            mine.sort(key=lambda r: metric_order.get(r.name, 99))
            trs.append(TestResult(index=i, name=getattr(sc.test_case, "name", None), test_case=sc.test_case,
                                  metrics_data=mine))
        return EvaluationResult(test_results=trs, usage=self.usage(run_id), run_id=run_id,
                                duration_seconds=float(info.summary.get("duration_seconds") or 0.0))

    def iter_test_results(self, run_id: str, *, batch: int = 500) -> Iterator[TestResult]:
        """The cases of ``run_id`` in order with their results and verdicts, read ``batch`` cases at a time (what
        ``contextjudge export`` writes: memory holds one batch, whatever the run's size)."""
        info = self.run_info(run_id)
        order: dict[str, int] = _metric_order(info, [])
        c = S.cases
        after: tuple[int, str] | None = None
        index = 0
        while True:
            q = select(c).where(c.c.run_id == run_id)
            if after is not None:
                q = q.where(tuple_(c.c.position, c.c.case_key) > tuple_(*after))
            with self._guard("read test cases"), self._begin(write=False) as conn:
                rows = conn.execute(q.order_by(c.c.position, c.c.case_key).limit(batch)).all()
                if not rows:
                    return
                keys = [r.case_key for r in rows]
                results = conn.execute(select(*self._present(S.results)).where(S.results.c.run_id == run_id,
                                                               S.results.c.case_key.in_(keys))).all()
                vrows = conn.execute(select(S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.data).where(
                    S.verdicts.c.run_id == run_id, S.verdicts.c.case_key.in_(keys)).order_by(
                    S.verdicts.c.case_key, S.verdicts.c.metric, S.verdicts.c.position)).all()
                labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels).where(
                    S.labels.c.case_key.in_(keys))).all())
            verdicts: dict[tuple[str, str], list[Any]] = {}
            for vr in vrows:
                verdicts.setdefault((vr.case_key, vr.metric), []).append(vr.data)
            by_case: dict[str, list[MetricResult]] = {}
            for r in results:
                by_case.setdefault(r.case_key, []).append(result_from_row(r, verdicts.get((r.case_key, r.metric), [])))
            for row in rows:
                sc = stored_case(row, labels.get(row.case_key))
                mine = sorted(by_case.get(row.case_key, []), key=lambda m: (order.get(m.name, 99), m.name))
                yield TestResult(index=index, name=getattr(sc.test_case, "name", None), test_case=sc.test_case,
                                 metrics_data=mine)
                index += 1
            after = (rows[-1].position, rows[-1].case_key)

    def iter_records(self, run_id: str) -> Iterator[dict[str, Any]]:
        """One flat record per (case, metric) of ``run_id``, for export (streamed: ``iter_test_results``)."""
        for tr in self.iter_test_results(run_id):
            tc = tr.test_case
            metrics: list[MetricResult | None] = list(tr.metrics_data) or [None]
            for m in metrics:
                rec = {"run_id": run_id, "case_key": tc.id, "case_index": tr.index, "case_name": tr.name,
                       "input": _case_input(tc)}
                if m is None:
                    rec.update({"metric": None, "score": None})
                else:
                    rec.update({"metric": m.name, "score": m.score, "threshold": m.threshold, "success": m.success,
                                "reason": m.reason, "error": m.error, "evaluation_model": m.evaluation_model,
                                "judge_calls": m.usage.calls, "input_tokens": m.usage.input_tokens,
                                "output_tokens": m.usage.output_tokens})
                yield rec


def _metric_order(info: RunInfo, seen: list[str]) -> dict[str, int]:
    names: list[str] = []
    for m in info.config.get("metrics") or []:
        n = m.get("name") if isinstance(m, dict) else None
        if n and n not in names:
            names.append(n)
    for n in seen:
        if n not in names:
            names.append(n)
    return {n: i for i, n in enumerate(names)}

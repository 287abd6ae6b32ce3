"""Reads summed in the database (schema 4): ``store.aggregate(by=...)``, the sums ``trend`` and the drop check are
built from, and ``store.lowest(n)``, the lowest-scoring results of a range. They filter and group on the indexed
columns of ``cj_results`` (metric, run, judge identity, retriever, tags, input key, capture and judge time), so
memory holds the groups, never the rows, whatever the store's size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, select

from ..errors import ConfigurationError
from . import _schema as S
from ._read import ReadStore, _norm_where, parse_time, range_filters

__all__ = ["AggregateStore"]

# the ``where`` keys that reads compare in SQL (schema 4 columns); any other key is compared in Python
_SQL_KEYS = frozenset({"retriever", "tag", "tags", "run"})


def _sqlite_floor(x: Any) -> Any:
    """floor() for SQLite builds without its math functions: the integer part, one less below zero when not whole."""
    from sqlalchemy import Integer, case, cast  # noqa: PLC0415

    whole = cast(x, Integer)
    return case((x < whole, whole - 1), else_=whole)


class AggregateStore(ReadStore):
    """Mixed into ``ResultsStore`` (over ``ReadStore``): the read API's sums in SQL. ``self`` is the store."""

    # ------------------------------------------------------------------------------------------ aggregates in SQL
    def in_sql(self, where: Mapping[str, Any] | None = None) -> bool:
        """Whether reads with this ``where`` aggregate in the database: a store of schema 4 or later (its results
        carry the columns reads group by) and filters on the retriever, tags and run only (any other metadata key
        is compared in Python, on the streamed rows)."""
        if getattr(self, "schema_version", 0) < 4:
            return False
        return all(k in _SQL_KEYS for k in _norm_where(where))

    def aggregate(self, by: Any = ("metric",), *, metric: Any = None, since: Any = None, until: Any = None,
                  where: Mapping[str, Any] | None = None, run: Any = None, at: str = "captured",
                  window: str | None = None, scored: bool = False) -> list[dict[str, Any]]:
        """Results summed in the database, one dict per group: ``n`` (results with a score), ``total`` and
        ``total_sq`` (their sum and sum of squares), ``passed`` (of those with a score), ``errors`` (results whose
        judging failed), ``results`` (all), ``first``/``last`` (the earliest and latest time at ``at``), with the
        group's keys. ``by``: any of ``"metric"``, ``"run"`` (``run_id``), ``"judge"`` (``judge`` and
        ``judge_identity``), ``"retriever"``, ``"input"`` (``input_key``: the normalised input, what pairs cases
        across windows) and ``"window"`` (``window_start``: the UTC calendar window of ``window``, "hour", "day" or
        "week", the result falls in). Filters as ``results``; a ``where`` key other than retriever, tag or run is
        refused (``in_sql`` says which reads can aggregate). ``scored``: only results with a score.

        Memory holds the groups, never the rows: ``trend`` and the drop check are built from these."""
        from sqlalchemy import case, func  # noqa: PLC0415

        from ._trend import window_bounds  # noqa: PLC0415

        if at not in ("captured", "judged"):
            raise ConfigurationError(f"at={at!r}: use 'captured' (when the case was captured) or 'judged'.")
        if not self.in_sql(where):
            raise ConfigurationError("aggregate() needs a store of schema 4 (open it once for writing to upgrade it) "
                                     f"and filters on {', '.join(sorted(_SQL_KEYS))} only; read results() for others.")
        keys = [by] if isinstance(by, str) else list(by)
        r = S.results
        stamp = r.c.captured_at if at == "captured" else r.c.created_at
        cols: list[Any] = []
        for k in keys:
            if k == "metric":
                cols.append(r.c.metric)
            elif k == "run":
                cols.append(r.c.run_id)
            elif k == "judge":
                cols += [r.c.evaluation_model.label("judge"), r.c.judge_identity]
            elif k == "retriever":
                cols.append(r.c.retriever)
            elif k == "input":
                cols.append(r.c.input_key)
            elif k == "window":
                if window is None:
                    raise ConfigurationError("aggregate(by=('window', ...)) needs window='hour', 'day' or 'week'.")
                start, end = window_bounds(0.0, window)
                length, offset = end - start, start
                shifted = (stamp - offset) / length
                bucket = func.floor(shifted) if self._on_postgresql() else _sqlite_floor(shifted)
                cols.append(bucket.label("bucket"))
            else:
                raise ConfigurationError(f"aggregate(by={k!r}): group by metric, run, judge, retriever, input or "
                                         "window.")
        score = self._finite_score()
        scored_pass = case((and_(score.is_not(None), r.c.success), 1), else_=0)
        sums = [func.count(score).label("n"), func.sum(score).label("total"),
                func.sum(score * score).label("total_sq"), func.sum(scored_pass).label("passed"),
                func.count().label("results"), func.min(stamp).label("first"), func.max(stamp).label("last")]
        q = select(*cols, *sums)
        q = self._sql_filters(q, metric=metric, since=since, until=until, where=where, run=run, at=at)
        if scored:
            q = q.where(score.is_not(None))
        self._name_bad_scores(metric=metric, since=since, until=until, where=where, run=run, at=at)
        if cols:
            q = q.group_by(*cols)
        out = []
        with self._guard("aggregate results"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            for row in conn.execute(q):
                d = dict(row._mapping)
                n = int(d["n"] or 0)
                d.update(n=n, total=float(d["total"] or 0.0), total_sq=float(d["total_sq"] or 0.0),
                         passed=int(d["passed"] or 0), results=int(d["results"]), errors=int(d["results"]) - n)
                if "bucket" in d:
                    b = d.pop("bucket")
                    d["window_start"] = float(b) * length + offset
                if "run_id" in d and "run" not in d:
                    d["run"] = d["run_id"]
                out.append(d)
        return out

    def unplaced(self) -> int:
        """How many results have no capture time (``captured_at`` NULL): written by an older contextjudge after the
        store was upgraded, so the sums in SQL leave them out; said once per store in a warning. Opening the store
        for writing fills them (``backfill_old_writers``). One indexed count; 0 for a store before schema 4."""
        if getattr(self, "schema_version", 0) < 4:
            return 0
        from sqlalchemy import func  # noqa: PLC0415

        r = S.results
        with self._guard("count results"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            n = int(conn.execute(select(func.count()).select_from(r).where(r.c.captured_at.is_(None))).scalar() or 0)
        if n and not self.__dict__.get("_unplaced_said"):
            from ._base import redact  # noqa: PLC0415
            from ._read import logger  # noqa: PLC0415

            self.__dict__["_unplaced_said"] = True
            logger.warning("contextjudge: %d result(s) in the store %s have no capture time: an older contextjudge "
                           "wrote them after the store was upgraded (a process started before the upgrade, still "
                           "writing). Trends and the drop check leave them out; opening the store for writing with this "
                           "version (a worker, `contextjudge score`, open_store(url)) fills them in. Upgrade every "
                           "process that writes to it.", n, redact(self.url))  # type: ignore[attr-defined]
        return n

    def _finite_score(self) -> Any:
        """``cj_results.score`` as the sums read it: on PostgreSQL a NaN or infinity (written there by another
        program; SQLite stores NaN as NULL) is no score, so it is counted as an error, as ``iter_results`` does."""
        from sqlalchemy import case  # noqa: PLC0415

        r = S.results
        if not self._on_postgresql():
            return r.c.score
        return case((r.c.score.in_([float("nan"), float("inf"), float("-inf")]), None), else_=r.c.score)

    def _name_bad_scores(self, **filters: Any) -> None:
        """Name (in a warning, once per row and store) the results in range whose score is not a number: what
        ``iter_results`` says of them on the streamed path."""
        if not self._on_postgresql():
            return
        from ._base import redact  # noqa: PLC0415
        from ._read import _NAMED_BAD_SCORES, logger  # noqa: PLC0415

        r = S.results
        q = select(r.c.run_id, r.c.case_key, r.c.metric, r.c.score).where(
            r.c.score.in_([float("nan"), float("inf"), float("-inf")]))
        q = self._sql_filters(q, **filters).limit(_NAMED_BAD_SCORES + 1)
        with self._guard("check the scores"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            rows = conn.execute(q).all()
        warned = self.__dict__.setdefault("_bad_scores_named", set())
        for row in rows[:_NAMED_BAD_SCORES]:
            if (row.run_id, row.case_key, row.metric) in warned:
                continue
            warned.add((row.run_id, row.case_key, row.metric))
            logger.warning("contextjudge: in the store %s, skipped the score of run %s, case %s, metric %r: "
                           "%s is not a score (another program wrote it there?); counted as an error",
                           redact(self.url), row.run_id, row.case_key, row.metric, row.score)  # type: ignore[attr-defined]

    def _on_postgresql(self) -> bool:
        return bool(self.engine.dialect.name == "postgresql")  # type: ignore[attr-defined]

    def _sql_filters(self, q: Any, *, metric: Any, since: Any, until: Any, where: Mapping[str, Any] | None,
                     run: Any, at: str) -> Any:
        """``q`` (a select over cj_results) with the filters of the read API as WHERE clauses on indexed columns."""
        from sqlalchemy import func, or_  # noqa: PLC0415

        r = S.results
        stamp = r.c.captured_at if at == "captured" else r.c.created_at
        lo, hi = parse_time(since, "since"), parse_time(until, "until")
        # a result an older contextjudge wrote after the store was upgraded has no capture time (nor the other read
        # columns): left out of every sum, counted (``unplaced``) and said; opening the store for writing fills it
        q = q.where(r.c.captured_at.is_not(None))
        conds = _norm_where(where)
        run_refs = conds.pop("run", None)
        runs = self._run_scope(run if run is not None else run_refs)
        q = range_filters(q, runs=runs, metric=metric, lo=lo, hi=hi, stamp=stamp)
        find = func.strpos if self._on_postgresql() else func.instr
        for key, values in conds.items():
            if key == "retriever":
                q = q.where(r.c.retriever.in_(values))
            elif key in ("tag", "tags"):
                q = q.where(or_(*[find(r.c.tags, S.TAG_SEP + v.replace(S.TAG_SEP, " ") + S.TAG_SEP) > 0
                                  for v in values]))
        return q

    def lowest(self, n: int, *, metric: Any = None, since: Any = None, until: Any = None,
               where: Mapping[str, Any] | None = None, run: Any = None, at: str = "captured") -> list[dict[str, Any]]:
        """The ``n`` lowest-scoring results in a range (score, then case key), with their case's input: what the
        drop check shows, read with ORDER BY ... LIMIT."""
        r, c = S.results, S.cases
        q = select(r.c.run_id, r.c.case_key, r.c.metric, r.c.score, r.c.retriever, c.c.input).select_from(
            r.outerjoin(c, and_(c.c.run_id == r.c.run_id, c.c.case_key == r.c.case_key))).where(
            self._finite_score().is_not(None))
        q = self._sql_filters(q, metric=metric, since=since, until=until, where=where, run=run, at=at)
        with self._guard("read results"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            rows = conn.execute(q.order_by(r.c.score, r.c.case_key).limit(max(0, int(n)))).all()
        return [dict(row._mapping) for row in rows]

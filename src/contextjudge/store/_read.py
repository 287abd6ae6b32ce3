"""The store's documented read API: ``runs()``, ``results()``, ``cases()`` and ``trend()``.

    import contextjudge
    store = contextjudge.open_store("postgresql+psycopg://me@db/evals", read_only=True)
    for row in store.results(metric="Contextual Relevancy", since="7d"):      # one dict per (case, metric)
        ...
    df = store.results(since="2026-11-01", where={"retriever": "policy_search"}, as_="pandas")
    store.trend(by="day", since="14d").to_dict()                               # what `contextjudge trend` prints

Each is read-only and streams: rows come from a server-side cursor (PostgreSQL) or SQLite's own stepping, a batch at
a time, so a store of millions of results is never loaded whole (``as_="pandas"`` builds the frame from that stream,
so the frame itself is what you hold). ``trend()`` keeps only running sums per window and metric.

Time: a result is placed by when its case was captured (``at="captured"``, ``cj_cases.created_at``: the traffic's
own time) or when it was judged (``at="judged"``, ``cj_results.created_at``). ``since``/``until`` take seconds
since the epoch, a ``datetime`` or ``date``, an ISO date or time (``"2026-11-20"``, UTC when no zone), or a span
back from now (``"90m"``, ``"24h"``, ``"7d"``, ``"2w"``).

``where``: ``{"retriever": name}`` (the retriever the capture recorded), ``{"tag": tag}`` (a case tag, or a tag of
the call the capture recorded), ``{"run": id or name}``, and any other key compared with the case's
``additional_metadata`` (as text). Several keys must all hold.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import and_, select

from ..errors import ConfigurationError
from . import _schema as S
from ._base import redact
from ._rows import meta_of as _meta_of

logger = logging.getLogger("contextjudge")
_NAMED_BAD_SCORES = 10  # rows named one by one in the warnings of one read; the rest are counted

__all__ = ["ReadStore", "parse_time", "range_filters", "record_matches", "run_judges"]

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AS = ("records", "pandas")
def parse_time(value: Any, what: str = "since", *, now: float | None = None) -> float | None:
    """Seconds since the epoch from a number, a ``datetime``/``date``, an ISO text (UTC when it names no zone) or a
    span back from now (``"7d"``); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigurationError(f"{what}={value!r}: give a time (seconds since the epoch, a datetime, "
                                 "'2026-11-20', or a span back from now such as '7d').")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, _dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=_dt.UTC)).timestamp()
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC).timestamp()
    if isinstance(value, str):
        m = _SPAN.match(value)
        if m:
            return (time.time() if now is None else now) - float(m.group(1)) * _UNIT[m.group(2).lower()]
        text = value.strip().replace("Z", "+00:00")
        try:
            got = _dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return (got if got.tzinfo else got.replace(tzinfo=_dt.UTC)).timestamp()
    raise ConfigurationError(f"{what}={value!r} is not a time: give seconds since the epoch, a datetime, an ISO "
                             "date or time ('2026-11-20', '2026-11-20T08:00'), or a span back from now ('24h', "
                             "'7d', '2w').")


def _norm_where(where: Mapping[str, Any] | None) -> dict[str, list[str]]:
    if where is None:
        return {}
    if not isinstance(where, Mapping):
        raise ConfigurationError(f"where= takes a dict such as {{'retriever': 'policy_search', 'tag': 'prod'}}, not "
                                 f"{type(where).__name__}.")
    out: dict[str, list[str]] = {}
    for k, v in where.items():
        vals = list(v) if isinstance(v, (list, tuple, set, frozenset)) else [v]
        out[str(k)] = [str(x) for x in vals]
    return out


def record_matches(meta: dict[str, Any], tags: list[str], where: dict[str, list[str]]) -> bool:
    """Whether a case (its additional_metadata and tags) passes every ``where`` item (any of an item's values)."""
    for key, values in where.items():
        if key in ("tag", "tags"):
            if not any(t in values for t in tags):
                return False
            continue
        got = meta.get(key)
        if isinstance(got, (list, tuple)):
            if not any(str(g) in values for g in got):
                return False
        elif got is None or str(got) not in values:
            return False
    return True


def _as(rows: Iterator[dict[str, Any]], as_: str) -> Any:
    if as_ == "records":
        return rows
    try:
        import pandas as pd  # noqa: PLC0415 - optional
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigurationError("as_='pandas' needs pandas: pip install 'contextjudge[pandas]' (or use "
                                 "as_='records', which streams dicts).") from exc
    return pd.DataFrame.from_records(list(rows))


def _check_as(as_: str) -> None:
    if as_ not in _AS:
        raise ConfigurationError(f"as_={as_!r}: use 'records' (an iterator of dicts, streamed) or 'pandas' (a "
                                 "DataFrame).")


def run_judges(info: Any) -> list[str]:
    """The judges that scored a run: those its results name (kept in its summary when it ends), else those it began
    with."""
    scored = (info.summary or {}).get("judges") if isinstance(info.summary, dict) else None
    if scored:
        return [str(j) for j in scored]
    return [str(j.get("name", "?")) for j in info.judges or [] if isinstance(j, dict)]


def range_filters(q: Any, *, runs: Any, metric: Any, lo: float | None, hi: float | None, stamp: Any) -> Any:
    """``q`` (a select over cj_results) limited to the runs (None: all), the metric name(s) (None: all) and the time
    range [lo, hi) of ``stamp`` (when captured or when judged): what every read of results filters on."""
    r = S.results
    if runs is not None:
        q = q.where(r.c.run_id.in_(runs))
    if metric is not None:
        names = list(metric) if isinstance(metric, (list, tuple, set)) else [metric]
        q = q.where(r.c.metric.in_([str(m) for m in names]))
    if lo is not None:
        q = q.where(stamp >= lo)
    if hi is not None:
        q = q.where(stamp < hi)
    return q


class ReadStore:
    """Mixed into ``ResultsStore``: the documented read API. ``self`` is the store."""

    _BATCH = 1000

    def _stream(self, query: Any) -> Iterator[Any]:
        """Rows of ``query``, a batch at a time, from one read transaction held while the caller iterates."""
        with self._guard("read the store"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            result = conn.execution_options(stream_results=True, yield_per=self._BATCH).execute(query)
            yield from result

    def _run_scope(self, run: Any) -> list[str] | None:
        if run is None:
            return None
        refs = run if isinstance(run, (list, tuple, set)) else [run]
        return [self.resolve_run(str(r)) for r in refs]  # type: ignore[attr-defined]

    # ------------------------------------------------------------------------------------------ runs
    def runs(self, *, since: Any = None, name: str | None = None, as_: str = "records") -> Any:
        """Every run (newest first) as dicts: id, name, status, created/finished (seconds since the epoch), the
        judges that scored it, how many cases and results it holds. ``since``: runs created since then; ``name``:
        runs of that name."""
        _check_as(as_)
        lo = parse_time(since)
        infos = self.list_runs()  # type: ignore[attr-defined]  # one row per run: small next to the results
        by_results = self.result_judges([r.run_id for r in infos if not run_judges(r)])
        def rows() -> Iterator[dict[str, Any]]:
            for r in infos:
                if lo is not None and r.created_at < lo:
                    continue
                if name is not None and r.name != name:
                    continue
                yield {"run_id": r.run_id, "name": r.name, "status": r.status, "created_at": r.created_at,
                       "finished_at": r.finished_at, "judges": run_judges(r) or by_results.get(r.run_id, []), "cases": r.cases,
                       "results": r.results, "mode": (r.config or {}).get("mode")}
        return _as(rows(), as_)

    def result_judges(self, runs: list[str] | None = None) -> dict[str, list[str]]:
        """The judges that wrote each run's results (``evaluation_model``), by run id (of ``runs``, else every
        run): what names the judge of a run a worker judges, whose own configuration names none."""
        q = select(S.results.c.run_id, S.results.c.evaluation_model).where(
            S.results.c.evaluation_model.is_not(None)).distinct()
        if runs is not None:
            if not runs:
                return {}
            q = q.where(S.results.c.run_id.in_(list(runs)))
        out: dict[str, list[str]] = {}
        with self._guard("read results"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            for run_id, judge in conn.execute(q).all():
                out.setdefault(run_id, []).append(str(judge))
        return {k: sorted(v) for k, v in out.items()}

    # ------------------------------------------------------------------------------------------ results
    def _results_query(self, runs: list[str] | None, metric: Any, lo: float | None, hi: float | None,
                       at: str, with_data: bool) -> Any:
        r, c = S.results, S.cases
        stamp = c.c.created_at if at == "captured" else r.c.created_at
        cols = [r.c.run_id, r.c.case_key, r.c.metric, r.c.score, r.c.threshold, r.c.success, r.c.error,
                r.c.error_type, r.c.evaluation_model, r.c.details, r.c.gold_score, r.c.created_at.label("judged_at"),
                c.c.created_at.label("captured_at"), c.c.input, c.c.name.label("case_name")]
        if with_data:
            cols.append(c.c.data)
        q = select(*cols).select_from(r.join(c, and_(c.c.run_id == r.c.run_id, c.c.case_key == r.c.case_key)))
        q = range_filters(q, runs=runs, metric=metric, lo=lo, hi=hi, stamp=stamp)
        return q.order_by(stamp, r.c.run_id, r.c.case_key, r.c.metric)

    def iter_results(self, *, run: Any = None, metric: Any = None, since: Any = None, until: Any = None,
                     where: Mapping[str, Any] | None = None, at: str = "captured", light: bool = False
                     ) -> Iterator[dict[str, Any]]:
        """``results(...)`` as an iterator of dicts, always (what ``trend`` and the CLI read). ``light``: without
        the case's retriever and tags unless ``where`` needs them (the case's stored JSON is then not read)."""
        if at not in ("captured", "judged"):
            raise ConfigurationError(f"at={at!r}: use 'captured' (when the case was captured) or 'judged'.")
        lo, hi = parse_time(since, "since"), parse_time(until, "until")
        conds = _norm_where(where)
        run_refs = conds.pop("run", None)
        runs = self._run_scope(run if run is not None else run_refs)
        with_data = bool(conds) or not light
        query = self._results_query(runs, metric, lo, hi, at, with_data=with_data)
        bad = 0
        for row in self._stream(query):
            meta, tags = _meta_of(row.data) if with_data else ({}, [])
            if conds and not record_matches(meta, tags, conds):
                continue
            score, error, error_type = row.score, row.error, row.error_type
            if score is not None and not math.isfinite(score):  # NaN or infinity, written by another program
                bad += 1
                if bad <= _NAMED_BAD_SCORES:
                    logger.warning("contextjudge: in the store %s, skipped the score of run %s, case %s, metric %r: "
                                   "%s is not a score (another program wrote it there?); counted as an error",
                                   redact(self.url), row.run_id, row.case_key, row.metric,  # type: ignore[attr-defined]
                                   score)
                error = f"the store holds the score {score} for this result, which is not a number: skipped"
                score, error_type = None, "InvalidStoredScore"
            details: dict[str, Any] = {}
            if row.details:
                try:
                    details = json.loads(row.details) or {}
                except ValueError:
                    details = {}
            retriever = meta.get("retriever")
            yield {"run_id": row.run_id, "case_key": row.case_key, "case_name": row.case_name, "input": row.input,
                   "metric": row.metric, "score": score, "threshold": row.threshold,
                   "success": bool(row.success) and score is not None, "error": error, "error_type": error_type,
                   "judge": row.evaluation_model,
                   "judge_identity": details.get("judge_identity") if isinstance(details, dict) else None,
                   "retriever": None if retriever is None else str(retriever), "tags": tags,
                   "gold_score": row.gold_score, "captured_at": float(row.captured_at),
                   "judged_at": float(row.judged_at)}
        if bad > _NAMED_BAD_SCORES:
            logger.warning("contextjudge: skipped %d more result(s) of %s whose score is not a number",
                           bad - _NAMED_BAD_SCORES, redact(self.url))  # type: ignore[attr-defined]

    def results(self, *, run: Any = None, metric: Any = None, since: Any = None, until: Any = None,
                where: Mapping[str, Any] | None = None, at: str = "captured", as_: str = "records") -> Any:
        """Metric results, oldest first, one per (case, metric): ``run_id``, ``case_key``, ``case_name``,
        ``input``, ``metric``, ``score`` (None when judging failed: ``error`` says why), ``threshold``,
        ``success``, ``judge`` (its name), ``judge_identity`` (what changes its answers: model, parameters,
        calibration), ``retriever``, ``tags``, ``gold_score``, ``captured_at``, ``judged_at``.

        ``run``: a run id, name or prefix (or a list); ``metric``: a metric name (or a list); ``since``/``until``
        and ``at``: the time range (see the module); ``where``: filters on the case (retriever, tag, metadata).
        ``as_="records"`` (an iterator of dicts, streamed) or ``"pandas"`` (a DataFrame)."""
        _check_as(as_)
        return _as(self.iter_results(run=run, metric=metric, since=since, until=until, where=where, at=at), as_)

    # ------------------------------------------------------------------------------------------ cases
    def cases(self, *, run: Any = None, since: Any = None, until: Any = None, where: Mapping[str, Any] | None = None,
              as_: str = "records") -> Any:
        """Captured or evaluated test cases, oldest first: ``run_id``, ``case_key``, ``name``, ``input``,
        ``actual_output``, ``expected_output``, ``retriever``, ``tags``, ``metadata`` (the case's
        additional_metadata), ``captured_at``, ``queue_state`` (queued / claimed / done / skipped, or None when no
        worker was asked) and ``queue_note`` (why a case was skipped). Filters as ``results``."""
        _check_as(as_)
        lo, hi = parse_time(since, "since"), parse_time(until, "until")
        conds = _norm_where(where)
        runs = self._run_scope(run if run is not None else conds.pop("run", None))
        c, q = S.cases, S.queue
        query = select(c.c.run_id, c.c.case_key, c.c.name, c.c.input, c.c.actual_output, c.c.expected_output,
                       c.c.data, c.c.created_at, q.c.state, q.c.note).select_from(
            c.outerjoin(q, and_(q.c.run_id == c.c.run_id, q.c.case_key == c.c.case_key)))
        if runs is not None:
            query = query.where(c.c.run_id.in_(runs))
        if lo is not None:
            query = query.where(c.c.created_at >= lo)
        if hi is not None:
            query = query.where(c.c.created_at < hi)
        query = query.order_by(c.c.created_at, c.c.run_id, c.c.position)

        def rows() -> Iterator[dict[str, Any]]:
            for row in self._stream(query):
                meta, tags = _meta_of(row.data)
                if conds and not record_matches(meta, tags, conds):
                    continue
                retriever = meta.get("retriever")
                yield {"run_id": row.run_id, "case_key": row.case_key, "name": row.name, "input": row.input,
                       "actual_output": row.actual_output, "expected_output": row.expected_output,
                       "retriever": None if retriever is None else str(retriever), "tags": tags, "metadata": meta,
                       "captured_at": float(row.created_at), "queue_state": row.state, "queue_note": row.note}
        return _as(rows(), as_)

    def answer_lengths(self, judge: str, *, min_calls: int = 20) -> dict[str, float] | None:
        """The mean answer (output) tokens per call of ``judge`` (its name as results record it) by task, from
        the judge calls this store recorded (not those the cache answered); None when it has fewer than
        ``min_calls`` calls. ``contextjudge estimate --store`` prices the expected cost with it."""
        from sqlalchemy import func  # noqa: PLC0415

        j = S.judge_calls
        q = (select(j.c.task, func.count(), func.avg(j.c.output_tokens))
             .where(j.c.judge == judge, j.c.cached.is_(False), j.c.output_tokens > 0).group_by(j.c.task))
        with self._guard("read judge calls"), self._begin(write=False) as conn:  # type: ignore[attr-defined]
            rows = conn.execute(q).all()
        if sum(int(r[1]) for r in rows) < min_calls:
            return None
        return {str(r[0]): float(r[2]) for r in rows if r[2] is not None}

    # ------------------------------------------------------------------------------------------ trend
    def trend(self, *, metric: Any = None, by: str = "day", since: Any = None, until: Any = None,
              where: Mapping[str, Any] | None = None, run: Any = None, at: str = "captured",
              min_cases: int | None = None) -> Any:
        """Per window (``by``: ``"hour"``, ``"day"`` or ``"week"``, UTC calendar windows; weeks start on Monday)
        and metric: the mean score with its 95% interval, the pass rate with its interval, the judged and failed
        cases, and the judges used; a ``Trend`` (``.windows``, ``.to_dict()``). A window with fewer than
        ``min_cases`` judged cases of a metric (default 10) says so instead of giving a mean."""
        from ._trend import DEFAULT_MIN_CASES, build_trend, trend_from_groups, window_bounds  # noqa: PLC0415

        sums: Any = self  # with AggregateStore's in_sql and aggregate (ResultsStore composes both)
        if sums.in_sql(where):
            window_bounds(0.0, by)  # a clear error for a window it does not know
            groups = sums.aggregate(("window", "metric", "judge"), metric=metric, since=since, until=until,
                                    where=where, run=run, at=at, window=by)
            trend = trend_from_groups(groups, by=by,
                                      min_cases=DEFAULT_MIN_CASES if min_cases is None else int(min_cases),
                                      since=parse_time(since, "since"), until=parse_time(until, "until"),
                                      filters=dict(where or {}), at=at)
        else:
            rows = self.iter_results(run=run, metric=metric, since=since, until=until, where=where, at=at,
                                     light=True)
            trend = build_trend(rows, by=by, min_cases=DEFAULT_MIN_CASES if min_cases is None else int(min_cases),
                                since=parse_time(since, "since"), until=parse_time(until, "until"),
                                filters=dict(where or {}), at=at)
        trend.goldens_changes = self.goldens_changes(trend.since, trend.until)  # type: ignore[attr-defined]
        trend.unplaced = sums.unplaced() if sums.in_sql(where) else 0
        return trend

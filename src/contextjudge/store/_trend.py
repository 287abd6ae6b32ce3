"""Trends over production results, and the drop check of ``contextjudge trend --fail-on-drop``.

``build_trend(rows, by=...)`` folds a stream of result records (``ReadStore.iter_results``) into calendar windows,
keeping only running sums per window and metric (n, sum, sum of squares, passes, errors, judges), so a store of any
size is read once with constant memory per window. Intervals come from ``contextjudge.stats`` as everywhere else.

``find_drops(store, trend, ...)`` compares the latest window with a baseline (the window before, the week before, or
the N windows before) per metric:

- the judge first: when the judge that scored a metric changed between the baseline and the latest window (another
  model, other parameters, another calibration file: ``judge_identity`` of the results), the metric is reported as
  *judge changed* and never tested, since a difference then measures the judge, not the retriever;
- the cases of one (normalised) input are one cluster, not independent draws: windows are paired by input when
  enough inputs appear in both (a replayed golden set, popular questions), one pair per input; otherwise the two
  means are compared with cluster-robust variances. And a window is not a pooled sample of a fixed population: the
  traffic mix shifts from day to day, so with three or more windows before the latest, the spread of their means
  bounds the variance of the difference from below (``drop_difference``). ``benchmarks/trend_alarms.py``
  measures the false-alarm rate and the power of this test on each traffic shape (docs/trend-alarms.md);
- several metrics are tested at once, so each interval is widened to a Bonferroni level (1 - 0.05 / metrics
  tested): the chance that any metric is called worse when none is stays at 5%;
- a drop is the whole interval below zero (and below ``-min_drop``, when given); it comes with the lowest-scoring
  cases of the latest window.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from ..stats import LEVEL, Interval, moments_interval, proportion_interval, t_quantile

__all__ = ["DEFAULT_MIN_CASES", "Drop", "MetricWindow", "Trend", "TrendWindow", "build_trend", "drop_difference",
           "find_drops", "side_of", "trend_from_groups", "window_bounds"]

DEFAULT_MIN_CASES = 10
HOUR, DAY, WEEK = 3600.0, 86400.0, 7 * 86400.0
_LENGTH = {"hour": HOUR, "day": DAY, "week": WEEK}
_MONDAY = 4 * DAY  # the epoch was a Thursday: weeks start 4 days after it
# at least this many inputs in both windows, and this share of the latest window's cases, to pair by input
MIN_PAIRS = 10
MIN_PAIRED_SHARE = 0.5


def window_bounds(ts: float, by: str) -> tuple[float, float]:
    """The UTC calendar window (start, end) of ``by`` that holds ``ts``."""
    length = _LENGTH.get(by)
    if length is None:
        raise ConfigurationError(f"by={by!r}: windows are 'hour', 'day' or 'week'.")
    offset = _MONDAY if by == "week" else 0.0
    start = (ts - offset) // length * length + offset
    return start, start + length


def _label(start: float, by: str) -> str:
    d = _dt.datetime.fromtimestamp(start, tz=_dt.UTC)
    if by == "hour":
        return d.strftime("%Y-%m-%d %H:00")
    if by == "week":
        return "week of " + d.strftime("%Y-%m-%d")
    return d.strftime("%Y-%m-%d")


@dataclass
class MetricWindow:
    """One metric in one window: ``n`` judged cases (a score), ``errors`` (judging failed), ``mean`` and
    ``pass_rate`` with their 95% intervals (None when fewer than ``min_cases``: ``enough`` is False), and the
    judges that scored it (name -> results; ``judge_ids``: their identities)."""

    metric: str
    n: int
    errors: int
    mean: Interval | None
    pass_rate: Interval | None
    enough: bool
    judges: dict[str, int] = field(default_factory=dict)
    judge_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "judged": self.n, "errors": self.errors, "enough_cases": self.enough,
                "mean": None if self.mean is None else self.mean.to_dict(),
                "pass_rate": None if self.pass_rate is None else self.pass_rate.to_dict(),
                "judges": dict(self.judges), "judge_identities": list(self.judge_ids)}


@dataclass
class TrendWindow:
    start: float
    end: float
    label: str
    metrics: dict[str, MetricWindow] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "label": self.label,
                "metrics": {k: v.to_dict() for k, v in self.metrics.items()}}


@dataclass
class Trend:
    """Windows oldest first, each with its metrics; ``metrics``: every metric seen; ``judge_changes``: (window
    label, metric, judges before, judges after) wherever the judges of a metric differ from the window before."""

    by: str
    windows: list[TrendWindow]
    metrics: list[str]
    min_cases: int
    since: float | None = None
    until: float | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    at: str = "captured"
    # where the goldens changed between runs in this range (``ResultsStore.goldens_changes``): a difference across
    # such a change measures the questions as much as the app
    goldens_changes: list[dict[str, Any]] = field(default_factory=list)
    # results left out because they have no capture time (an older contextjudge wrote them after the store was
    # upgraded; opening the store for writing fills them in): ``AggregateStore.unplaced``
    unplaced: int = 0

    @property
    def judge_changes(self) -> list[tuple[str, str, list[str], list[str]]]:
        out = []
        last: dict[str, MetricWindow] = {}
        for w in self.windows:
            for name, mw in w.metrics.items():
                prev = last.get(name)
                if prev is not None and set(prev.judge_ids) != set(mw.judge_ids):
                    before, after = sorted(prev.judges), sorted(mw.judges)
                    if before == after:  # the same model, other parameters or calibration: say which identity
                        before = [f"{j} ({i[:8]})" for j in before for i in sorted(prev.judge_ids)]
                        after = [f"{j} ({i[:8]})" for j in after for i in sorted(mw.judge_ids)]
                    out.append((w.label, name, before, after))
                last[name] = mw
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "at": self.at, "since": self.since, "until": self.until, "filters": self.filters,
                "min_cases": self.min_cases, "metrics": list(self.metrics),
                "windows": [w.to_dict() for w in self.windows],
                "judge_changes": [{"window": w, "metric": m, "before": b, "after": a}
                                  for w, m, b, a in self.judge_changes],
                "goldens_changes": list(self.goldens_changes), "unplaced": self.unplaced}


class _Acc:
    __slots__ = ("n", "s", "s2", "passed", "errors", "judges", "ids")

    def __init__(self) -> None:
        self.n = 0
        self.s = 0.0
        self.s2 = 0.0
        self.passed = 0
        self.errors = 0
        self.judges: dict[str, int] = {}
        self.ids: dict[str, None] = {}

    def add(self, rec: dict[str, Any]) -> None:
        score = rec.get("score")
        if score is None:
            self.errors += 1
            return
        x = float(score)
        self.n += 1
        self.s += x
        self.s2 += x * x
        if rec.get("success"):
            self.passed += 1
        name = rec.get("judge") or "?"
        self.judges[name] = self.judges.get(name, 0) + 1
        self.ids[judge_key(rec)] = None

    def add_sums(self, g: dict[str, Any]) -> None:
        """A group's sums (``ReadStore.aggregate``) instead of one record."""
        self.errors += int(g["errors"])
        n = int(g["n"])
        if n == 0:
            return
        self.n += n
        self.s += float(g["total"])
        self.s2 += float(g["total_sq"])
        self.passed += int(g["passed"])
        name = g.get("judge") or "?"
        self.judges[name] = self.judges.get(name, 0) + n
        self.ids[judge_key(g)] = None


def judge_key(rec: dict[str, Any]) -> str:
    """What identifies the judge of a result: its identity when the result records one, else its name."""
    return str(rec.get("judge_identity") or rec.get("judge") or "?")


def build_trend(rows: Iterable[dict[str, Any]], *, by: str = "day", min_cases: int = DEFAULT_MIN_CASES,
                since: float | None = None, until: float | None = None, filters: dict[str, Any] | None = None,
                at: str = "captured") -> Trend:
    """Fold result records (oldest first or not) into windows of ``by``."""
    if by not in _LENGTH:
        raise ConfigurationError(f"by={by!r}: windows are 'hour', 'day' or 'week'.")
    if min_cases < 2:
        raise ConfigurationError(f"min_cases={min_cases}: a window needs at least 2 cases for an interval.")
    stamp = "captured_at" if at == "captured" else "judged_at"
    accs: dict[float, dict[str, _Acc]] = {}
    metrics: dict[str, None] = {}
    for rec in rows:
        start, _ = window_bounds(float(rec[stamp]), by)
        acc = accs.setdefault(start, {}).setdefault(rec["metric"], _Acc())
        acc.add(rec)
        metrics.setdefault(rec["metric"], None)
    return _windows(accs, metrics, by=by, min_cases=min_cases, since=since, until=until, filters=filters, at=at)


def _windows(accs: dict[float, dict[str, _Acc]], metrics: dict[str, None], *, by: str, min_cases: int,
             since: float | None, until: float | None, filters: dict[str, Any] | None, at: str) -> Trend:
    windows = []
    for start in sorted(accs):
        _, end = window_bounds(start, by)
        tw = TrendWindow(start, end, _label(start, by))
        for name, a in sorted(accs[start].items()):
            enough = a.n >= min_cases
            mean = moments_interval(a.n, a.s, a.s2) if enough else None
            rate = proportion_interval(a.passed, a.n) if enough else None
            tw.metrics[name] = MetricWindow(name, a.n, a.errors, mean, rate, enough, dict(a.judges), sorted(a.ids))
        windows.append(tw)
    return Trend(by=by, windows=windows, metrics=sorted(metrics), min_cases=min_cases, since=since, until=until,
                 filters=dict(filters or {}), at=at)


def trend_from_groups(groups: Iterable[dict[str, Any]], *, by: str = "day", min_cases: int = DEFAULT_MIN_CASES,
                      since: float | None = None, until: float | None = None, filters: dict[str, Any] | None = None,
                      at: str = "captured") -> Trend:
    """``build_trend`` from sums the database made (``ReadStore.aggregate`` by window, metric and judge): the same
    windows, means and intervals, with memory for the groups only."""
    if by not in _LENGTH:
        raise ConfigurationError(f"by={by!r}: windows are 'hour', 'day' or 'week'.")
    if min_cases < 2:
        raise ConfigurationError(f"min_cases={min_cases}: a window needs at least 2 cases for an interval.")
    accs: dict[float, dict[str, _Acc]] = {}
    metrics: dict[str, None] = {}
    for g in groups:
        acc = accs.setdefault(float(g["window_start"]), {}).setdefault(g["metric"], _Acc())
        acc.add_sums(g)
        metrics.setdefault(g["metric"], None)
    return _windows(accs, metrics, by=by, min_cases=min_cases, since=since, until=until, filters=filters, at=at)


# ---------------------------------------------------------------------------------------------- drops
@dataclass
class Drop:
    """The latest window against its baseline for one metric. ``status``: ``"drop"`` (significantly worse),
    ``"no drop"``, ``"judge changed"`` (not tested: the difference would measure the judge), ``"too few cases"``
    (not tested). ``difference``: latest - baseline with its interval at ``level`` (Bonferroni-adjusted);
    ``method``: ``"paired"`` (by input) or ``"unpaired"`` (cluster-robust); ``spread``: what its spread counts. ``worst``: the lowest-scoring cases of the latest
    window (input, score, run id, case key)."""

    metric: str
    status: str
    baseline_mean: float | None
    latest_mean: float | None
    difference: Interval | None
    method: str
    level: float
    n_baseline: int
    n_latest: int
    judges_before: list[str] = field(default_factory=list)
    judges_after: list[str] = field(default_factory=list)
    worst: list[dict[str, Any]] = field(default_factory=list)
    spread: str = ""  # what the difference's spread counts (``drop_difference``)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "status": self.status, "spread": self.spread,
                "baseline_mean": self.baseline_mean, "latest_mean": self.latest_mean,
                "difference": None if self.difference is None else self.difference.to_dict(),
                "method": self.method, "level": self.level, "baseline_cases": self.n_baseline,
                "latest_cases": self.n_latest, "judges_before": self.judges_before,
                "judges_after": self.judges_after, "worst_cases": self.worst}


def baseline_range(trend: Trend, baseline: str) -> tuple[float, float, str]:
    """(start, end, words) of the baseline of the latest window: ``"previous"`` (the window before),
    ``"last-week"`` (the 7 days before the latest window), ``"window N"`` / ``"windows N"`` (the N windows before)."""
    if not trend.windows:
        raise ConfigurationError("no results in the range: nothing to compare.")
    latest = trend.windows[-1]
    length = latest.end - latest.start
    spec = (baseline or "previous").strip().lower().replace("_", "-")
    if spec == "previous":
        return latest.start - length, latest.start, "the window before"
    if spec in ("last-week", "week"):
        return latest.start - WEEK, latest.start, "the 7 days before"
    parts = spec.split()
    if len(parts) == 2 and parts[0] in ("window", "windows") and parts[1].isdigit() and int(parts[1]) > 0:
        n = int(parts[1])
        return latest.start - n * length, latest.start, f"the {n} window(s) before"
    raise ConfigurationError(f"--baseline {baseline!r}: use 'previous' (the window before the latest), 'last-week' "
                             "(the 7 days before it) or 'window N' (the N windows before it).")


class _Side:
    """One metric in one range (the latest window or its baseline), as sums: the judged results (``n``, their sum
    and sum of squares), the judges that scored them (names, and ``judge_key``s), and the same sums per input
    (``input_key``), which pair the two ranges' cases by input."""

    __slots__ = ("inputs", "judges", "keys", "n", "total", "total_sq")

    def __init__(self) -> None:
        self.n, self.total, self.total_sq = 0, 0.0, 0.0
        self.judges: set[str] = set()
        self.keys: set[str] = set()
        self.inputs: dict[str, list[float]] = {}

    def add_input(self, key: str | None, n: int, total: float, total_sq: float) -> None:
        got = self.inputs.setdefault(str(key), [0, 0.0, 0.0])
        got[0] += n
        got[1] += total
        got[2] += total_sq


def _sides_sql(store: Any, names: list[str], lo: float, hi: float, kw: dict[str, Any]) -> dict[str, _Side]:
    """Each metric's sums over [lo, hi), summed by the database (per metric and judge, and per metric and input)."""
    sides: dict[str, _Side] = {}
    for g in store.aggregate(("metric", "judge"), since=lo, until=hi, scored=True, **kw):
        side = sides.setdefault(g["metric"], _Side())
        side.n += g["n"]
        side.total += g["total"]
        side.total_sq += g["total_sq"]
        side.judges.add(g.get("judge") or "?")
        side.keys.add(judge_key(g))
    for g in store.aggregate(("metric", "input"), since=lo, until=hi, scored=True, **kw):
        sides.setdefault(g["metric"], _Side()).add_input(g["input_key"], g["n"], g["total"], g["total_sq"])
    return sides


def _sides_rows(store: Any, names: list[str], lo: float, hi: float, kw: dict[str, Any], worst: int
                ) -> tuple[dict[str, _Side], dict[str, list[dict[str, Any]]]]:
    """``_sides_sql`` from the streamed records (a filter the database cannot apply, or a store of schema 3), with
    each metric's ``worst`` lowest-scoring records."""
    import heapq  # noqa: PLC0415

    from ._rows import input_key  # noqa: PLC0415

    sides: dict[str, _Side] = {}
    low: dict[str, list[tuple[float, str, int, dict[str, Any]]]] = {}
    for i, rec in enumerate(store.iter_results(since=lo, until=hi, **kw)):
        if rec["score"] is None:
            continue
        x = float(rec["score"])
        side = sides.setdefault(rec["metric"], _Side())
        side.n += 1
        side.total += x
        side.total_sq += x * x
        side.judges.add(rec.get("judge") or "?")
        side.keys.add(judge_key(rec))
        side.add_input(input_key(rec.get("input")), 1, x, x * x)
        heap = low.setdefault(rec["metric"], [])
        item = (-x, "", i, rec)  # a max-heap of the lowest kept: the highest of them on top
        if len(heap) < worst:
            heapq.heappush(heap, item)
        elif worst and -x > heap[0][0]:
            heapq.heapreplace(heap, item)
    lowest = {m: sorted((r for *_, r in h), key=lambda r: (r["score"], r["case_key"])) for m, h in low.items()}
    return sides, lowest


def side_of(recs: Iterable[tuple[str, float]]) -> _Side:
    """A ``_Side`` from (cluster, score) pairs: what ``_sides_rows`` and ``_sides_sql`` make from a store, for
    callers holding scores (``benchmarks/trend_alarms.py``)."""
    side = _Side()
    for key, x in recs:
        x = float(x)
        side.n += 1
        side.total += x
        side.total_sq += x * x
        side.add_input(key, 1, x, x * x)
    return side


def _clustered(side: _Side) -> tuple[float, float, int]:
    """(mean, its variance with the cases of one input counted as one cluster (CR1), clusters), from the per-input
    sums alone."""
    n, c = side.n, len(side.inputs)
    m = side.total / n
    if c < 2:
        return m, math.inf, c
    ss = sum((s - k * m) ** 2 for k, s, _ in side.inputs.values())
    return m, c / (c - 1) * ss / (n * n), c


def drop_difference(base: _Side, cur: _Side, window_means: list[float], base_windows: int, level: float
                    ) -> tuple[Interval, str, str]:
    """latest - baseline with its interval at ``level``: (interval, ``"paired"``/``"unpaired"``, what its spread
    counts). ``base``/``cur``: each range's sums per input (``_Side``); ``window_means``: the means of the windows
    before the latest (each with enough cases); ``base_windows``: how many of them the baseline spans.

    Two sources of false alarms are accounted for. Repeated inputs (a popular question asked a hundred times) are
    one cluster each: paired, one pair per input seen in both; unpaired, the cluster-robust variance of each mean.
    Day-to-day variation (the traffic mix shifts from one day to the next) is measured on the windows before: with
    three or more, the spread of their means (every source of variation between windows in it) gives the variance
    of latest - baseline as ``s^2 (1 + 1/base_windows)`` on ``windows - 1`` degrees of freedom, and the wider of the
    two is used. Both are what ``benchmarks/trend_alarms.py`` measures."""
    mb, vb, cb = _clustered(base)
    mc, vc, cc = _clustered(cur)
    shared = [k for k in cur.inputs if k in base.inputs and base.inputs[k][0] and cur.inputs[k][0]]
    if len(shared) >= MIN_PAIRS and len(shared) >= MIN_PAIRED_SHARE * cc:
        diffs = [cur.inputs[k][1] / cur.inputs[k][0] - base.inputs[k][1] / base.inputs[k][0] for k in shared]
        est = sum(diffs) / len(diffs)
        var = sum((x - est) ** 2 for x in diffs) / (len(diffs) - 1) / len(diffs)
        df, method, spread = len(diffs) - 1, "paired", f"{len(diffs)} inputs in both"
    else:
        est, var = mc - mb, vb + vc
        df, method, spread = max(1, min(cb, cc) - 1), "unpaired", f"clustered by input ({cb} and {cc})"
    h = len(window_means)
    if h >= 3:
        mean_w = sum(window_means) / h
        s2 = sum((x - mean_w) ** 2 for x in window_means) / (h - 1)
        var_days = s2 * (1.0 + 1.0 / max(1, base_windows))
        if var_days > var or not math.isfinite(var):
            var, df, spread = var_days, h - 1, f"day-to-day spread of {h} windows"
    n = min(base.n, cur.n)
    if not math.isfinite(var):
        return Interval(est, None, None, n, level, method), method, spread
    half = t_quantile(max(1, df), level) * math.sqrt(max(0.0, var))
    return Interval(est, est - half, est + half, n, level, method), method, spread


def find_drops(store: Any, trend: Trend, *, baseline: str = "previous", level: float = LEVEL,
               min_drop: float = 0.0, worst: int = 5, where: dict[str, Any] | None = None, run: Any = None
               ) -> tuple[list[Drop], dict[str, Any]]:
    """Test the latest window of ``trend`` against ``baseline`` per metric (see the module). Returns the drops (one
    per metric, every status) and what was compared (windows, level, metrics tested).

    The numbers are sums: made by the database (``store.aggregate`` per metric and judge, and per metric and
    input) when the store can (``store.in_sql(where)``), else from the streamed records; either way memory holds
    one entry per metric and input, never the rows."""
    b_lo, b_hi, words = baseline_range(trend, baseline)
    latest = trend.windows[-1]
    names = list(trend.metrics)
    kw = {"metric": names, "where": where, "at": trend.at, "run": run}
    in_sql = hasattr(store, "in_sql") and store.in_sql(where)
    lowest: dict[str, list[dict[str, Any]]] = {}
    if in_sql:
        cur = _sides_sql(store, names, latest.start, latest.end, kw)
        base = _sides_sql(store, names, b_lo, b_hi, kw)
    else:
        cur, lowest = _sides_rows(store, names, latest.start, latest.end, kw, worst)
        base, _ = _sides_rows(store, names, b_lo, b_hi, kw, 0)
    drops: list[Drop] = []
    testable = []
    for name in names:
        b, c = base.get(name, _Side()), cur.get(name, _Side())
        mean_b = b.total / b.n if b.n else None
        mean_c = c.total / c.n if c.n else None
        d = Drop(name, "too few cases", mean_b, mean_c, None, "", level, b.n, c.n, sorted(b.judges),
                 sorted(c.judges))
        drops.append(d)
        if b.n < trend.min_cases or c.n < trend.min_cases:
            continue
        if b.keys != c.keys:
            d.status = "judge changed"
            continue
        testable.append((d, b, c))
    k = max(1, len(testable))
    adj = 1.0 - (1.0 - level) / k
    for d, b, c in testable:
        d.level = adj
        history = [w.metrics[d.metric].mean for w in trend.windows[:-1]
                   if d.metric in w.metrics and w.metrics[d.metric].enough]
        means = [iv.estimate for iv in history if iv is not None and iv.estimate is not None]
        base_windows = sum(1 for w in trend.windows[:-1] if b_lo <= w.start < b_hi and d.metric in w.metrics)
        d.difference, d.method, d.spread = drop_difference(b, c, means, max(1, base_windows), adj)
        iv = d.difference
        worse = iv.high is not None and iv.high < 0 and (iv.estimate or 0.0) <= -abs(min_drop)
        d.status = "drop" if worse else "no drop"
        if worse:
            low = (store.lowest(worst, metric=d.metric, since=latest.start, until=latest.end, where=where, run=run,
                                at=trend.at) if in_sql else lowest.get(d.metric, []))
            d.worst = [{"input": r.get("input"), "score": r["score"], "run_id": r["run_id"],
                        "case_key": r["case_key"], "retriever": r.get("retriever")} for r in low]
    info = {"latest": {"label": latest.label, "start": latest.start, "end": latest.end},
            "baseline": {"words": words, "start": b_lo, "end": b_hi}, "level": level,
            "adjusted_level": adj, "metrics_tested": len(testable)}
    return drops, info

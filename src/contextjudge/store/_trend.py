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
  bounds the variance of the difference from below (``drop_difference``). ``benchmarks/bench_trend_alarms.py``
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

__all__ = ["DEFAULT_MIN_CASES", "Drop", "MetricWindow", "Trend", "TrendWindow", "build_trend", "cluster_of",
           "drop_difference", "find_drops", "window_bounds"]

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
                                  for w, m, b, a in self.judge_changes]}


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
    windows = []
    for start in sorted(accs):
        _, end = window_bounds(start, by)
        tw = TrendWindow(start, end, _label(start, by))
        for name, a in sorted(accs[start].items()):
            enough = a.n >= min_cases
            mean = moments_interval(a.n, a.s, a.s2) if enough else None
            rate = proportion_interval(a.passed, a.n) if enough else None
            tw.metrics[name] = MetricWindow(name, a.n, a.errors, mean, rate, enough, dict(a.judges), list(a.ids))
        windows.append(tw)
    return Trend(by=by, windows=windows, metrics=sorted(metrics), min_cases=min_cases, since=since, until=until,
                 filters=dict(filters or {}), at=at)


# ---------------------------------------------------------------------------------------------- drops
@dataclass
class Drop:
    """The latest window against its baseline for one metric. ``status``: ``"drop"`` (significantly worse),
    ``"no drop"``, ``"judge changed"`` (not tested: the difference would measure the judge), ``"too few cases"``
    (not tested). ``difference``: latest - baseline with its interval at ``level`` (Bonferroni-adjusted);
    ``method``: ``"paired"`` (by input) or ``"unpaired"`` (Welch). ``worst``: the lowest-scoring cases of the latest
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
    spread: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "status": self.status, "spread": self.spread, "baseline_mean": self.baseline_mean,
                "latest_mean": self.latest_mean,
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


def find_drops(store: Any, trend: Trend, *, baseline: str = "previous", level: float = LEVEL,
               min_drop: float = 0.0, worst: int = 5, where: dict[str, Any] | None = None, run: Any = None
               ) -> tuple[list[Drop], dict[str, Any]]:
    """Test the latest window of ``trend`` against ``baseline`` per metric (see the module). Returns the drops (one
    per metric, every status) and what was compared (windows, level, metrics tested)."""
    from ..cases.goldens import normalize_input  # noqa: PLC0415

    b_lo, b_hi, words = baseline_range(trend, baseline)
    latest = trend.windows[-1]
    names = list(trend.metrics)
    kw = {"metric": names, "where": where, "at": trend.at, "run": run}
    cur: dict[str, list[dict[str, Any]]] = {}
    base: dict[str, list[dict[str, Any]]] = {}
    for rec in store.iter_results(since=latest.start, until=latest.end, **kw):
        cur.setdefault(rec["metric"], []).append(rec)
    for rec in store.iter_results(since=b_lo, until=b_hi, **kw):
        base.setdefault(rec["metric"], []).append(rec)
    drops: list[Drop] = []
    testable = []
    for name in names:
        c = [r for r in cur.get(name, []) if r["score"] is not None]
        b = [r for r in base.get(name, []) if r["score"] is not None]
        jb = sorted({r.get("judge") or "?" for r in b})
        jc = sorted({r.get("judge") or "?" for r in c})
        mean_b = sum(r["score"] for r in b) / len(b) if b else None
        mean_c = sum(r["score"] for r in c) / len(c) if c else None
        d = Drop(name, "too few cases", mean_b, mean_c, None, "", level, len(b), len(c), jb, jc)
        drops.append(d)
        if len(b) < trend.min_cases or len(c) < trend.min_cases:
            continue
        if {judge_key(r) for r in b} != {judge_key(r) for r in c}:
            d.status = "judge changed"
            continue
        testable.append((d, b, c))
    k = max(1, len(testable))
    adj = 1.0 - (1.0 - level) / k
    for d, b, c in testable:
        d.level = adj
        history = [w.metrics[d.metric].mean for w in trend.windows[:-1]
                   if d.metric in w.metrics and w.metrics[d.metric].enough]
        means = [iv.estimate for iv in history if iv is not None]
        base_windows = sum(1 for w in trend.windows[:-1] if b_lo <= w.start < b_hi and d.metric in w.metrics)
        d.difference, d.method, d.spread = drop_difference(
            [(cluster_of(r, normalize_input), r["score"]) for r in b],
            [(cluster_of(r, normalize_input), r["score"]) for r in c],
            [m for m in means if m is not None], max(1, base_windows), adj)
        iv = d.difference
        worse = iv.high is not None and iv.high < 0 and (iv.estimate or 0.0) <= -abs(min_drop)
        d.status = "drop" if worse else "no drop"
        if worse:
            low = sorted(c, key=lambda r: (r["score"], r["case_key"]))[:worst]
            d.worst = [{"input": r.get("input"), "score": r["score"], "run_id": r["run_id"],
                        "case_key": r["case_key"], "retriever": r.get("retriever")} for r in low]
    info = {"latest": {"label": latest.label, "start": latest.start, "end": latest.end},
            "baseline": {"words": words, "start": b_lo, "end": b_hi}, "level": level,
            "adjusted_level": adj, "metrics_tested": len(testable)}
    return drops, info


# ---------------------------------------------------------------------------------------------- the test itself
def cluster_of(rec: dict[str, Any], normalize: Any) -> str:
    """What makes cases one unit of evidence: the same (normalised) input, asked again; a case without an input
    is its own."""
    text = rec.get("input")
    return "input:" + normalize(text) if text else "case:" + str(rec.get("run_id")) + "/" + str(rec.get("case_key"))


def _clustered(recs: list[tuple[str, float]]) -> tuple[float, float, int, dict[str, list[float]]]:
    """(mean, its variance with the cases of one input counted as one cluster (CR1), clusters, scores by cluster)."""
    groups: dict[str, list[float]] = {}
    for key, x in recs:
        groups.setdefault(key, []).append(float(x))
    n = len(recs)
    m = sum(float(x) for _, x in recs) / n
    c = len(groups)
    if c < 2:
        return m, math.inf, c, groups
    ss = sum(sum(x - m for x in xs) ** 2 for xs in groups.values())
    return m, c / (c - 1) * ss / (n * n), c, groups


def drop_difference(base: list[tuple[str, float]], cur: list[tuple[str, float]], window_means: list[float],
                    base_windows: int, level: float) -> tuple[Interval, str, str]:
    """latest - baseline with its interval at ``level``: (interval, ``"paired"``/``"unpaired"``, what its spread
    counts). ``base``/``cur``: (cluster, score) of each case; ``window_means``: the means of the windows before the
    latest (each with enough cases); ``base_windows``: how many of them the baseline spans.

    Two sources of false alarms are accounted for. Repeated inputs (a popular question asked a hundred times) are
    one cluster each: paired, one pair per input seen in both; unpaired, the cluster-robust variance of each mean.
    Day-to-day variation (the traffic mix shifts from one day to the next) is measured on the windows before: with
    three or more, the spread of their means (every source of variation between windows in it) gives the variance
    of latest - baseline as ``s^2 (1 + 1/base_windows)`` on ``windows - 1`` degrees of freedom, and the wider of the
    two is used. Both are what ``benchmarks/bench_trend_alarms.py`` measures."""
    mb, vb, cb, gb = _clustered(base)
    mc, vc, cc, gc = _clustered(cur)
    shared = [k for k in gc if k in gb]
    if len(shared) >= MIN_PAIRS and len(shared) >= MIN_PAIRED_SHARE * cc:
        diffs = [sum(gc[k]) / len(gc[k]) - sum(gb[k]) / len(gb[k]) for k in shared]
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
    if not math.isfinite(var):
        return Interval(est, None, None, min(len(base), len(cur)), level, method), method, spread
    half = t_quantile(max(1, df), level) * math.sqrt(max(0.0, var))
    return Interval(est, est - half, est + half, min(len(base), len(cur)), level, method), method, spread

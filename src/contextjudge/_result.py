"""Results: what a metric returns for one test case, and what a run returns for all of them."""

from __future__ import annotations

import json
import math
import pickle
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from .cases.testcase import dump_json
from .errors import ConfigurationError, MetricNotFoundError
from .stats import Interval, PPIEstimate, moments_interval, ppi_mean, proportion_interval

__all__ = ["LOCAL_CASCADE_JUDGE", "LOCAL_CROSS_JUDGE", "LOCAL_JUDGE", "PER_NODE", "EvaluationResult", "MetricResult", "Tally", "TestResult",
           "Usage", "is_embedded_judge"]

PER_NODE = "per_node"  # the key in MetricResult.details that says the verdicts are one per retrieved node
# The embedded judges' names, as results, stores and calibration files record them: model="local" and the stacked
# model="local-cross" and the cascade model="local-cascade" (whose names extend the first, so that one prefix says "an
# embedded judge")
LOCAL_JUDGE = "contextjudge-local"
LOCAL_CROSS_JUDGE = "contextjudge-local-cross"
LOCAL_CASCADE_JUDGE = "contextjudge-local-cascade"


def embedded_spec(name: object) -> str:
    """The model string of the embedded judge whose recorded name is ``name``: "local-cross", "local-cascade" or
    "local" (what calibration files and a store's calibration name the judge by)."""
    text = str(name or "")
    return ("local-cross" if text.startswith(LOCAL_CROSS_JUDGE)
            else "local-cascade" if text.startswith(LOCAL_CASCADE_JUDGE) else "local")


def is_embedded_judge(name: object) -> bool:
    """Whether ``name`` (a judge name as results record it) is one of the embedded judges, whose tokens no one bills."""
    return str(name or "").startswith(LOCAL_JUDGE)


@dataclass
class Usage:
    """Judge usage: calls, tokens, cache hits, seconds spent waiting on the judge, and cost when priced."""

    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost: float | None = None

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.seconds += other.seconds
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_tokens"] = self.total_tokens
        return d


@dataclass
class MetricResult:
    """One metric's result on one test case.

    ``score`` is None only when ``error`` is set; it is never NaN. ``verdicts`` are the judge's verdicts as plain
    dicts (id, rank or statement, verdict, reason, ...), in rank or statement order.
    """

    name: str
    score: float | None
    threshold: float
    success: bool
    reason: str | None = None
    strict_mode: bool = False
    error: str | None = None
    error_type: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    verbose_logs: str | None = None
    usage: Usage = field(default_factory=Usage)
    evaluation_model: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # The score the case's gold labels give (cases/labels.py), when it carries labels for this metric: the
    # labelled cases of a run correct the judge's bias (stats.ppi_mean).
    gold_score: float | None = None
    # With judge repeats (repeats=k on a judge with temperature above zero): the variance of this case's score
    # across the k repeats; None when judged once. Folded into the run's intervals (stats.mean_interval).
    score_spread: float | None = None

    def __post_init__(self) -> None:
        if self.score is not None and (not isinstance(self.score, (int, float)) or math.isnan(self.score)):
            raise ConfigurationError(f"{self.name}: a score must be a number in [0, 1], got {self.score!r}. Pass "
                                     "score=None with error=... when the metric could not score the case.")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usage"] = self.usage.to_dict()
        return d

    @property
    def evaluation_cost(self) -> float | None:
        """The judge's cost for this result in USD when priced (DeepEval's ``MetricData.evaluation_cost``)."""
        return self.usage.cost


# ``verdicts`` and ``details`` are most of a result's size (a relevancy result holds one verdict per sentence of
# every node, with the sentence), and a long run keeps every result. They are held packed, pickled and compressed,
# which also keeps thousands of small dicts away from the garbage collector, and each read unpacks a fresh copy:
# to change them, assign a new value. Pickle, not JSON, so that values keep their types (details may have int keys).
_EMPTY = b""
_ZMIN = 1024  # smaller blobs stay plain pickle: compressing them saves little and costs a deflate state each
_WBITS = -12  # raw deflate with a 4 KB window and a small hash: about 32 KB of state per call, not 256 KB


def _pack(value: Any) -> bytes:
    if not value:
        return _EMPTY
    raw = pickle.dumps(value, 5)
    if len(raw) <= _ZMIN:
        return b"p" + raw
    z = zlib.compressobj(6, zlib.DEFLATED, _WBITS, 5)
    return b"z" + z.compress(raw) + z.flush()


def _unpack(blob: bytes, empty: Any) -> Any:
    if not blob:
        return empty
    if blob[:1] == b"z":
        return pickle.loads(zlib.decompress(blob[1:], _WBITS))  # noqa: S301 - our own bytes, never the user's input
    return pickle.loads(blob[1:])  # noqa: S301


def _packed_field(name: str, empty: Callable[[], Any]) -> property:
    slot = f"_{name}_packed"

    def get(self: Any) -> Any:
        return _unpack(self.__dict__.get(slot, _EMPTY), empty())

    def set_(self: Any, value: Any) -> None:
        self.__dict__[slot] = _pack(value)  # None and empty values pack to nothing

    return property(get, set_, doc=f"The result's {name} (stored packed; each read returns a fresh copy).")


MetricResult.verdicts = _packed_field("verdicts", list)  # type: ignore[assignment]
MetricResult.details = _packed_field("details", dict)  # type: ignore[assignment]


@dataclass
class TestResult:
    """All metric results for one test case."""

    __test__ = False  # not a pytest test class

    index: int
    name: str | None
    test_case: Any
    metrics_data: list[MetricResult] = field(default_factory=list)
    error: str | None = None

    @property
    def success(self) -> bool:
        return self.error is None and all(m.success for m in self.metrics_data)

    # DeepEval's TestResult fields, read from the test case
    @property
    def conversational(self) -> bool:
        return hasattr(self.test_case, "turns")

    @property
    def multimodal(self) -> bool:
        return bool(getattr(self.test_case, "multimodal", False))

    @property
    def input(self) -> str | None:
        return getattr(self.test_case, "input", None)

    @property
    def actual_output(self) -> str | None:
        return getattr(self.test_case, "actual_output", None)

    @property
    def expected_output(self) -> str | None:
        return getattr(self.test_case, "expected_output", None)

    @property
    def context(self) -> list[str] | None:
        return getattr(self.test_case, "context", None)

    @property
    def retrieval_context(self) -> list[str] | None:
        """The retrieved nodes' texts, in rank order."""
        return _texts(getattr(self.test_case, "retrieval_context", None))

    @property
    def turns(self) -> list[Any] | None:
        return getattr(self.test_case, "turns", None)

    @property
    def additional_metadata(self) -> dict[str, Any] | None:
        return getattr(self.test_case, "additional_metadata", None)

    def metric(self, name: str) -> MetricResult:
        for m in self.metrics_data:
            if m.name == name:
                return m
        raise MetricNotFoundError(f"no result for metric {name!r}; use one of {[m.name for m in self.metrics_data]}")

    def to_dict(self) -> dict[str, Any]:
        tc = self.test_case
        return {
            "index": self.index,
            "name": self.name,
            "test_case": dump_json(tc) if hasattr(tc, "model_dump") else tc,
            "success": self.success,
            "error": self.error,
            "metrics": [m.to_dict() for m in self.metrics_data],
        }


def _texts(nodes: Any) -> list[str] | None:
    if nodes is None:
        return None
    return [getattr(n, "text", n) for n in nodes]


class _Moments:
    """One metric's running totals over a run: results, scored, passed, errors, and the exact sums (fractions, so
    the same scores give the same mean and interval whatever order they arrive in) of the scores, their squares and
    the cases' repeat variances (``score_spread``)."""

    __slots__ = ("errors", "passed", "rows", "scored", "spread", "spread_seen", "total", "total_sq")

    def __init__(self) -> None:
        self.rows = self.scored = self.passed = self.errors = 0
        self.total = self.total_sq = self.spread = Fraction(0)
        self.spread_seen = False

    def add(self, m: MetricResult) -> None:
        self.rows += 1
        if m.score is not None:
            x = Fraction(m.score)
            self.scored += 1
            self.total += x
            self.total_sq += x * x
            if m.score_spread is not None:
                self.spread += Fraction(m.score_spread)
                self.spread_seen = True
        self.passed += bool(m.success)
        self.errors += m.error is not None

    def mean(self) -> float | None:
        return float(self.total / self.scored) if self.scored else None

    def interval(self) -> Interval:
        within = self.spread / self.scored if self.spread_seen and self.scored else 0
        return moments_interval(self.scored, self.total, self.total_sq, within_mean=within)

    def pass_rate_interval(self) -> Interval:
        return proportion_interval(self.passed, self.rows)

    def summary(self) -> dict[str, Any]:
        mean_iv, pass_iv = self.interval(), self.pass_rate_interval()
        return {"mean": self.mean(), "mean_ci": mean_iv.as_list(), "pass_rate": pass_iv.estimate,
                "pass_rate_ci": pass_iv.as_list(), "scored": self.scored, "errors": self.errors}


def _moments(rows: list[MetricResult]) -> _Moments:
    """``_Moments.add`` of every row, the same exact sums made faster: a float is a whole number over a power of
    two, so the numerators are summed as integers per denominator and made fractions once (a run of 100,000 cases
    sums in a tenth of the time, to the same fractions)."""
    out = _Moments()
    sums: dict[int, int] = {}
    squares: dict[int, int] = {}
    spreads: dict[int, int] = {}
    for m in rows:
        score, spread = m.score, m.score_spread
        if (score is not None and type(score) is not float) or (spread is not None and type(spread) is not float):
            out.add(m)  # an int, a Fraction, a numpy number: the plain way
            continue
        out.rows += 1
        if score is not None:
            n, d = score.as_integer_ratio()
            out.scored += 1
            sums[d] = sums.get(d, 0) + n
            squares[d * d] = squares.get(d * d, 0) + n * n
            if spread is not None:
                n, d = spread.as_integer_ratio()
                spreads[d] = spreads.get(d, 0) + n
                out.spread_seen = True
        out.passed += bool(m.success)
        out.errors += m.error is not None
    for acc, attr in ((sums, "total"), (squares, "total_sq"), (spreads, "spread")):
        if acc:
            setattr(out, attr, getattr(out, attr) + sum((Fraction(n, d) for d, n in acc.items()), Fraction(0)))
    return out


class Tally:
    """Running per-metric totals of a run, for a run that does not keep its per-case results: enough for each
    metric's mean and pass rate with their intervals. A bias-corrected estimate needs the per-case scores, so such a
    run has none (``EvaluationResult.corrected`` returns None)."""

    def __init__(self) -> None:
        self.cases = 0
        self.metrics: dict[str, _Moments] = {}
        self.judges: set[str] = set()

    def add(self, tr: TestResult) -> None:
        self.cases += 1
        for m in tr.metrics_data:
            if m.evaluation_model:
                self.judges.add(m.evaluation_model)
            self.metrics.setdefault(m.name, _Moments()).add(m)

    def summary(self) -> dict[str, dict[str, Any]]:
        return {name: row.summary() for name, row in self.metrics.items()}


@dataclass
class EvaluationResult:
    """The result of ``evaluate()``: one ``TestResult`` per test case, in input order, and usage totals.

    A run with ``keep_results=False`` has no ``test_results``; its ``summary()``, ``mean()``, ``pass_rate()`` and
    ``metric_names()`` come from running totals (``tally``), and ``len()`` is the number of cases scored.
    ``callback_errors`` counts the cases on which the ``on_result`` callback raised.
    """

    test_results: list[TestResult]
    usage: Usage = field(default_factory=Usage)
    run_id: str | None = None
    duration_seconds: float = 0.0
    tally: Tally | None = field(default=None, repr=False, compare=False)
    callback_errors: int = 0
    # Tiered judging (judges/_tiered.py): per tier ("cheap", "strong", "cheap-fallback"), the items it judged, those
    # whose verdict stands ("final"), its errors, calls, tokens and seconds. None when no TieredJudge was used.
    tiers: dict[str, dict[str, Any]] | None = None
    # Judge repeats (repeats=k): {"k", "judges": {name: {"items", "not_unanimous", "disagreement"}}, "deterministic":
    # [names asked once]}: the judge's own disagreement. None when every request was asked once.
    repeats: dict[str, Any] | None = None
    # The store stopped taking writes during the run (a full disk, a lost database): what it said. The results are
    # all here; those written before it failed are in the store, the rest only here. None when every write held.
    store_error: str | None = None

    def __iter__(self):
        return iter(self.test_results)

    def __len__(self) -> int:
        return self.tally.cases if self.tally is not None else len(self.test_results)

    def _need_results(self, what: str) -> None:
        if self.tally is not None:
            from .errors import ContextJudgeError  # noqa: PLC0415

            raise ContextJudgeError(f"{what} needs the per-case results, and this run did not keep them "
                                    "(keep_results=False): read them in on_result=, or from the store.")

    def metric_names(self) -> list[str]:
        if self.tally is not None:
            return list(self.tally.metrics)
        names: list[str] = []
        for tr in self.test_results:
            for m in tr.metrics_data:
                if m.name not in names:
                    names.append(m.name)
        return names

    def scores(self, metric: str) -> list[float | None]:
        self._need_results("scores()")
        out = []
        for tr in self.test_results:
            hit = [m.score for m in tr.metrics_data if m.name == metric]
            out.append(hit[0] if hit else None)
        return out

    def _rows(self, metric: str) -> list[MetricResult]:
        return [m for tr in self.test_results for m in tr.metrics_data if m.name == metric]

    def _moments(self, metric: str) -> _Moments:
        if self.tally is not None:
            return self.tally.metrics.get(metric) or _Moments()
        return _moments(self._rows(metric))

    def mean(self, metric: str) -> float | None:
        return self._moments(metric).mean()

    def pass_rate(self, metric: str) -> float | None:
        return self._moments(metric).pass_rate_interval().estimate

    def interval(self, metric: str) -> Interval:
        """The metric's mean score over the scored cases with its 95% interval (Student t over cases; with judge
        repeats, each case's spread across repeats widens it; see ``contextjudge.stats.mean_interval``).
        ``str()`` of it reads "0.650 [0.412, 0.888]"; ``.low``/``.high`` are None with fewer than two scores."""
        return self._moments(metric).interval()

    def pass_rate_interval(self, metric: str) -> Interval:
        """The share of the metric's results that passed (errors count as not passing) with its 95% Wilson
        interval."""
        return self._moments(metric).pass_rate_interval()

    def corrected(self, metric: str) -> PPIEstimate | None:
        """The metric's mean corrected for the judge's bias by the cases that carry gold labels (prediction-powered
        inference, ``contextjudge.stats.ppi_mean``): the estimate with its 95% interval, the judge's measured bias,
        and the labelled cases' own mean and interval. None unless at least two scored cases carry gold labels for
        this metric and at least one scored case does not (with every case labelled, the gold mean is the answer),
        and for a run that did not keep its per-case results."""
        if self.tally is not None:
            return None
        rows = [m for m in self._rows(metric) if m.score is not None]
        return ppi_mean([m.score for m in rows], [m.gold_score for m in rows])

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per metric: the mean score and its 95% interval (``mean_ci``, ``[low, high]`` or None), the pass rate and
        its interval (``pass_rate_ci``), how many cases were scored and how many errored; and ``corrected`` (the
        bias-corrected estimate, ``PPIEstimate.to_dict()``) when labelled cases allow one."""
        if self.tally is not None:
            return self.tally.summary()
        out: dict[str, dict[str, Any]] = {}
        for name in self.metric_names():
            row = _moments(self._rows(name)).summary()
            ppi = self.corrected(name)
            if ppi is not None:
                row["corrected"] = ppi.to_dict()
            out[name] = row
        return out

    def to_records(self) -> list[dict[str, Any]]:
        """One flat record per (test case, metric)."""
        self._need_results("to_records()")
        rows = []
        for tr in self.test_results:
            tc = tr.test_case
            base = {"case_index": tr.index, "case_name": tr.name, "input": getattr(tc, "input", None)}
            if not tr.metrics_data:
                rows.append({**base, "metric": None, "score": None, "success": False, "error": tr.error})
            for m in tr.metrics_data:
                rows.append({**base, "metric": m.name, "score": m.score, "threshold": m.threshold,
                             "success": m.success, "reason": m.reason, "error": m.error,
                             "judge_calls": m.usage.calls, "input_tokens": m.usage.input_tokens,
                             "output_tokens": m.usage.output_tokens})
        return rows

    def judges(self) -> list[str]:
        """The judges that scored this run's results, by name (``contextjudge-local`` is the embedded judge)."""
        if self.tally is not None:
            return sorted(self.tally.judges)
        return sorted({m.evaluation_model for tr in self.test_results for m in tr.metrics_data if m.evaluation_model})

    def token_words(self) -> str:
        """The run's tokens in words, as the CLI and the report say them: the embedded judge's tokens are billed by no
        one, so a run it alone scored says "tokens: none billable (embedded judge, free)" (no tokens, no cost); a
        mixed run counts only the billable tokens; other runs "tokens N" (and the cost, when a price is known)."""
        u = self.usage
        judges = self.judges()
        local = [j for j in judges if is_embedded_judge(j)]
        if judges and len(local) == len(judges):
            return "tokens: none billable (embedded judge, free)"
        cost = f", cost {u.cost:.4f}" if u.cost is not None else ""
        if local:
            billable = sum(m.usage.input_tokens + m.usage.output_tokens for tr in self.test_results
                           for m in tr.metrics_data
                           if m.evaluation_model and not is_embedded_judge(m.evaluation_model))
            return f"billable tokens {billable} (the embedded judge's are free){cost}"
        return f"tokens {u.input_tokens + u.output_tokens}{cost}"

    def to_wide_records(self) -> list[dict[str, Any]]:
        """One flat record per test case: its name, input, actual_output, expected_output, retrieval_context (the
        nodes' texts, in rank order), a column per metric's
        score (None where the metric errored or did not apply), and ``error`` (the case's errors, joined)."""
        self._need_results("to_wide_records()")
        names = self.metric_names()
        rows = []
        for tr in self.test_results:
            tc = tr.test_case
            row: dict[str, Any] = {"case_index": tr.index, "name": tr.name, "input": getattr(tc, "input", None),
                                   "actual_output": getattr(tc, "actual_output", None),
                                   "expected_output": getattr(tc, "expected_output", None),
                                   "retrieval_context": _texts(getattr(tc, "retrieval_context", None))}
            by_name = {m.name: m for m in tr.metrics_data}
            for n in names:
                m = by_name.get(n)
                row[n] = None if m is None else m.score
            errors = [f"{m.name}: {m.error}" for m in tr.metrics_data if m.error]
            if tr.error:
                errors.insert(0, tr.error)
            row["success"] = tr.success
            row["error"] = "; ".join(errors) or None
            rows.append(row)
        return rows

    def to_pandas(self, *, wide: bool = False):
        """A DataFrame with one row per (test case, metric), or with ``wide=True`` one row per test case: ``name``,
        ``input``, ``actual_output``, ``expected_output``, ``retrieval_context``, a column per metric holding its score (named like the
        metric, e.g. "Contextual Precision"; empty where it errored), ``success`` and ``error``: the layout Ragas users
        know. Needs pandas (``pip install contextjudge[pandas]``)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install 'contextjudge[pandas]'") from exc
        if wide:
            return pd.DataFrame(self.to_wide_records(), columns=["case_index", "name", "input", "actual_output",
                                                                 "expected_output", "retrieval_context",
                                                                 *self.metric_names(), "success", "error"])
        return pd.DataFrame(self.to_records())

    def to_jsonl(self, path: str | None = None) -> str:
        """One JSON line per test case (with all its metric results). Writes to ``path`` when given."""
        self._need_results("to_jsonl()")
        text = "".join(json.dumps(tr.to_dict(), default=str) + "\n" for tr in self.test_results)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def __repr__(self) -> str:
        summary = self.summary()
        parts = [f"{n}={_mean_text(v)}" for n, v in summary.items()]
        errors = sum(v["errors"] for v in summary.values())
        judges = self.judges()
        tail = (f"; {errors} metric error(s)" if errors else "") + (f"; judge {', '.join(judges)}" if judges else "")
        return f"EvaluationResult({len(self)} cases; {', '.join(parts)}{tail})"



def _mean_text(row: dict[str, Any]) -> str:
    """A summary row's mean with its interval: "0.650 [0.412, 0.888]", "1.000" (one case), "n/a"."""
    if row.get("mean") is None:
        return "n/a"
    ci = row.get("mean_ci")
    return f"{row['mean']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

"""Results: what a metric returns for one test case, and what a run returns for all of them."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ._testcase import dump_json

__all__ = ["EvaluationResult", "MetricResult", "TestResult", "Usage"]


@dataclass
class Usage:
    """Judge usage: calls, tokens, cache hits, seconds spent waiting on the judge, and cost when priced."""

    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost: float | None = None

    def add(self, other: "Usage") -> None:
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

    def __post_init__(self) -> None:
        if self.score is not None and (not isinstance(self.score, (int, float)) or math.isnan(self.score)):
            raise ValueError(f"{self.name}: a score must be a number in [0, 1], got {self.score!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usage"] = self.usage.to_dict()
        return d


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

    def metric(self, name: str) -> MetricResult:
        for m in self.metrics_data:
            if m.name == name:
                return m
        raise KeyError(f"no result for metric {name!r}; have {[m.name for m in self.metrics_data]}")

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


@dataclass
class EvaluationResult:
    """The result of ``evaluate()``: one ``TestResult`` per test case, in input order, and usage totals."""

    test_results: list[TestResult]
    usage: Usage = field(default_factory=Usage)
    run_id: str | None = None
    duration_seconds: float = 0.0

    def __iter__(self):
        return iter(self.test_results)

    def __len__(self) -> int:
        return len(self.test_results)

    def metric_names(self) -> list[str]:
        names: list[str] = []
        for tr in self.test_results:
            for m in tr.metrics_data:
                if m.name not in names:
                    names.append(m.name)
        return names

    def scores(self, metric: str) -> list[float | None]:
        out = []
        for tr in self.test_results:
            hit = [m.score for m in tr.metrics_data if m.name == metric]
            out.append(hit[0] if hit else None)
        return out

    def mean(self, metric: str) -> float | None:
        vals = [s for s in self.scores(metric) if s is not None]
        return sum(vals) / len(vals) if vals else None

    def pass_rate(self, metric: str) -> float | None:
        rows = [m for tr in self.test_results for m in tr.metrics_data if m.name == metric]
        return sum(m.success for m in rows) / len(rows) if rows else None

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per metric: mean score, pass rate, how many cases were scored and how many errored."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.metric_names():
            rows = [m for tr in self.test_results for m in tr.metrics_data if m.name == name]
            out[name] = {
                "mean": self.mean(name),
                "pass_rate": self.pass_rate(name),
                "scored": sum(m.score is not None for m in rows),
                "errors": sum(m.error is not None for m in rows),
            }
        return out

    def to_records(self) -> list[dict[str, Any]]:
        """One flat record per (test case, metric)."""
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

    def to_pandas(self):
        """A DataFrame with one row per (test case, metric). Needs pandas (``pip install contextjudge[pandas]``)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install 'contextjudge[pandas]'") from exc
        return pd.DataFrame(self.to_records())

    def to_jsonl(self, path: str | None = None) -> str:
        """One JSON line per test case (with all its metric results). Writes to ``path`` when given."""
        text = "".join(json.dumps(tr.to_dict(), default=str) + "\n" for tr in self.test_results)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def __repr__(self) -> str:
        parts = [f"{n}={v['mean']:.3f}" if v["mean"] is not None else f"{n}=n/a" for n, v in self.summary().items()]
        return f"EvaluationResult({len(self.test_results)} cases; {', '.join(parts)})"


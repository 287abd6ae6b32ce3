"""The gate of a scored run (issue 49: out of the CLI, so every door reads the same one): per metric its summary, the
threshold its mean must reach and what failed. ``contextjudge eval`` and ``score`` exit on it, the MCP server's
``run_summary`` shows it, and Python callers get it with ``metric_gates(result, metrics)``."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["MetricGate", "errored_cases", "figure_text", "metric_gates", "result_threshold", "threshold_text"]


class MetricGate(NamedTuple):
    """One metric's gate."""

    summary: dict[str, Any]  # the metric's row of result.summary()
    threshold: float | None  # what its mean must reach
    fails: list[str]  # what failed ("mean 0.233 < 0.50"); empty: it passed
    not_gated: str | None = None  # shown but not gated: the verdict family its judge is not trusted for


def metric_gates(result: Any, metrics: list[Any] | None, pass_min: dict[str, float] | None = None,
                 not_gated: dict[str, str] | None = None) -> dict[str, MetricGate]:
    """Per metric name, its gate: its summary, its threshold and what failed ("mean 0.233 < 0.50"; empty: it passed).

    The one rule: a metric's mean must reach its threshold (the metric's own, ``--threshold`` when given), and its
    pass rate ``--min-pass-rate`` (``pass_min``, by metric key) when given. A metric no case could score fails: there
    is nothing to pass. A metric in ``not_gated`` (name -> verdict family) is shown with what would fail, and never
    fails the run.
    """
    by_name = {m.name: m for m in metrics or []}
    out: dict[str, MetricGate] = {}
    for name, s in result.summary().items():
        m = by_name.get(name)
        key = getattr(m, "key", None)
        need_mean = getattr(m, "threshold", None) if m is not None else result_threshold(result, name)
        fails = []
        if s["mean"] is None:
            fails.append("no case scored")
        elif need_mean is not None and s["mean"] < need_mean:
            fails.append(f"mean {s['mean']:.3f} < {threshold_text(need_mean)}")
        need_pass = (pass_min or {}).get(key) if key else None
        if need_pass is not None and s["mean"] is not None and (s["pass_rate"] is None or s["pass_rate"] < need_pass):
            fails.append(f"pass rate {figure_text(s['pass_rate'])} < {threshold_text(need_pass)}")
        out[name] = MetricGate(s, need_mean, fails, (not_gated or {}).get(name))
    return out


def result_threshold(result: Any, name: str) -> float | None:
    """The threshold the results of ``name`` were scored with (the highest, if they differ)."""
    ts = [m.threshold for tr in result.test_results for m in tr.metrics_data if m.name == name]
    return max(ts) if ts else None


def errored_cases(result: Any) -> list[Any]:
    """The test results with an error: the case could not be scored, or one of its metrics could not run."""
    return [tr for tr in result.test_results if tr.error or any(m.error for m in tr.metrics_data)]


def figure_text(x: float | None) -> str:
    """A figure as the summaries print it: three decimals, or n/a."""
    return "n/a" if x is None else f"{x:.3f}"


def threshold_text(x: float) -> str:
    """A threshold: two decimals, three when it has them (0.50, 0.75, 0.166)."""
    text = f"{x:.3f}"
    return text.removesuffix("0")

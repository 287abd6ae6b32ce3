"""DeepEval's ``verbose_mode`` printing, shared by the metrics' ``measure`` and ``evaluate``. Printing lives only in
``compat/deepeval``; the core logs."""

from __future__ import annotations

from typing import Any

__all__ = ["print_verbose"]


def print_verbose(metric: Any, result: Any = None) -> None:
    """DeepEval's ``verbose_mode``: the metric's intermediate steps, score and reason, printed to stdout."""
    src = result if result is not None else metric
    logs = getattr(src, "verbose_logs", None)
    name = getattr(metric, "name", type(metric).__name__)
    print("*" * 50)
    print(f"{name} Verbose Logs")
    print("*" * 50)
    print()
    print(logs or "(no intermediate steps: nothing was judged)")
    print()
    print(f"Score: {getattr(src, 'score', None)}")
    print(f"Reason: {getattr(src, 'reason', None)}")
    print("=" * 70)

"""What the doors use of a results store, as Protocols: each says which of ``ResultsStore``'s methods a caller needs,
so a parameter says what it reads or writes (instead of ``Any``) and a stand-in (a test double, another backend)
knows what to implement. ``ResultsStore`` satisfies every one of them.

- ``RunWrites``: what one run of scoring writes (``engine.Run``): the run's start and end, its cases, results and
  judge calls, what a resumed run already holds, and the verdict cache (the judges' ``CacheBackend``).
- ``RunReads``: runs listed, found by id, name or prefix, and read back (the CLI, goldens from captured traffic).
- ``CalibrationStore``: the labelled cases and the calibration kept for the embedded judge (``engine``'s store
  calibration, the CLI's ``--judge local`` on a store).
- ``SpendWindows``: the budget windows a ``BudgetLedger`` or ``RateGate`` reserves in (also ``MemorySpend``, this
  process's windows).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._result import EvaluationResult, MetricResult, TestResult
    from ..cases.testcase import LLMTestCase
    from ._rows import StoredCase
    from ._runs import RunInfo

__all__ = ["CalibrationStore", "RunReads", "RunWrites", "SpendWindows"]


class RunWrites(Protocol):
    """What one run of scoring writes to a store (``engine.Run``), and the verdict cache it reads and fills."""

    def begin_run(self, run_id: str | None, config: dict[str, Any]) -> str:
        """Open (or resume) a run and return its id."""

    def end_run(self, run_id: str, summary: dict[str, Any], status: str = "finished") -> None:
        """Close a run with its summary."""

    def completed_results(self, run_id: str) -> dict[tuple[str, str], MetricResult]:
        """The results a resumed run already holds, by (case key, metric)."""

    def save_case(self, run_id: str, key: str, index: int, test_case: Any) -> None:
        """Write one case of the run."""

    def save_result(self, run_id: str, key: str, result: MetricResult) -> None:
        """Write one metric result of a case."""

    def save_judge_call(self, run_id: str, event: dict[str, Any]) -> None:
        """Write one judge call's usage."""

    def get_verdict(self, key: str) -> dict[str, Any] | None:
        """A cached judge answer, or None."""

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        """Cache a judge answer."""


class RunReads(Protocol):
    """A stored run found and read back."""

    def resolve_run(self, ref: str | None = None) -> str:
        """The id of the run ``ref`` names (an id, a name, a unique prefix; None: the latest)."""

    def run_info(self, run_id: str) -> RunInfo:
        """What the store keeps of a run (name, time, judges, summary)."""

    def load_run(self, run_id: str | None = None, *, verdicts: bool = True) -> EvaluationResult:
        """The run read back as an ``EvaluationResult``."""

    def load_cases(self, run_id: str) -> list[StoredCase]:
        """The run's cases as they were stored."""

    def iter_test_results(self, run_id: str, *, batch: int = 500) -> Iterator[TestResult]:
        """The run's cases with their results, ``batch`` at a time (memory holds one batch)."""

    def list_runs(self, *, counts: bool = True) -> list[RunInfo]:
        """Every run, newest first."""

    def cases(self, *, run: Any = None, since: Any = None, until: Any = None, where: Mapping[str, Any] | None = None,
              as_: str = "records") -> Any:
        """Captured or evaluated test cases, oldest first (the read API)."""


class CalibrationStore(Protocol):
    """The labels and the embedded judge's calibration a store keeps."""

    def labelled_cases(self, run: str | None = None) -> list[LLMTestCase]:
        """The cases that carry gold labels."""

    def stored_calibration(self, judge: str) -> dict[str, Any] | None:
        """The calibration kept for ``judge``, or None."""

    def keep_calibration(self, judge: str, value: dict[str, Any]) -> None:
        """Keep ``value`` as ``judge``'s calibration."""

    def labels_version(self) -> tuple[int, float]:
        """A token that changes when a label is added, changed or withdrawn."""


class SpendWindows(Protocol):
    """The budget windows a ledger or rate gate reserves in, by (scope, window start)."""

    def spend_reserve(self, scope: str, window: float, *, tokens: int, dollars: float = 0.0,
                      max_tokens: int | None = None, max_dollars: float | None = None, calls: int = 0,
                      max_calls: int | None = None, count_refusal: bool = True) -> bool:
        """Add to the window when it has room under every limit given; False (and, counted, a refusal) if not."""

    def spend_adjust(self, scope: str, window: float, *, tokens: int = 0, dollars: float = 0.0,
                     calls: int = 0) -> None:
        """Add (or, negative, give back) spend in the window."""

    def spend_get(self, scope: str, window: float) -> dict[str, Any] | None:
        """The window's row, or None."""


if TYPE_CHECKING:  # mypy checks here that ResultsStore satisfies every Protocol (judges/_spend/_windows.py checks
    # MemorySpend against SpendWindows)
    from ._store import ResultsStore

    def _satisfied(store: ResultsStore) -> tuple[RunWrites, RunReads, CalibrationStore, SpendWindows]:
        return store, store, store, store

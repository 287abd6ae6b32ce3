"""Modes "deferred" and "off": the session keeps the cases (and writes them to the store) and scores nothing.

"deferred" leaves them for ``session.score_deferred()`` or ``contextjudge score``; "off" (``CaptureOnly``) only keeps
them, for the app's own use (``contextjudge eval --app`` collects its cases this way, and a test hands them to
``assert_test``): it needs no store and no ``max_kept`` (10,000 by default), and says nothing of unscored cases,
which are what it is for.
"""

from __future__ import annotations

from collections.abc import Callable

from ._case import CapturedCase
from ._kept import KeptCases
from ._mode import dropped_words, kept_where

__all__ = ["CaptureOnly", "KeepOnly"]


class KeepOnly:
    """Keeps each case, written to the store first when there is one; no thread, no task."""

    handoff_delay_default = 0.0
    needs_max_kept_without_store = True  # the kept cases are then the only copy of the work

    def __init__(self, kept: KeptCases, name: str) -> None:
        self.kept = kept
        self.name = name

    def submit(self, case: CapturedCase) -> None:
        """Keep ``case``; with a store, write it there first (unscored, for later)."""
        kept = self.kept
        kept.begin_run()  # with a store, the run exists from the first case on
        if kept.store is not None:
            kept.store_case(case)
        with kept.lock:
            victims = kept.keep(case)
        if victims and kept.store is not None:
            kept.store_later(victims)

    def flush(self, deadline: float | None) -> bool:
        """Nothing to wait for."""
        return True

    def wait_results(self, deadline: float | None) -> bool:
        """Nothing to wait for."""
        return True

    def close(self, timeout: float | None) -> None:
        """Nothing to stop."""

    def at_exit(self, left: Callable[[], float]) -> None:
        """Nothing pending."""

    def pending(self) -> int:
        """No case waits for a judge."""
        return 0

    def in_flight(self) -> set[int]:
        """No case is being scored."""
        return set()

    def check_score_deferred(self) -> None:
        """These modes score later in the app: always allowed."""

    def keep_unscored(self) -> int:
        """Write the kept, unscored cases to the store; their count."""
        return self.kept.keep_unscored()

    def end_status(self, left: int) -> str:
        """"finished" when nothing of the run is left unscored, else "captured"."""
        return "captured" if left else "finished"

    def report(self, unscored: int, dropped: int, at_exit: bool) -> tuple[list[str], str | None]:
        """At exit, the unscored cases are said (at close they are what this mode is for)."""
        parts = [f"{unscored} captured case(s) are unscored (mode={self.name!r})"] if unscored and at_exit else []
        return parts + dropped_words(dropped), kept_where(self.kept)


class CaptureOnly(KeepOnly):
    """Mode "off": captures only. The cases are the caller's to use (``session.test_cases()``), not work left
    undone, so no store or ``max_kept`` is required and neither close nor exit calls them unscored."""

    needs_max_kept_without_store = False

    def report(self, unscored: int, dropped: int, at_exit: bool) -> tuple[list[str], str | None]:
        """Only the cases dropped to stay within ``max_kept`` are worth a word."""
        return dropped_words(dropped), kept_where(self.kept) if self.kept.store is not None else \
            "raise max_kept=... to keep more"

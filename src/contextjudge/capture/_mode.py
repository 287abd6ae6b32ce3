"""What a session's mode object does: the one small interface each capture mode implements.

A session picks its mode object at construction (``"background"``: ``BackgroundScoring``; ``"deferred"`` and
``"off"``: ``KeepOnly``; ``"worker"``: ``WorkerWriter``) and from then on only calls these methods; the mode owns its
own queue, thread or task, and shares the session's ``KeptCases`` (its lock, counters and kept cases).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ._case import CapturedCase
from ._kept import KeptCases

__all__ = ["CaptureMode", "dropped_words", "kept_where"]


class CaptureMode(Protocol):
    """The interface of a capture mode object."""

    name: str

    def submit(self, case: CapturedCase) -> None:
        """Take a case the sampling let through, on the app's thread: never blocks on a judge or (mode "worker")
        on the store."""

    def flush(self, deadline: float | None) -> bool:
        """Wait until every case taken is done with (scored; mode "worker": written); False at ``deadline``."""

    def wait_results(self, deadline: float | None) -> bool:
        """Wait until the results of the cases held for ``on_result`` came back (mode "worker"); False at
        ``deadline``."""

    def close(self, timeout: float | None) -> None:
        """Stop the mode's thread or task once it has done what it holds (it goes on after ``timeout``)."""

    def at_exit(self, left: Callable[[], float]) -> None:
        """At interpreter exit: finish what is pending within ``left()`` seconds, then stop."""

    def pending(self) -> int:
        """Cases waiting for a judge or being scored."""

    def in_flight(self) -> set[int]:
        """The ``id()``s of the cases waiting for a judge or being scored (lock held): ``score_deferred`` leaves
        them to the mode."""

    def check_score_deferred(self) -> None:
        """Raise when this mode cannot score in this process (``score_deferred``)."""

    def keep_unscored(self) -> int:
        """At close or exit: keep what is not done (in the store, when there is one); how many cases that is."""

    def end_status(self, left: int) -> str:
        """The run's status at its end, ``left`` being the cases of the run still unscored."""

    def report(self, unscored: int, dropped: int, at_exit: bool) -> tuple[list[str], str | None]:
        """What the close/exit summary says of ``unscored`` and ``dropped`` cases, and where the cases are (None:
        the store, or lost without one)."""


def kept_where(kept: KeptCases) -> str:
    """Where the unscored cases of a session that scores in process are: its store, or lost without one."""
    if kept.store is not None:
        return (f"the cases are in run {kept.run.id} of {kept.store!r}: `contextjudge score --run {kept.run.id}` "
                "scores them")
    return "without a store they are lost: call flush() before exiting, or pass store=... to keep them"


def dropped_words(dropped: int) -> list[str]:
    """The summary's words on the cases dropped to stay within the memory bounds."""
    return [f"{dropped} unscored case(s) were dropped to stay within max_kept/max_queue"] if dropped else []


"""No silent nothing: the app's top-level calls an integration saw end, and one warning when none retrieved."""

from __future__ import annotations

import logging
from typing import Any

from ._case import describe_seen
from ._kept import KeptCases

__all__ = ["RootWatch"]

logger = logging.getLogger("contextjudge")


class RootWatch:
    """Counts the app's root calls (``roots``, ``roots_without_retrieval`` in the session's counters) and warns
    once when ``warn_after`` of them have run and not one retrieved anything."""

    def __init__(self, kept: KeptCases, warn_after: int | None) -> None:
        self.kept = kept
        self.warn_after = warn_after if warn_after and warn_after > 0 else None
        self._seen: dict[str, dict[str, int]] = {}
        self._warned = False

    def note(self, retrievals: int, seen: dict[str, Any] | None = None, shapes: str = "") -> None:
        """One root call ended with ``retrievals`` retrievals; ``seen`` is what it ran (see
        ``CaptureSession.note_root``)."""
        warn = None
        counts = self.kept.counts
        with self.kept.lock:
            counts.roots += 1
            if retrievals:
                return
            counts.roots_without_retrieval += 1
            for kind, value in (seen or {}).items():
                bucket = self._seen.setdefault(kind, {})
                items = [(value, 1)] if isinstance(value, str) else (
                    [("", int(value))] if isinstance(value, int) else [(str(v), 1) for v in value or ()])
                for name, n in items:
                    if name in bucket or len(bucket) < 12:
                        bucket[name] = bucket.get(name, 0) + n
            if (self.warn_after is not None and not self._warned
                    and counts.roots_without_retrieval >= self.warn_after
                    and counts.roots == counts.roots_without_retrieval):
                self._warned = True
                warn = describe_seen(self._seen)
        if warn is not None:
            logger.warning(
                "contextjudge: %d calls of the app ran under capture and none retrieved anything that capture "
                "sees, so no test case was made. Seen: %s. Captured: %s. See 'What is captured' in the README "
                "(README.md#what-is-captured); session.counters['roots_without_retrieval'] counts these calls.",
                counts.roots_without_retrieval, warn, shapes or "retrievers and vector store searches")

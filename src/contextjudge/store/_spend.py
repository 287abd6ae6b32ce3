"""Judge spend per budget window in a store (``cj_spend``), shared by every process of an app that uses the store.

``judges/spend.py`` (the budget ledger) calls these. A reservation is one conditional UPDATE (or an insert for a new
window) that adds the call's estimated tokens and dollars only if the window's total stays within the limit, so two
processes cannot both take the last room in a window. Settling adds the difference between the real usage and the
estimate (it may be negative).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SpendStore"]


class SpendStore:
    """Mixed into ``ResultsStore``: the spend methods. ``self`` is the store."""

    def spend_reserve(self, scope: str, window: float, *, tokens: int, dollars: float = 0.0,
                      max_tokens: int | None = None, max_dollars: float | None = None) -> bool:
        """Add ``tokens``/``dollars`` to ``scope``'s row for ``window`` if the totals stay within ``max_tokens`` /
        ``max_dollars`` (None: no limit of that kind); True when reserved, False (and the refusal counted) when not."""
        raise NotImplementedError

    def spend_adjust(self, scope: str, window: float, *, tokens: int = 0, dollars: float = 0.0,
                     calls: int = 0) -> None:
        """Add (or, negative, take back) tokens, dollars and calls to ``scope``'s row for ``window``."""
        raise NotImplementedError

    def spend_get(self, scope: str, window: float) -> dict[str, Any] | None:
        """``{"tokens", "dollars", "calls", "refused"}`` of ``scope`` in ``window``, or None when nothing was spent."""
        raise NotImplementedError

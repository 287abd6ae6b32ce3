"""Judge spend per budget window in a store (``cj_spend``), shared by every process of an app that uses the store.

``judges/_spend.py`` (the budget ledger) calls these. A reservation is one conditional UPDATE (after an insert of the
window's row that does nothing when the row exists) that adds the call's estimated tokens and dollars only if the
window's total stays within the limit, so two processes cannot both take the last room in a window: on PostgreSQL
the second UPDATE waits for the first's row lock and re-checks its condition on the updated row; on SQLite writers
take the database's one write lock in turn. Settling adds the difference between the real usage and the estimate
(it may be negative).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import and_, select, update

from . import _schema as S
from ._base import StoreBase

__all__ = ["SpendStore"]


class SpendStore(StoreBase):
    """Mixed into ``ResultsStore``: the spend methods. ``self`` is the store."""

    def _spend_row(self, conn: Any, scope: str, window: float, now: float) -> None:
        conn.execute(self._q["spend_row"], {
            "scope": scope, "window": float(window), "tokens": 0, "dollars": 0.0, "calls": 0, "refused": 0,
            "updated_at": now})

    def spend_reserve(self, scope: str, window: float, *, tokens: int, dollars: float = 0.0,
                      max_tokens: int | None = None, max_dollars: float | None = None, calls: int = 0,
                      max_calls: int | None = None, count_refusal: bool = True) -> bool:
        """Add ``tokens``/``dollars``/``calls`` to ``scope``'s row for ``window`` if the totals stay within
        ``max_tokens`` / ``max_dollars`` / ``max_calls`` (None: no limit of that kind); True when reserved, False (and
        the refusal counted, unless ``count_refusal`` is False: a call that will wait for room) when not."""
        t = S.spend
        now = time.time()
        key = and_(t.c.scope == scope, t.c.window == float(window))
        conds = [key]
        if max_tokens is not None:
            conds.append(t.c.tokens + int(tokens) <= int(max_tokens))
        if max_dollars is not None:
            conds.append(t.c.dollars + float(dollars) <= float(max_dollars) + 1e-12)
        if max_calls is not None:
            conds.append(t.c.calls + int(calls) <= int(max_calls))
        with self._guard("reserve judge spend"), self._begin() as conn:
            self._spend_row(conn, scope, window, now)
            done = conn.execute(update(t).where(and_(*conds)).values(
                tokens=t.c.tokens + int(tokens), dollars=t.c.dollars + float(dollars), calls=t.c.calls + int(calls),
                updated_at=now)).rowcount
            if done:
                return True
            if count_refusal:
                conn.execute(update(t).where(key).values(refused=t.c.refused + 1, updated_at=now))
            return False

    def spend_adjust(self, scope: str, window: float, *, tokens: int = 0, dollars: float = 0.0,
                     calls: int = 0) -> None:
        """Add (or, negative, take back) tokens, dollars and calls to ``scope``'s row for ``window``."""
        t = S.spend
        now = time.time()
        with self._guard("record judge spend"), self._begin() as conn:
            self._spend_row(conn, scope, window, now)
            conn.execute(update(t).where(and_(t.c.scope == scope, t.c.window == float(window))).values(
                tokens=t.c.tokens + int(tokens), dollars=t.c.dollars + float(dollars), calls=t.c.calls + int(calls),
                updated_at=now))

    def spend_get(self, scope: str, window: float) -> dict[str, Any] | None:
        """``{"tokens", "dollars", "calls", "refused"}`` of ``scope`` in ``window``, or None when nothing was spent."""
        t = S.spend
        with self._guard("read judge spend"), self._begin(write=False) as conn:
            row = conn.execute(select(t.c.tokens, t.c.dollars, t.c.calls, t.c.refused).where(
                and_(t.c.scope == scope, t.c.window == float(window)))).first()
        if row is None:
            return None
        return {"tokens": int(row.tokens), "dollars": float(row.dollars), "calls": int(row.calls),
                "refused": int(row.refused)}

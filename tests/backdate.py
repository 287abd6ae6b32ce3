"""Back-dating a test store's captures: what tests of trends and alerts need to spread cases over calendar days."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

__all__ = ["backdate_days"]


def backdate_days(store: Any, days: int, day0: float, day: float = 86400.0) -> None:
    """Move the cases keyed ``d{N}-...`` to day N after ``day0`` (a minute in, then one second apart by position), and
    their results with them: judged ten minutes later, and ``captured_at`` (the column trends read, schema 4) set to
    their case's capture time."""
    with store.engine.begin() as conn:
        for d in range(days):
            at = day0 + d * day + 60
            conn.execute(text("UPDATE cj_cases SET created_at = :at + position % 1000 WHERE case_key LIKE :k"),
                         {"at": at, "k": f"d{d}-%"})
            conn.execute(text("UPDATE cj_results SET created_at = :at + 600, captured_at = (SELECT c.created_at FROM "
                              "cj_cases c WHERE c.run_id = cj_results.run_id AND c.case_key = cj_results.case_key) "
                              "WHERE case_key LIKE :k"),
                         {"at": at, "k": f"d{d}-%"})

"""What integrations register on a session: hand-overs of cases they still assemble, and hooks run at close."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["IntegrationHooks"]

logger = logging.getLogger("contextjudge")


class IntegrationHooks:
    """An integration's ``sync()`` (a quick hand-over before cases are read), ``drain(timeout)`` (all it holds,
    before flush, close and exit) and close hooks; a hook that raises is logged, and the others still run."""

    def __init__(self) -> None:
        self.syncs: list[Callable[[], Any]] = []
        self.drains: list[Callable[[float | None], Any]] = []
        self.close_hooks: list[Callable[[], Any]] = []

    def sync(self) -> None:
        """Run every sync."""
        for sync in list(self.syncs):
            try:
                sync()
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: an integration could not hand over its captured cases")

    def drain(self, timeout: float | None) -> bool:
        """Run every drain within ``timeout``; False when one of them could not hand everything over in time."""
        ok = True
        deadline = None if timeout is None else time.monotonic() + timeout
        for drain in list(self.drains):
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ok = drain(left) is not False and ok
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: an integration could not hand over its captured cases")
        return ok

    def closed(self) -> None:
        """Run every close hook (closing never raises into the app)."""
        for hook in list(self.close_hooks):
            try:
                hook()
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: a capture close hook failed")

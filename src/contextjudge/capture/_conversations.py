"""Idle conversations: an integration's open conversations, submitted once they have had no turn for a while."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["IdleConversations", "idle_seconds"]

logger = logging.getLogger("contextjudge")


def idle_seconds(idle: Any) -> float | None:
    """``conversation_idle`` checked: seconds (a number >= 0), or None for 0/None (at flush/close only)."""
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float)) or idle < 0):
        raise ConfigurationError(f"conversation_idle must be a number of seconds >= 0 (0 or None: submit "
                                 f"conversations only at flush/close), not {idle!r}.")
    return float(idle) if idle else None


class IdleConversations:
    """When each open conversation of an integration last had a turn, and a call when it has had none for ``idle``
    seconds.

    A long-running service never closes its conversations, so an integration cannot wait for ``close()`` to submit
    them: it calls ``touch(key)`` with each turn (a dict write under a lock), and a daemon thread
    (``contextjudge-conversations``, started with the first open conversation, gone when none is left) calls
    ``on_idle(key)`` for each conversation idle for ``idle`` seconds, off the request path. ``idle=None`` (or 0):
    never; the conversations are then submitted only at ``flush``/``close``. ``run_due(now)`` does the thread's
    work at once (tests drive it with a fake ``clock``). ``on_idle`` failures are logged, never raised.
    """

    def __init__(self, on_idle: Callable[[Any], Any], idle: float | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_idle = on_idle
        self.idle = idle_seconds(idle)
        self.clock = clock
        self._last: dict[Any, float] = {}  # oldest activity first (a touch moves its key to the end)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        """How many conversations are watched."""
        return len(self._last)

    def touch(self, key: Any) -> None:
        """A turn of conversation ``key`` now."""
        if self.idle is None:
            return
        with self._cond:
            self._last.pop(key, None)
            self._last[key] = self.clock()
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="contextjudge-conversations", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # interpreter shutdown: exit's drain submits what is open
                    return
                self._thread = thread

    def discard(self, key: Any) -> None:
        """Stop watching conversation ``key`` (it was submitted or closed)."""
        with self._cond:
            self._last.pop(key, None)

    def due(self, now: float | None = None) -> list[Any]:
        """Take the conversations idle at ``now`` (default: the clock) off the watch; oldest first."""
        if self.idle is None:
            return []
        with self._cond:
            now = self.clock() if now is None else now
            out = []
            for key, last in self._last.items():
                if now - last < self.idle:
                    break  # ordered by activity: the rest are more recent
                out.append(key)
            for key in out:
                del self._last[key]
            return out

    def run_due(self, now: float | None = None) -> int:
        """Call ``on_idle`` for each conversation idle now; how many."""
        keys = self.due(now)
        for key in keys:
            try:
                self.on_idle(key)
            except Exception:  # noqa: BLE001 - capture never breaks the app
                logger.exception("contextjudge: could not submit an idle conversation")
        return len(keys)

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._last:
                        self._thread = None
                        return
                    wait = next(iter(self._last.values())) + (self.idle or 0.0) - self.clock()
                    if wait > 0:
                        self._cond.wait(min(wait, 60.0))
                        continue
                self.run_due()
        except Exception:  # noqa: BLE001 - never an unhandled exception in a thread of the user's app
            logger.exception("contextjudge: the idle-conversation watch failed; conversations are submitted at "
                             "flush or close only")
            with self._cond:
                self._thread = None


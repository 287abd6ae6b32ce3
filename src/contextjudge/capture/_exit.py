"""Exit handling: every capture session not closed is closed when the interpreter exits.

A session registers its own exit method (``register(session.method)``); this module holds it weakly (a session
dropped by the app is not kept alive for exit) and calls every live one at exit, first among the shared loop's
``before_shutdown`` hooks, else from ``threading``'s exit hooks, which run before ``concurrent.futures`` stops taking
work (the judge calls and store writes still pending at exit need thread pools); ``atexit`` is the fallback.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .._aio import before_shutdown

__all__ = ["register"]

logger = logging.getLogger("contextjudge")

_hooks: dict[int, weakref.WeakMethod] = {}
# re-entrant: a session collected while this thread holds the lock (a collection can run inside any allocation made
# under it) drops its hook through ``gone`` in this same thread
_lock = threading.RLock()
_registered = False


def register(at_exit: Callable[[], Any]) -> None:
    """Call the bound method ``at_exit`` at interpreter exit while its object lives (held by a weak reference)."""
    global _registered  # noqa: PLW0603 - one exit hook per process
    key = id(at_exit.__self__)  # type: ignore[attr-defined]

    def gone(ref: Any, key: int = key) -> None:
        with _lock:
            if _hooks.get(key) is ref:  # not the hook of a newer session that was given the same id
                _hooks.pop(key, None)

    hook = weakref.WeakMethod(at_exit, gone)
    with _lock:
        _hooks[key] = hook
        if _registered:
            return
        _registered = True
    # registered before the shared loop's own exit hook can be (the loop starts with the first case), so it runs
    # after it at exit... unless the loop already exists: _aio runs its before-exit hooks first
    before_shutdown(close_all)
    register_hook = getattr(threading, "_register_atexit", None)
    try:
        if register_hook is None:
            raise RuntimeError
        register_hook(close_all)
    except RuntimeError:  # threading is already shutting down, or no such hook on this Python
        atexit.register(close_all)


def close_all() -> None:
    """Run the exit method of every live session registered (each once: a session's method returns at once when
    it is closed). Failures are logged, never raised into the interpreter's exit."""
    with _lock:
        hooks = list(_hooks.values())
    for ref in hooks:
        method = ref()
        if method is None:
            continue
        try:
            method()
        except Exception:  # noqa: BLE001 - never fail the interpreter's exit
            logger.exception("contextjudge: could not close a capture session at exit")

"""The one event loop the sync facades run on: a process-wide loop owned by a daemon thread.

Every sync entry point (``evaluate``, ``measure``, ``assert_test``, capture scoring, the CLI) hands its coroutine
to this loop and blocks until it is done. One long-lived loop, not ``asyncio.run`` per call, because provider
clients cache state bound to the loop that first used them (langchain-openai keeps one async HTTP client per base
URL): a second ``asyncio.run`` would meet a client bound to a closed loop. Created on first use, reused, stopped at
interpreter exit. No nest_asyncio: a caller that already runs a loop (Jupyter, FastAPI) blocks its own thread while
this loop works, which is what a sync call means; async callers should ``await`` the async forms instead.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import SyncCallOnLoopError

T = TypeVar("T")

__all__ = ["before_shutdown", "loop_thread", "run_sync", "shared_loop", "submit"]

logger = logging.getLogger("contextjudge")


class _LoopThread:
    """A daemon thread running one event loop forever; started on first use, restarted if it was shut down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._atexit = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and not loop.is_closed() and self._thread is not None and self._thread.is_alive():
            return loop
        with self._lock:
            loop = self._loop
            if loop is None or loop.is_closed() or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(target=self._main, args=(loop, ready), name="contextjudge-loop",
                                                daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                if not self._atexit:
                    atexit.register(self.shutdown)
                    self._atexit = True
        return loop

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
            loop.close()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel what still runs, stop the loop and wait for its thread (at most ``timeout`` seconds).

        The ``before_shutdown`` hooks run first (capture sessions hand over and store their cases at exit, which
        needs the loop), whichever of their ``atexit`` registrations and the loop's came first."""
        for hook in list(_BEFORE):
            try:
                hook()
            except Exception:  # noqa: BLE001 - never fail the interpreter's exit
                logger.exception("contextjudge: an exit hook failed")
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = None
        if loop is None or loop.is_closed() or thread is None:
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)

        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - the loop may already be stopping
            pass
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            return
        if thread is not threading.current_thread():
            thread.join(timeout)


_LOOP = _LoopThread()
_BEFORE: list[Any] = []


def before_shutdown(hook: Any) -> None:
    """Run ``hook()`` before the shared loop stops at interpreter exit (it must be safe to call twice)."""
    if hook not in _BEFORE:
        _BEFORE.append(hook)


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process-wide loop (started on first use)."""
    return _LOOP.loop


def loop_thread() -> threading.Thread | None:
    return _LOOP.thread


def submit(coro: Coroutine[Any, Any, T], context: contextvars.Context | None = None
           ) -> concurrent.futures.Future[T]:
    """Start ``coro`` on the shared loop and return its future; cancelling the future cancels the task.

    The task runs in a copy of the caller's context variables (``asyncio.run_coroutine_threadsafe`` schedules
    it through a handle that copies them), or in a copy of ``context`` when given.
    """
    loop = shared_loop()
    if context is not None:
        return context.copy().run(asyncio.run_coroutine_threadsafe, coro, loop)
    return asyncio.run_coroutine_threadsafe(coro, loop)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared loop and return its result; the caller's thread blocks until it is done.

    Works from plain code, from several threads at once, and from inside a running loop of the caller's own
    (Jupyter, FastAPI). Raises ``SyncCallOnLoopError`` when called from code running on the shared loop itself
    (a callback of ours calling a sync facade), which could only deadlock.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None and running is _LOOP._loop:  # noqa: SLF001
        coro.close()
        raise SyncCallOnLoopError(
            "A sync contextjudge call (evaluate, measure, assert_test, flush) was made from code running on "
            "contextjudge's own event loop, where it would wait for itself forever. Await the async form instead "
            "(aevaluate, a_measure, aflush).")
    fut = submit(coro)
    try:
        return fut.result()
    except BaseException:
        fut.cancel()  # KeyboardInterrupt or similar while waiting: stop the work too (a no-op once done)
        raise

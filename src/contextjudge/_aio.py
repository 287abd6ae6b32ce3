"""The one event loop the sync facades run on (a process-wide loop owned by a daemon thread), and the thread pool
every store call made from a coroutine runs in (``in_store_thread``, ``AsyncStore``).

Every sync entry point (``evaluate``, ``measure``, ``assert_test``, capture scoring, the CLI) hands its coroutine
to this loop and blocks until it is done. One long-lived loop, not ``asyncio.run`` per call, because provider
clients cache state bound to the loop that first used them (langchain-openai keeps one async HTTP client per base
URL): a second ``asyncio.run`` would meet a client bound to a closed loop. Created on first use, reused, stopped at
interpreter exit. No nest_asyncio: a caller that already runs a loop (Jupyter, FastAPI) blocks its own thread while
this loop works, which is what a sync call means; async callers should ``await`` the async forms instead.

A coroutine never calls the store's blocking methods itself: with PostgreSQL each call is a round trip, and on the
shared loop it would hold up every judge call in flight. It awaits them through ``in_store_thread(fn, *args)`` or
an ``AsyncStore`` (the same methods, awaitable), which run them in one bounded pool of ``STORE_THREADS`` threads
(``contextjudge-store``), fewer than the store's connection pool holds, so a call never waits for a connection; a
SQLite store's own methods run in one thread of their own (``contextjudge-store-sqlite``).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import functools
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .errors import SyncCallOnLoopError

T = TypeVar("T")

__all__ = ["STORE_THREADS", "AsyncStore", "before_shutdown", "in_store_thread", "loop_thread", "run_sync",
           "shared_loop", "store_submit", "submit"]

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


# ------------------------------------------------------------------------------------------------ the store's threads
STORE_THREADS = 8
"""How many store calls run at once for coroutines: below SQLAlchemy's default connection pool (5 + 10 overflow),
which the store's other threads (a capture writer, a worker's heartbeat) also draw from."""

_POOLS: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool_for(fn: Callable[..., Any]) -> concurrent.futures.ThreadPoolExecutor:
    """The pool a call goes to: one thread for the methods of a store whose ``serial_calls`` is true (a SQLite
    store: its writers take turns anyway, and threads that only wait for each other's turn cost more than they save,
    as docs/performance.md measures), the ``STORE_THREADS`` pool for everything else (PostgreSQL round trips
    overlap)."""
    lane = "sqlite" if getattr(getattr(fn, "__self__", None), "serial_calls", False) is True else "shared"
    pool = _POOLS.get(lane)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.get(lane)
            if pool is None:
                pool = _POOLS[lane] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1 if lane == "sqlite" else STORE_THREADS,
                    thread_name_prefix="contextjudge-store" + ("-sqlite" if lane == "sqlite" else ""))
    return pool


def _forget_store_pools() -> None:
    # a forked child has none of its parent's threads: it starts pools of its own on first use
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_store_pools)


def store_submit(fn: Callable[..., T], *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
    """Start ``fn(*args, **kwargs)`` (a blocking store call) in the store's threads, in a copy of the caller's
    context variables, and return its future without waiting. At interpreter exit, when no thread may be started
    any more, it runs here and now instead (nothing is dropped)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    try:
        return _pool_for(fn).submit(call)
    except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            done.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
            done.set_exception(exc)
        return done


async def in_store_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, a blocking store call, run in the store's threads while the event loop goes on."""
    return await asyncio.wrap_future(store_submit(fn, *args, **kwargs))


class AsyncStore:
    """The awaitable face of a store: ``await AsyncStore(store).save_result(...)`` runs ``store.save_result(...)`` in
    the store's threads (``in_store_thread``). Any object with blocking methods can be wrapped (a ``ResultsStore``,
    a verdict-cache backend); ``sync`` is the object itself."""

    __slots__ = ("sync",)

    def __init__(self, store: Any) -> None:
        self.sync = store

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name == "sync":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        method = getattr(self.sync, name)
        if not callable(method):
            raise AttributeError(f"{type(self.sync).__name__}.{name} is not a method; read it from .sync")

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await in_store_thread(method, *args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def __repr__(self) -> str:
        return f"AsyncStore({self.sync!r})"

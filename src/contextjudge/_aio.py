"""Running the async core from sync code, including from inside a running event loop (Jupyter, FastAPI).

No nest_asyncio: when the calling thread already runs a loop, the coroutine runs on a fresh loop in a worker
thread, with the caller's context variables copied over, and the caller blocks until it is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")

__all__ = ["run_sync"]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result, whether or not a loop is running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextjudge") as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()

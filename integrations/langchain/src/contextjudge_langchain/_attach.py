"""Attaching the handler without changing the app: ``capture()`` for a block, ``instrument()`` for the process.

Both work through LangChain's ``register_configure_hook``: every time LangChain configures the callbacks of a run,
it asks the registered hooks for a handler to add. ``capture()`` answers from a ContextVar, so only runs started
inside the block (and the tasks and threads that copy its context) are captured. ``instrument()`` answers from a
process-wide slot. The hooks are registered once per process, on first use, under a lock.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar, Token
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook

from contextjudge.capture import CaptureSession
from contextjudge.errors import ConfigurationTypeError

from . import _vectorstores
from ._handler import ContextJudgeCallbackHandler

__all__ = ["capture", "current_handler", "instrument", "uninstrument"]

_capture_var: ContextVar[ContextJudgeCallbackHandler | None] = ContextVar("contextjudge_langchain_capture",
                                                                          default=None)


class _ProcessSlot:
    """The handler ``instrument()`` installed, read by LangChain's configure hook like a ContextVar."""

    def __init__(self) -> None:
        self._handler: ContextJudgeCallbackHandler | None = None
        self.lock = threading.Lock()

    def get(self, default: Any = None) -> ContextJudgeCallbackHandler | None:
        return self._handler

    def swap(self, handler: ContextJudgeCallbackHandler | None) -> ContextJudgeCallbackHandler | None:
        with self.lock:
            old, self._handler = self._handler, handler
            return old


_process_slot = _ProcessSlot()


class _NoHandler(BaseCallbackHandler):
    """What LangChain's configure hook adds when the process slot emptied between its two reads of it.

    LangChain reads a hook's variable twice (``if var.get() is not None: handler = var.get() or handle_class()``); a
    ContextVar cannot change between the two, but the process slot can: ``uninstrument()`` in another thread empties
    it. Without a class here LangChain calls ``None()`` and the user's run fails with a TypeError; with it the run gets
    a handler that does nothing, as it would a moment later."""
_hooks_lock = threading.Lock()
_hooks_registered = False


def _ensure_hooks() -> None:
    global _hooks_registered  # noqa: PLW0603 - LangChain's hook list is process-wide, so this flag is too
    with _hooks_lock:
        if _hooks_registered:
            return
        register_configure_hook(_capture_var, True)
        register_configure_hook(_process_slot, True, _NoHandler)  # type: ignore[arg-type] - duck-types ContextVar.get
        _hooks_registered = True


def _make_handler(handler: ContextJudgeCallbackHandler | None, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> ContextJudgeCallbackHandler:
    if handler is not None:
        if args or kwargs:
            raise ConfigurationTypeError("pass either handler= or the handler's arguments (metrics, model, mode...), "
                                         "not both.")
        return handler
    return ContextJudgeCallbackHandler(*args, **kwargs)


class capture:  # noqa: N801 - used like a function: `with capture(...) as session:`
    """Capture every LangChain run started inside the block, with no change to the chain's code.

        with capture(metrics=[...], model="local", goldens="goldens.jsonl") as session:
            chain.invoke("How many PTO days do I get?")
        print(session.results)

    Takes the handler's arguments, or ``handler=`` an existing one. ``session`` is the handler. On leaving the
    block the open conversations are closed and, with ``wait=True`` (the default), the pending scores are waited
    for (``async with`` waits without blocking the loop).
    """

    def __init__(self, *args: Any, handler: ContextJudgeCallbackHandler | None = None, wait: bool = True,
                 **kwargs: Any) -> None:
        self.handler = _make_handler(handler, args, kwargs)
        self.wait = wait
        self._tokens: list[Token] = []

    def __enter__(self) -> ContextJudgeCallbackHandler:
        _ensure_hooks()
        self.handler.acquire_vector_stores()  # a handler reused after uninstrument() released it captures again
        self._tokens.append(_capture_var.set(self.handler))
        return self.handler

    def __exit__(self, *exc: Any) -> None:
        _capture_var.reset(self._tokens.pop())
        if self.wait:
            self.handler.flush()
        else:
            self.handler.submit_conversations()

    async def __aenter__(self) -> ContextJudgeCallbackHandler:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        _capture_var.reset(self._tokens.pop())
        if self.wait:
            await self.handler.aflush()
        else:
            self.handler.submit_conversations()


def instrument(*args: Any, handler: ContextJudgeCallbackHandler | None = None,
               **kwargs: Any) -> CaptureSession:
    """Capture every LangChain run in this process from now on; returns the ``CaptureSession`` (results, flush,
    close), the same kind of object LlamaIndex's ``instrument()`` returns. Its ``handler`` is the callback handler.

    Takes the handler's arguments, or ``handler=`` an existing one. Calling it again replaces the handler.
    """
    _ensure_hooks()
    new = _make_handler(handler, args, kwargs)
    new.acquire_vector_stores()  # a handler installed again after uninstrument() captures like the first time
    old = _process_slot.swap(new)
    if old is not None and old is not new:
        old.release_vector_stores()
    return new.session


def uninstrument() -> CaptureSession | None:
    """Stop the process-wide capture; returns the session that was installed, if any (its results stay there)."""
    old = _process_slot.swap(None)
    if old is not None:
        old.submit_conversations()
        old.release_vector_stores()
        return old.session
    return None


def current_handler() -> ContextJudgeCallbackHandler | None:
    """The handler capturing in this context: the ``capture()`` block's, else the process's, else None."""
    return _capture_var.get() or _process_slot.get()


_vectorstores.register(current_handler=current_handler)

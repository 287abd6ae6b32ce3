"""Vector stores called directly: ``vector_store.similarity_search(question)`` in a graph node, a tool or a function.

LangChain fires no callback for a ``VectorStore`` method (only a ``BaseRetriever`` reports its documents), so this
is the one place contextjudge patches LangChain: the search methods below, on ``VectorStore`` and on every subclass
that defines its own (``InMemoryVectorStore``, Chroma, PGVector...), and on subclasses defined later (through
``VectorStore.__init_subclass__``). The patch is put on while a ``ContextJudgeCallbackHandler`` is live (made
directly, by ``capture()`` or by ``instrument()``) and taken off, every original restored, when the last one is
closed, uninstrumented or garbage-collected: with capture off, LangChain runs its own functions and pays nothing.

A patched call, inside a run a contextjudge handler captures, is recorded on that handler as a retriever run (a
child of the run that made the call: the graph node, the tool, the lambda) with the documents in rank order and,
for the ``*_with_score`` forms, their scores; the handler then assembles it exactly like a retriever's run. A call
outside any run, while ``capture()`` or ``instrument()`` is on, is a root of its own (like a bare retriever).
Not recorded: a call made by a retriever (``VectorStoreRetriever`` calls ``similarity_search``; its own run is
already the retrieval) and the calls a search method makes of another (``similarity_search`` calling
``similarity_search_with_score``): the outermost call is the retrieval.

Every wrapper calls through unchanged on any failure of its own; an error raised by the vector store is re-raised
as it was, after the retrieval is recorded as failed. Recording never changes what the app gets: a result that can
be read only once (a generator, ``zip(docs, scores)``) is read here and handed over as a fresh iterator over the same
items (see ``_read``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import Any
from uuid import uuid4

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.vectorstores import VectorStore

__all__ = ["SEARCH_METHODS", "acquire", "in_retriever", "is_patched", "release"]

logger = logging.getLogger("contextjudge")

# method -> how its result reads: "docs" (a list of Documents) or "pairs" (a list of (Document, score))
SEARCH_METHODS: dict[str, str] = {
    "similarity_search": "docs",
    "similarity_search_with_score": "pairs",
    "similarity_search_with_relevance_scores": "pairs",
    "similarity_search_by_vector": "docs",
    "max_marginal_relevance_search": "docs",
    "max_marginal_relevance_search_by_vector": "docs",
}
SEARCH_METHODS.update({"a" + name: kind for name, kind in list(SEARCH_METHODS.items())})

# > 0 while a retriever run (recorded by a contextjudge handler) or a patched search call is open in this context
in_retriever: ContextVar[int] = ContextVar("contextjudge_in_retriever", default=0)

_lock = threading.RLock()  # re-entrant: a handler collected while the lock is held releases through it
_holders: weakref.WeakSet[Any] = weakref.WeakSet()
_patched: list[tuple[type, str, Any]] = []  # (class, method name, what its __dict__ held before)
_WRAPPED = "__contextjudge_wrapped__"
# Set by the modules that import this one (never imported from here, so there is no import circle): the handler
# class (``_handler``, once it is defined) and the function that gives the current capture()/instrument() handler
# (``_attach``).
_handler_cls: Any = None
_current_handler: Callable[[], Any] = lambda: None


def register(*, handler_cls: Any = None, current_handler: Callable[[], Any] | None = None) -> None:
    """Tell this module the handler class and the current-handler function (see above)."""
    global _handler_cls, _current_handler  # noqa: PLW0603 - set once, at import of the modules that own them
    if handler_cls is not None:
        _handler_cls = handler_cls
    if current_handler is not None:
        _current_handler = current_handler


def is_patched() -> bool:
    """Whether the vector store methods are patched now."""
    return bool(_patched)


def acquire(holder: Any) -> None:
    """``holder`` (a handler) needs vector store calls captured: patch them if they are not yet."""
    with _lock:
        if holder not in _holders:
            _holders.add(holder)
            weakref.finalize(holder, _collected)  # a handler dropped without close(): the patch goes with it
        if not _patched:
            _patch_all()


def _collected() -> None:
    with _lock:  # iterating yields only live holders (the collected one's entry may not be removed yet)
        if _patched and next(iter(_holders), None) is None:
            _unpatch_all()


def release(holder: Any) -> None:
    """``holder`` no longer needs them; restore LangChain's own methods when no live holder is left."""
    with _lock:
        _holders.discard(holder)
        if _patched and not len(_holders):
            _unpatch_all()


# ---------------------------------------------------------------------------------------------------- patching
def _classes() -> list[type]:
    out, todo = [], [VectorStore]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


def _patch_class(cls: type) -> None:
    for name, kind in SEARCH_METHODS.items():
        fn = cls.__dict__.get(name)
        if fn is None or not callable(fn) or getattr(fn, _WRAPPED, False):
            continue
        wrapped = _wrap_async(fn, name, kind) if inspect.iscoroutinefunction(fn) else _wrap_sync(fn, name, kind)
        setattr(wrapped, _WRAPPED, True)
        _patched.append((cls, name, fn))
        setattr(cls, name, wrapped)


def _patch_all() -> None:
    for cls in _classes():
        _patch_class(cls)
    original = VectorStore.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:  # a vector store class defined while patched
        if original is not None:
            original.__func__(cls, **kwargs)
        else:
            super(VectorStore, cls).__init_subclass__(**kwargs)
        with _lock:
            if _patched:
                _patch_class(cls)

    _patched.append((VectorStore, "__init_subclass__", original))
    VectorStore.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


def _unpatch_all() -> None:
    for cls, name, original in reversed(_patched):
        if original is None:
            try:
                delattr(cls, name)
            except AttributeError:
                pass
        else:
            setattr(cls, name, original)
    _patched.clear()
    # a wrapper copied while patched (``similarity_search = InMemoryVectorStore.similarity_search`` in a subclass's
    # body, or set on a class later) was never put there by us: its own original goes back in its place too
    for cls in _classes():
        for name, value in list(vars(cls).items()):
            if getattr(value, _WRAPPED, False):
                setattr(cls, name, value.__wrapped__)


# ---------------------------------------------------------------------------------------------------- recording
def _target() -> tuple[list[Any], Any, list[str], dict[str, Any]] | None:
    """(contextjudge handlers, parent run id, tags, metadata) of the run this call is made in; or the current
    ``capture()``/``instrument()`` handler with no parent (the call is a root); None when nothing captures it."""
    ContextJudgeCallbackHandler, current_handler = _handler_cls, _current_handler
    if ContextJudgeCallbackHandler is None:  # no handler was ever defined: nothing captures
        return None
    config = var_child_runnable_config.get()
    manager = config.get("callbacks") if config else None
    if isinstance(manager, BaseCallbackManager):
        handlers = [h for h in manager.handlers if isinstance(h, ContextJudgeCallbackHandler)]
        if handlers and manager.parent_run_id is not None:
            return handlers, manager.parent_run_id, list(manager.tags), dict(manager.metadata)
    elif isinstance(manager, list):  # a config whose callbacks were not configured yet
        handlers = [h for h in manager if isinstance(h, ContextJudgeCallbackHandler)]
        if handlers:
            return handlers, None, list(config.get("tags") or ()), dict(config.get("metadata") or {})
    handler = current_handler()
    if handler is not None:
        return [handler], None, [], {}
    return None


def _query_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    value = args[0] if args else kwargs.get("query", kwargs.get("embedding"))
    return value if isinstance(value, str) else ""  # a vector: the case's input is the run's question


def _start(store: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[Any, Any]] | None:
    """Open a retriever run on each capturing handler; [(handler, run id)], or None when nothing captures."""
    if in_retriever.get():
        return None
    try:
        target = _target()
        if target is None:
            return None
        handlers, parent, tags, metadata = target
        name = type(store).__name__
        meta = {**metadata, "ls_retriever_name": "vectorstore", "ls_vector_store_provider": name,
                "contextjudge_vector_store_call": method}
        query = _query_of(args, kwargs)
        opened = []
        for handler in handlers:
            run_id = uuid4()
            handler._open("retriever", run_id, parent, tags, meta, name, {"query": query})  # noqa: SLF001
            opened.append((handler, run_id))
        return opened
    except Exception:  # noqa: BLE001 - capture never breaks the app
        logger.exception("contextjudge: could not record a vector store call")
        return None


def _end(opened: list[tuple[Any, Any]], kind: str, items: list[Any], error: BaseException | None) -> None:
    try:
        for handler, run_id in opened:
            if error is not None:
                handler._close(run_id, error=error)  # noqa: SLF001
            elif kind == "pairs":
                handler._close(run_id, {"documents": [p[0] for p in items],  # noqa: SLF001
                                        "scores": [p[1] for p in items]})
            else:
                handler._close(run_id, {"documents": items})  # noqa: SLF001
    except Exception:  # noqa: BLE001
        logger.exception("contextjudge: could not record a vector store call's documents")


# ---------------------------------------------------------------------------------------------------- reading
# The app gets exactly what the store returned: the same object when it can be read twice (a list, a tuple), else
# (a generator, ``zip(docs, scores)``, an async generator) a fresh iterator over the very items the store yielded,
# read once here to record them, ending as the store's did (with its error, if reading it raised one).
def _replay(items: list[Any], error: BaseException | None) -> Iterator[Any]:
    yield from items
    if error is not None:
        raise error


async def _areplay(items: list[Any], error: BaseException | None) -> AsyncIterator[Any]:
    for item in items:
        yield item
    if error is not None:
        raise error


def _read(result: Any) -> tuple[list[Any], Any, BaseException | None]:
    """(the items to record, what the app gets, the error reading the store's iterator raised)."""
    if result is None:
        return [], result, None
    if isinstance(result, list | tuple):
        return list(result), result, None
    try:
        iterator = iter(result)
    except TypeError:  # not iterable (an async iterator, a foreign object): handed over untouched, nothing recorded
        return [], result, None
    if iterator is not result:  # a re-readable collection: read a copy, hand over the original
        try:
            return list(iterator), result, None
        except Exception:  # noqa: BLE001 - capture never breaks the app
            logger.exception("contextjudge: could not read a vector store call's documents")
            return [], result, None
    items: list[Any] = []
    try:
        for item in iterator:
            items.append(item)
    except Exception as exc:  # noqa: BLE001 - the app meets this error where it would have: after these items
        return items, _replay(items, exc), exc
    return items, _replay(items, None), None


async def _aread(result: Any) -> tuple[list[Any], Any, BaseException | None]:
    if not hasattr(result, "__anext__"):
        return _read(result)
    items: list[Any] = []
    try:
        async for item in result:
            items.append(item)
    except Exception as exc:  # noqa: BLE001
        return items, _areplay(items, exc), exc
    return items, _areplay(items, None), None


class _Searching:
    """Around one outermost search: a retriever is open (``in_retriever``, so the searches it makes inside are not
    recorded again), and a search that raises is ended with its error."""

    def __init__(self, opened: Any, kind: str) -> None:
        self.opened, self.kind = opened, kind

    def __enter__(self) -> None:
        self.token = in_retriever.set(in_retriever.get() + 1)

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        try:
            if exc is not None:
                _end(self.opened, self.kind, [], exc)
        finally:
            in_retriever.reset(self.token)


def _wrap_sync(fn: Callable[..., Any], method: str, kind: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def search(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened = _start(self, method, args, kwargs)
        if opened is None:
            return fn(self, *args, **kwargs)
        with _Searching(opened, kind):  # a lazy result is read inside, so its searches are not recorded twice
            items, result, error = _read(fn(self, *args, **kwargs))
        _end(opened, kind, items, error)
        return result

    return search


def _wrap_async(fn: Callable[..., Any], method: str, kind: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def asearch(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened = _start(self, method, args, kwargs)
        if opened is None:
            return await fn(self, *args, **kwargs)
        with _Searching(opened, kind):
            items, result, error = await _aread(await fn(self, *args, **kwargs))
        _end(opened, kind, items, error)
        return result

    return asearch

"""``deepeval.tracing`` names: ``observe``, ``update_current_span``, ``update_current_trace``.

``observe`` is contextjudge's (``contextjudge._tracing.observe``): spans nest by call and spans that carry metrics
are scored. One addition for DeepEval's pytest form: under pytest, a top-level call of an observed function made
outside any evaluation is recorded as a trace of the running test, so that
``assert_test(golden=golden, metrics=[...])`` after ``app(golden.input)`` in the test body scores it, as in
DeepEval 4.x. Outside pytest an observed function outside an evaluation costs one ContextVar look-up, as before.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..._tracing import Trace, _trace, update_current_span, update_current_trace
from ..._tracing import observe as _observe

__all__ = ["observe", "take_recorded_trace", "update_current_span", "update_current_trace",
           "update_retriever_span"]

_recorded: dict[str, Trace] = {}
_lock = threading.Lock()


def _test_id() -> str | None:
    current = os.environ.get("PYTEST_CURRENT_TEST")
    return current.rsplit(" (", 1)[0] if current else None


def _remember(test: str, trace: Trace) -> None:
    with _lock:
        _recorded.clear()  # only the running test's last trace is kept
        _recorded[test] = trace


def take_recorded_trace() -> Trace | None:
    """The trace of the last top-level observed call in the running pytest test (and forget it), or None."""
    test = _test_id()
    with _lock:
        return _recorded.pop(test, None) if test else None


def observe(_func: Callable[..., Any] | None = None, *, metrics: Sequence[Any] | None = None, name: str | None = None,
            type: str | None = None, **kwargs: Any) -> Any:  # noqa: A002 - DeepEval's parameter name
    """DeepEval's ``@observe`` (``metrics``, ``name``, ``type``; ``metric_collection`` and others are ignored)."""

    def decorate(fn: Callable[..., Any]) -> Any:
        inner = _observe(fn, metrics=metrics, name=name, type=type, **kwargs)
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            return inner  # generators: spans inside an evaluation, no pytest recording

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def arun(*args: Any, **kw: Any) -> Any:
                test = _test_id() if _trace.get() is None else None
                if test is None:
                    return await inner(*args, **kw)
                trace = Trace()
                token = _trace.set(trace)
                try:
                    trace.output = await inner(*args, **kw)
                    return trace.output
                finally:
                    _trace.reset(token)
                    _remember(test, trace)

            return arun

        @functools.wraps(fn)
        def run(*args: Any, **kw: Any) -> Any:
            test = _test_id() if _trace.get() is None else None
            if test is None:
                return inner(*args, **kw)
            trace = Trace()
            token = _trace.set(trace)
            try:
                trace.output = inner(*args, **kw)
                return trace.output
            finally:
                _trace.reset(token)
                _remember(test, trace)

        return run

    if _func is not None and callable(_func):
        return decorate(_func)
    return decorate


def update_retriever_span(**_: Any) -> None:
    """DeepEval's retriever-span extras (embedder, top_k, chunk_size): accepted, not used by the context metrics."""

"""Component-level evaluation: ``@observe`` turns the functions of an app into spans, and spans with metrics are scored.

    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model="local")])
    def retrieve(question: str) -> list[str]:
        return search(question)                 # a retriever span's return value is its retrieval_context

    @observe(metrics=[ContextualPrecisionMetric(model="local")])
    def answer(question: str) -> str:
        docs = retrieve(question)
        text = generate(question, docs)
        update_current_span(input=question, actual_output=text, retrieval_context=docs)
        return text

    result = evaluate(observed_callback=answer, goldens=[Golden(input="...", expected_output="...")])

``evaluate(observed_callback=app, goldens=[...])`` calls ``app(golden.input)`` once per golden inside a trace,
collects every span that carries metrics, fills a span's missing ``expected_output`` (and ``context``) from its
golden, and scores them into one ``EvaluationResult`` (and store), like any other test cases.

Spans nest by call: the current trace and span live in ContextVars, so concurrent asyncio tasks never mix their
spans, and a task started inside a span is that span's child. When no evaluation is running, an observed function
costs one ContextVar lookup and is otherwise called as it is; ``update_current_span`` does nothing. A plain thread
started inside the app does not inherit the span (ContextVars do not cross threads); use
``contextvars.copy_context().run`` or ``asyncio.to_thread``, which copy them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from .cases.goldens import Golden, load_goldens
from .cases.identity import GOLDEN_ID_KEY

__all__ = ["Golden", "Span", "Trace", "current_span", "observe", "update_current_span", "update_current_trace"]

logger = logging.getLogger("contextjudge")

F = TypeVar("F", bound=Callable[..., Any])

_TEST_CASE_FIELDS = ("input", "actual_output", "expected_output", "retrieval_context", "context", "name",
                     "additional_metadata", "tags")


@dataclass
class Span:
    """One call of an observed function: its name, type, metrics, what it received and returned, and its test case."""

    name: str
    type: str | None = None
    metrics: list[Any] = field(default_factory=list)
    id: int = 0
    parent: Span | None = field(default=None, repr=False)
    children: list[Span] = field(default_factory=list, repr=False)
    arguments: dict[str, Any] = field(default_factory=dict, repr=False)
    output: Any = field(default=None, repr=False)
    error: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    test_case: Any = None
    started: float = 0.0
    ended: float | None = None

    @property
    def path(self) -> str:
        """The names of this span and its ancestors, outermost first: ``"app > retrieve"``."""
        names = []
        s: Span | None = self
        while s is not None:
            names.append(s.name)
            s = s.parent
        return " > ".join(reversed(names))


@dataclass
class Trace:
    """Everything one run of the app produced for one golden: its spans in start order, and trace-level fields."""

    golden: Golden | None = None
    index: int = 0
    spans: list[Span] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    test_case: Any = None
    output: Any = None
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ids: Any = field(default_factory=itertools.count, repr=False)

    def _add(self, span: Span) -> None:
        with self._lock:  # an app may run observed code in threads that copied the context
            span.id = next(self._ids)
            self.spans.append(span)
            if span.parent is not None:
                span.parent.children.append(span)

    @property
    def roots(self) -> list[Span]:
        return [s for s in self.spans if s.parent is None]


_trace: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("contextjudge_trace", default=None)
_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar("contextjudge_span", default=None)


def current_span() -> Span | None:
    """The span of the observed function running now, or None (always None when no evaluation is running)."""
    return _span.get()


# ----------------------------------------------------------------------------------------------------- @observe
def observe(_func: Callable[..., Any] | None = None, *, metrics: Sequence[Any] | None = None, name: str | None = None,
            type: str | None = None, **_ignored: Any) -> Any:  # noqa: A002 - DeepEval's parameter name
    """Decorate a function (sync, async, generator or async generator) so each call is a span of the current trace.

    ``metrics`` score the span's test case (set with ``update_current_span``, or taken from the call: see
    ``Span`` defaults in the module doc); ``name`` defaults to the function's name; ``type`` is free text, and
    ``"retriever"`` makes the function's returned list the span's retrieval_context. Works bare (``@observe``) too.
    Extra DeepEval keywords (``metric_collection``, ...) are accepted and ignored.
    """
    if _ignored:
        logger.debug("contextjudge: observe() ignores %s", sorted(_ignored))

    def decorate(fn: F) -> F:
        fn_name: str = getattr(fn, "__name__", "span")
        span_name = name or fn_name
        span_metrics = list(metrics or [])
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None

        def opened(trace: Trace, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Span:
            span = Span(name=span_name, type=type, metrics=list(span_metrics), parent=_span.get(),
                        arguments=_bind(signature, args, kwargs), started=time.perf_counter())
            trace._add(span)  # noqa: SLF001 - the trace is ours
            return span

        # functools.wraps gave the wrapper fn's name, doc and signature, and it takes fn's arguments: it is an F
        return cast(F, _wrapper_for(fn, opened))

    if _func is not None and callable(_func):
        return decorate(_func)
    return decorate


_Opener = Callable[[Trace, tuple[Any, ...], dict[str, Any]], Span]


def _wrapper_for(fn: Callable[..., Any], opened: _Opener) -> Callable[..., Any]:
    """The wrapper that makes each call of ``fn`` a span, by the kind of function it is."""
    if inspect.isasyncgenfunction(fn):
        return _agen_wrapper(fn, opened)
    if inspect.isgeneratorfunction(fn):
        return _gen_wrapper(fn, opened)
    if inspect.iscoroutinefunction(fn):
        return _async_wrapper(fn, opened)
    return _sync_wrapper(fn, opened)


def _agen_wrapper(fn: Callable[..., Any], opened: _Opener) -> Callable[..., Any]:
    """An async generator function's wrapper: each item is produced inside the span; the span's output is all of them."""
    @functools.wraps(fn)
    async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
        trace = _trace.get()
        if trace is None:
            async for item in fn(*args, **kwargs):
                yield item
            return
        span = opened(trace, args, kwargs)
        gen = fn(*args, **kwargs)
        with _Spanned(span, items=True) as call:
            while True:
                with _Current(span):
                    try:
                        item = await gen.__anext__()
                    except StopAsyncIteration:
                        break
                call.items.append(item)
                yield item

    return agen_wrapper


def _gen_wrapper(fn: Callable[..., Any], opened: _Opener) -> Callable[..., Any]:
    """A generator function's wrapper: each item is produced inside the span; the span's output is all of them."""
    @functools.wraps(fn)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
        trace = _trace.get()
        if trace is None:
            return (yield from fn(*args, **kwargs))
        span = opened(trace, args, kwargs)
        gen = fn(*args, **kwargs)
        with _Spanned(span, items=True) as call:
            while True:
                with _Current(span):
                    try:
                        item = next(gen)
                    except StopIteration as stop:
                        return stop.value
                call.items.append(item)
                yield item

    return gen_wrapper


def _async_wrapper(fn: Callable[..., Any], opened: _Opener) -> Callable[..., Any]:
    """A coroutine function's wrapper: the awaited call is the span."""
    @functools.wraps(fn)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        trace = _trace.get()
        if trace is None:
            return await fn(*args, **kwargs)
        span = opened(trace, args, kwargs)
        with _Spanned(span) as call, _Current(span):
            call.output = await fn(*args, **kwargs)
            return call.output

    return async_wrapper


def _sync_wrapper(fn: Callable[..., Any], opened: _Opener) -> Callable[..., Any]:
    """A plain function's wrapper: the call is the span."""
    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        trace = _trace.get()
        if trace is None:
            return fn(*args, **kwargs)
        span = opened(trace, args, kwargs)
        with _Spanned(span) as call, _Current(span):
            call.output = fn(*args, **kwargs)
            return call.output

    return sync_wrapper


class _Current:
    """Inside the block, ``span`` is the current span (what a nested ``@observe`` call opens its own under)."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> None:
        self.token = _span.set(self.span)

    def __exit__(self, *exc: object) -> None:
        _span.reset(self.token)


class _Spanned:
    """One observed call or generator as its span: an exception leaving the block is the span's error (a generator
    closed before its end, ``GeneratorExit``, is none), and the span is closed on the way out with ``output`` (a
    generator's: the ``items`` it produced, joined when they are all text)."""

    def __init__(self, span: Span, *, items: bool = False) -> None:
        self.span, self.generator = span, items
        self.items: list[Any] = []
        self.output: Any = None

    def __enter__(self) -> _Spanned:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if exc is not None and not (self.generator and isinstance(exc, GeneratorExit)):
            self.span.error = f"{type_name(exc)}: {exc}"
        _close(self.span, _joined(self.items) if self.generator else self.output)


def type_name(exc: BaseException) -> str:
    return type(exc).__name__


def _close(span: Span, output: Any) -> None:
    span.output = output
    span.ended = time.perf_counter()


def _joined(pieces: list[Any]) -> Any:
    if pieces and all(isinstance(p, str) for p in pieces):
        return "".join(pieces)
    return pieces


def _bind(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if signature is None:
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    return dict(bound.arguments)


# ------------------------------------------------------------------------------------------- update the span/trace
def _fields(test_case: Any, input: Any, output: Any, actual_output: Any, expected_output: Any,  # noqa: A002
            retrieval_context: Any, context: Any, name: Any, metadata: Any, extra: dict[str, Any]) -> dict[str, Any]:
    given = {"input": input, "actual_output": actual_output if actual_output is not None else output,
             "expected_output": expected_output, "retrieval_context": retrieval_context, "context": context,
             "name": name, "additional_metadata": metadata}
    out = {k: v for k, v in given.items() if v is not None}
    if extra:
        logger.debug("contextjudge: update_current_span ignores %s (not used by the context metrics)", sorted(extra))
    return out


def update_current_span(test_case: Any = None, *, input: Any = None, output: Any = None,  # noqa: A002
                        actual_output: Any = None, expected_output: Any = None, retrieval_context: Any = None,
                        context: Any = None, name: str | None = None, metadata: dict[str, Any] | None = None,
                        metrics: Sequence[Any] | None = None, **extra: Any) -> None:
    """Set the test case of the current span: a whole ``test_case=LLMTestCase(...)``, or the fields one by one.

    ``output`` is DeepEval's spelling of ``actual_output``. ``metrics`` adds metrics to the span. Fields not used by
    the context metrics (tools_called, ...) are accepted and ignored. Does nothing when no evaluation is running or
    when called outside an observed function.
    """
    span = _span.get()
    if span is None:
        return
    if test_case is not None:
        span.test_case = test_case
    span.fields.update(_fields(test_case, input, output, actual_output, expected_output, retrieval_context, context,
                               name, metadata, extra))
    if metrics:
        span.metrics.extend(metrics)


def update_current_trace(test_case: Any = None, *, input: Any = None, output: Any = None,  # noqa: A002
                         actual_output: Any = None, expected_output: Any = None, retrieval_context: Any = None,
                         context: Any = None, name: str | None = None, metadata: dict[str, Any] | None = None,
                         **extra: Any) -> None:
    """Set the end-to-end test case of the current trace (scored by the ``metrics=`` given to ``evaluate``)."""
    trace = _trace.get()
    if trace is None:
        return
    if test_case is not None:
        trace.test_case = test_case
    trace.fields.update(_fields(test_case, input, output, actual_output, expected_output, retrieval_context, context,
                                name, metadata, extra))


# ------------------------------------------------------------------------------------------- running over goldens
def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - the method is what is tested


async def run_traces(callback: Callable[..., Any], goldens: Any, *, max_concurrency: int = 16) -> list[Trace]:
    """Call ``callback(golden.input)`` once per golden, each inside its own trace, and return the traces in order.

    An async callback runs for up to ``max_concurrency`` goldens at once, each in its own task (so its own
    context); a sync callback runs for one golden at a time in a worker thread. An exception from the app is
    recorded on its trace (``trace.error``) and the run goes on.
    """
    items = list(load_goldens(goldens)) if goldens is not None else []
    if not items:
        from .errors import ContextJudgeError  # noqa: PLC0415

        raise ContextJudgeError("evaluate(observed_callback=...) needs goldens=[Golden(input=...), ...] to call the "
                                "app with.")
    traces = [Trace(golden=g, index=i) for i, g in enumerate(items)]

    def golden_input(trace: Trace) -> Any:
        assert trace.golden is not None  # noqa: S101 - every trace above was built from a golden
        return trace.golden.input

    def failed(trace: Trace, exc: BaseException) -> None:
        trace.error = f"{type_name(exc)}: {exc}"
        logger.warning("contextjudge: the observed app raised on golden %d (%r): %s", trace.index,
                       trace.golden.input if trace.golden else None, trace.error)

    if _is_async_callable(callback):
        limit = asyncio.Semaphore(max(1, max_concurrency))

        async def run_async(trace: Trace) -> None:
            async with limit:
                token = _trace.set(trace)  # this task's own context: concurrent goldens never share a trace
                try:
                    trace.output = await callback(golden_input(trace))
                except Exception as exc:  # noqa: BLE001 - one failing golden never stops the run
                    failed(trace, exc)
                finally:
                    _trace.reset(token)

        await asyncio.gather(*(run_async(t) for t in traces))
        return traces

    def run_sync(trace: Trace) -> None:
        token = _trace.set(trace)
        try:
            out = callback(golden_input(trace))
            if inspect.isawaitable(out):  # a sync function that returns a coroutine
                out = asyncio.run(_awaited(out))
            trace.output = out
        except Exception as exc:  # noqa: BLE001
            failed(trace, exc)
        finally:
            _trace.reset(token)

    for t in traces:
        await asyncio.to_thread(run_sync, t)
    return traces


async def _awaited(aw: Any) -> Any:
    return await aw


# ------------------------------------------------------------------------------------------ spans to test cases
@dataclass
class ObservedCase:
    """A test case made from a span (or a whole trace), with the metrics that score it, or why it could not be made."""

    test_case: Any
    metrics: list[Any]
    trace: Trace
    span: Span | None = None
    error: str | None = None
    name: str | None = None


def _default_input(span: Span) -> str | None:
    for key, value in span.arguments.items():
        if key in ("self", "cls"):
            continue
        if isinstance(value, str) and value.strip():
            return value
    return None


def _retrieval_of(span: Span) -> Any:
    if "retrieval_context" in span.fields:
        return span.fields["retrieval_context"]
    if span.test_case is not None and getattr(span.test_case, "retrieval_context", None) is not None:
        return span.test_case.retrieval_context
    if span.type == "retriever" and isinstance(span.output, (list, tuple)):
        return list(span.output)
    return None


def _with_golden(tc: Any, golden: Golden | None, extra_meta: dict[str, Any], name: str | None) -> Any:
    update: dict[str, Any] = {}
    if golden is not None:
        if not getattr(tc, "expected_output", None) and golden.expected_output:
            update["expected_output"] = golden.expected_output
        if not getattr(tc, "context", None) and golden.context:
            update["context"] = list(golden.context)
    if not getattr(tc, "name", None) and name:
        update["name"] = name
    update["additional_metadata"] = {**(getattr(tc, "additional_metadata", None) or {}), **extra_meta}
    return tc.model_copy(update=update)


def _build(fields: dict[str, Any], given: Any, defaults: dict[str, Any]) -> Any:
    from .cases.testcase import LLMTestCase  # noqa: PLC0415

    if given is not None:
        if fields:  # fields set one by one after a whole test case override it
            data = {k: v for k, v in given.model_dump().items() if v is not None}
            data.update({k: v for k, v in fields.items() if k in _TEST_CASE_FIELDS})
            return type(given)(**data)
        return given
    data = {k: v for k, v in defaults.items() if v is not None}
    data.update({k: v for k, v in fields.items() if k in _TEST_CASE_FIELDS})
    return LLMTestCase(**data)


def _meta(trace: Trace, span: Span | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"trace_index": trace.index}
    if trace.golden is not None:
        meta["golden_input"] = trace.golden.input
        if trace.golden.id:
            meta[GOLDEN_ID_KEY] = trace.golden.id
    if span is not None:
        meta.update({"span": span.name, "span_path": span.path, "span_type": span.type})
        if span.error:
            meta["span_error"] = span.error
    return meta


def observed_cases(traces: Sequence[Trace], metrics: Sequence[Any] | None = None) -> list[ObservedCase]:
    """The test cases to score: one per span that carries metrics, and one per trace when ``metrics`` are given.

    A span's test case is ``update_current_span(test_case=...)`` with any fields set one by one on top, else
    built from those fields with defaults: ``input`` = the first string argument of the call (else the golden's
    input), ``actual_output`` = the return value when it is a string, ``retrieval_context`` = the returned list
    for a ``type="retriever"`` span. A missing ``expected_output`` (and ``context``) is filled from the golden. A
    trace's test case comes from ``update_current_trace``, else: the golden's input, the app's return value, and
    the retrieval of the first span that has one.
    """
    from .errors import ContextJudgeError  # noqa: PLC0415

    out: list[ObservedCase] = []
    for trace in traces:
        golden = trace.golden
        for span in trace.spans:
            if not span.metrics:
                continue
            out_text = span.output if isinstance(span.output, str) else None
            defaults = {"input": _default_input(span) or (golden.input if golden else None),
                        "actual_output": out_text, "retrieval_context": _retrieval_of(span)}
            name = f"{span.name} [{golden.input if golden else trace.index}]"
            try:
                tc = _build(span.fields, span.test_case, defaults)
                tc = _with_golden(tc, golden, _meta(trace, span), name)
                out.append(ObservedCase(tc, list(span.metrics), trace, span, name=name))
            except (ContextJudgeError, TypeError, ValueError) as exc:
                out.append(ObservedCase(None, list(span.metrics), trace, span, name=name,
                                        error=f"span {span.path!r} has no usable test case: {exc}"))
        if metrics and (trace.fields or trace.test_case is not None or trace.spans):
            first = next((r for r in (_retrieval_of(s) for s in trace.spans) if r is not None), None)
            defaults = {"input": golden.input if golden else None,
                        "actual_output": trace.output if isinstance(trace.output, str) else None,
                        "retrieval_context": first}
            name = f"trace [{golden.input if golden else trace.index}]"
            try:
                tc = _build(trace.fields, trace.test_case, defaults)
                tc = _with_golden(tc, golden, _meta(trace, None), name)
                out.append(ObservedCase(tc, list(metrics), trace, None, name=name))
            except (ContextJudgeError, TypeError, ValueError) as exc:
                out.append(ObservedCase(None, list(metrics), trace, None, name=name,
                                        error=f"the trace has no usable test case: {exc}"))
        if trace.error:
            out.append(ObservedCase(None, [], trace, None, name=f"app [{golden.input if golden else trace.index}]",
                                    error=f"the app raised: {trace.error}"))
    return out

"""What ``contextjudge eval --app module:object`` uses to run goldens through a LlamaIndex app.

Registered under the entry-point group ``contextjudge.apps`` as ``llama_index``. Importing this module does not
import LlamaIndex: ``matches`` looks at class names only, and ``collect`` imports what it needs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from contextjudge.capture import AppAdapter, CapturedCase, GoldenFailure, no_retrieval_message
from contextjudge.cases.identity import GOLDEN_ID_KEY
from contextjudge.cases.provenance import GOLDEN_INDEX_KEY, NO_RETRIEVAL_KEY
from contextjudge.errors import ConfigurationTypeError
from contextjudge.goldens import Goldens, load_goldens

from ._kinds import INPUT_FIELDS as _INPUT_FIELDS
from ._kinds import KINDS as _KINDS
from ._kinds import MODULES as _MODULES

__all__ = ["LlamaIndexAppAdapter", "adapter"]

logger = logging.getLogger("contextjudge")

ACCEPTS = ("a LlamaIndex query engine, chat engine or retriever, an agent (FunctionAgent, ReActAgent, AgentWorkflow) "
           "or a workflow (a llama_index.core.workflow.Workflow)")


def _kind(obj: Any) -> str | None:
    for c in type(obj).__mro__:
        k = _KINDS.get(c.__name__)
        if k is not None and c.__module__.startswith(_MODULES):
            return k
    return None


def _start_kwargs(workflow: Any, text: str) -> dict[str, Any]:
    """The keyword arguments of ``workflow.run`` that carry a golden's input.

    Agents take ``user_msg``. A workflow whose StartEvent subclass declares fields gets the text in the first of
    ``user_msg``, ``query``, ``input``, ``question``, ``message``... it declares, else in its only required field. A
    workflow on the plain ``StartEvent`` gets it under each of those usual names (its steps read the one they use).
    """
    if any(c.__name__ in ("BaseWorkflowAgent", "AgentWorkflow") for c in type(workflow).__mro__):
        return {"user_msg": text}
    cls = getattr(workflow, "start_event_class", None)
    declared = dict(getattr(cls, "model_fields", {}) or {})
    for name in _INPUT_FIELDS:
        if name in declared:
            return {name: text}
    required = [n for n, f in declared.items() if f.is_required()]
    if len(required) == 1:
        return {required[0]: text}
    if required:
        raise ConfigurationTypeError(
            f"{type(workflow).__name__} starts with {cls.__name__}, whose required fields {required} do not say which "
            f"one takes the golden's input: name one of them {' or '.join(_INPUT_FIELDS[:4])}, or point --app at a "
            "factory that returns a workflow whose start event has one input field.")
    return {name: text for name in _INPUT_FIELDS[:4]}


def _answer(result: Any) -> str | None:
    """The text of what an app call returned (a response, an agent's output, a workflow's result)."""
    from ._snapshots import as_text  # noqa: PLC0415

    try:
        return None if result is None else as_text(result)
    except Exception:  # noqa: BLE001
        return None


class LlamaIndexAppAdapter(AppAdapter):
    """Runs goldens through a LlamaIndex query engine, chat engine, retriever, agent or workflow, capturing with
    mode "off"."""

    name = "llama_index"
    accepts = ACCEPTS

    def matches(self, obj: Any) -> bool:
        return _kind(obj) is not None

    def collect(self, obj: Any, goldens: Goldens | Any, *, concurrency: int = 4,
                progress: Callable[[], Any] | None = None) -> list[CapturedCase | GoldenFailure]:
        """The captured cases of every golden, in the goldens' order, with expected_output filled from the golden,
        and a ``GoldenFailure`` for each golden whose call raised.

        Query engines and retrievers run ``concurrency`` goldens at a time (threads); a chat engine runs them one
        after another, each as a fresh one-turn conversation (``reset()`` before each). Agents and workflows run
        ``concurrency`` goldens at a time on one event loop of their own (in a worker thread, so that clients an app
        binds to its loop see one loop), each with ``run(user_msg=...)`` on a fresh context. An agent gives one case
        per retrieval its tools ran, with the golden's input as the case's input and the agent's answer as its
        output. A golden whose call captured no retrieval gives a case without retrieval_context (its metrics then
        say so), so that no golden is left out in silence. ``progress()`` is called as each golden finishes.
        """
        from ._wrappers import EvaluatedChatEngine, EvaluatedQueryEngine  # noqa: PLC0415

        goldens = load_goldens(goldens)
        if isinstance(obj, (EvaluatedQueryEngine, EvaluatedChatEngine)):
            obj = obj._engine  # noqa: SLF001 - capture into this run, not the wrapper's scorer
        kind = _kind(obj)
        if kind is None:
            raise ConfigurationTypeError(
                f"{type(obj).__module__}.{type(obj).__name__} is not something the LlamaIndex adapter runs: point "
                f"--app at {ACCEPTS} (for example index.as_query_engine(), or a FunctionAgent).")
        return _GoldenRuns(obj, kind, goldens, concurrency=concurrency, progress=progress).collect()


class _GoldenRuns:
    """One ``collect``: runs every golden through the app, and gathers its cases, its failures and its answers."""

    def __init__(self, obj: Any, kind: str, goldens: Goldens, *, concurrency: int,
                 progress: Callable[[], Any] | None) -> None:
        from contextjudge.capture import CaptureSession  # noqa: PLC0415

        from ._sinks import CaseSink  # noqa: PLC0415

        self.obj, self.kind, self.goldens = obj, kind, goldens
        self.concurrency, self.progress = concurrency, progress
        self.scorer = CaptureSession(metrics=[], goldens=goldens, mode="off", max_kept=None)  # bounded by the goldens
        self.sink = CaseSink(self.scorer)
        self.ran: dict[int, dict[str, Any]] = {}  # what each golden's run ran, when it retrieved nothing
        self.failures: dict[int, GoldenFailure] = {}
        self.answers: dict[int, str | None] = {}
        self.lock = threading.Lock()
        self.indices = range(len(goldens.items))

    def collect(self) -> list[CapturedCase | GoldenFailure]:
        """Every golden's cases (or its failure), in the goldens' order."""
        from ._capture import router  # noqa: PLC0415

        router.acquire()
        try:
            self.run_all()
        finally:
            router.release()
        cases: list[Any] = self.scorer.ready_cases()  # assembled here, after the runs: one failing to assemble is left out
        self.scorer.close()
        seen = {c.metadata.get(GOLDEN_INDEX_KEY) for c in cases}
        for i in self.indices:
            if i in self.failures:
                cases.append(self.failures[i])
            elif i not in seen and self.kind != "retrieve":
                cases.append(self.without_retrieval(i))
        return sorted(cases, key=_position)

    def run_all(self) -> None:
        """Runs the goldens: workflows on a loop of their own, a chat engine one by one, the rest in threads."""
        if self.kind == "workflow":
            # A loop of its own, in a thread: collect may be called from code that already runs a loop.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextjudge-app") as pool:
                pool.submit(asyncio.run, self.all_workflows()).result()
        elif self.kind == "chat" or self.concurrency <= 1:
            for i in self.indices:
                self.run(i)
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="contextjudge-app") as pool:
                list(pool.map(self.run, self.indices))

    def without_retrieval(self, i: int) -> CapturedCase:
        """The case of a golden whose call captured no retrieval: its answer, and a note that says why."""
        from contextjudge import LLMTestCase  # noqa: PLC0415

        from ._kinds import SHAPES  # noqa: PLC0415

        g = self.goldens.items[i]
        meta: dict[str, Any] = {"source": "llama_index", "kind": self.kind, "engine": type(self.obj).__name__,
                                NO_RETRIEVAL_KEY: no_retrieval_message(self.ran.get(i), SHAPES)}
        tc = LLMTestCase(input=g.input, actual_output=self.answers.get(i), expected_output=g.expected_output,
                         additional_metadata=meta)
        return CapturedCase(test_case=tc, source="llama_index", metadata={GOLDEN_INDEX_KEY: i}, golden_id=g.id)

    def tags_of(self, i: int) -> dict[str, Any]:
        """The instrumentation tags of golden ``i``'s run: its index, and its id when it has one."""
        from ._record import GOLDEN_INDEX_TAG  # noqa: PLC0415

        g = self.goldens.items[i]
        tags: dict[str, Any] = {GOLDEN_INDEX_TAG: i}
        if g.id:
            tags[GOLDEN_ID_KEY] = g.id  # the one golden key
        return tags

    def done(self, i: int, result: Any = None, error: BaseException | None = None) -> None:
        """Records how golden ``i``'s call ended (its answer, or its failure), and reports progress."""
        with self.lock:
            if error is not None:
                g = self.goldens.items[i]
                # the failure is returned (an error case the CLI counts and shows), so only a debug line here
                logger.debug("contextjudge: golden %s (%r) failed in the app: %r", g.id or i, g.input[:60], error)
                self.failures[i] = GoldenFailure(golden=g, index=i, error=error)
            else:
                self.answers[i] = _answer(result)
        if self.progress is not None:
            try:
                self.progress()
            except Exception:  # noqa: BLE001 - a progress bar never stops the run
                logger.debug("contextjudge: progress callback failed", exc_info=True)

    def call(self, i: int) -> Any:
        """Golden ``i`` through a chat engine (as a fresh conversation), a query engine or a retriever."""
        g = self.goldens.items[i]
        if self.kind == "chat":
            self.obj.reset()
            return self.obj.chat(g.input)
        if self.kind == "query":
            return self.obj.query(g.input)
        return self.obj.retrieve(g.input)

    def run(self, i: int) -> None:
        """Runs golden ``i`` through a chat engine, a query engine or a retriever, capturing into its own sink."""
        from ._instrument import instrument_tags  # noqa: PLC0415
        from ._record import current_sink  # noqa: PLC0415

        token = current_sink.set(_golden_sink(self, i))
        try:
            with instrument_tags(self.tags_of(i)):
                result = self.call(i)
        except Exception as exc:  # noqa: BLE001 - one failing golden does not stop the run
            self.done(i, error=exc)
        else:
            self.done(i, result)
        finally:
            current_sink.reset(token)

    async def arun(self, i: int, slots: asyncio.Semaphore) -> None:
        """Runs golden ``i`` through an agent or workflow (``run(...)`` on a fresh context), in this task's context."""
        from ._instrument import instrument_tags  # noqa: PLC0415
        from ._record import current_sink  # noqa: PLC0415

        g = self.goldens.items[i]
        async with slots:
            token = current_sink.set(_golden_sink(self, i))  # this task's own context: goldens never mix
            try:
                with instrument_tags(self.tags_of(i)):
                    handler = self.obj.run(**_start_kwargs(self.obj, g.input))
                result = await handler
            except Exception as exc:  # noqa: BLE001
                self.done(i, error=exc)
            else:
                self.done(i, result)
            finally:
                current_sink.reset(token)

    async def all_workflows(self) -> None:
        """Runs every golden through an agent or workflow, ``concurrency`` at a time."""
        slots = asyncio.Semaphore(max(1, self.concurrency))
        await asyncio.gather(*(self.arun(i, slots) for i in self.indices))


@functools.cache
def _golden_sink_class() -> type:
    """The sink class a golden's run captures into (made on first use: ``Sink`` lives with the capture code)."""
    from ._record import Sink  # noqa: PLC0415

    class GoldenSink(Sink):
        """The golden's own door to the sink: it knows which golden a run that retrieved nothing was."""

        def __init__(self, runs: _GoldenRuns, i: int) -> None:
            self.runs = runs
            self.i = i

        def deliver(self, record: Any) -> None:
            self.runs.sink.deliver(record)

        def deliver_turn(self, turn: Any) -> None:
            self.runs.sink.deliver_turn(turn)

        def note_root(self, retrievals: int, seen: dict[str, Any] | None) -> None:
            if not retrievals and seen:
                self.runs.ran[self.i] = seen

    return GoldenSink


def _golden_sink(runs: _GoldenRuns, i: int) -> Any:
    """The sink of golden ``i``'s run in ``runs``."""
    return _golden_sink_class()(runs, i)


def _position(c: Any) -> int:
    """Where a case or failure sorts: its golden's index (cases without one last)."""
    if isinstance(c, GoldenFailure):
        return c.index
    idx = c.metadata.get(GOLDEN_INDEX_KEY)
    return idx if isinstance(idx, int) else 1 << 30


adapter = LlamaIndexAppAdapter()

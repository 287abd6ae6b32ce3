"""What ``contextjudge eval --app module:object`` uses to run goldens through a LlamaIndex app.

Registered under the entry-point group ``contextjudge.apps`` as ``llama_index``. Importing this module does not
import LlamaIndex: ``matches`` looks at class names only, and ``collect`` imports what it needs.
"""

from __future__ import annotations

import asyncio
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
    from ._capture import _text  # noqa: PLC0415

    try:
        return None if result is None else _text(result)
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
        from contextjudge import LLMTestCase  # noqa: PLC0415
        from contextjudge.capture import CaptureSession  # noqa: PLC0415

        from ._capture import GOLDEN_INDEX_TAG, SHAPES, Sink, current_sink, router  # noqa: PLC0415  # noqa: PLC0415
        from ._instrument import instrument_tags  # noqa: PLC0415
        from ._results import CaseSink  # noqa: PLC0415
        from ._wrappers import EvaluatedChatEngine, EvaluatedQueryEngine  # noqa: PLC0415

        goldens = load_goldens(goldens)
        if isinstance(obj, (EvaluatedQueryEngine, EvaluatedChatEngine)):
            obj = obj._engine  # noqa: SLF001 - capture into this run, not the wrapper's scorer
        kind = _kind(obj)
        if kind is None:
            raise ConfigurationTypeError(
                f"{type(obj).__module__}.{type(obj).__name__} is not something the LlamaIndex adapter runs: point "
                f"--app at {ACCEPTS} (for example index.as_query_engine(), or a FunctionAgent).")
        scorer = CaptureSession(metrics=[], goldens=goldens, mode="off", max_kept=None)  # bounded by the goldens
        sink = CaseSink(scorer)
        ran: dict[int, dict[str, Any]] = {}  # what each golden's run ran, when it retrieved nothing

        class GoldenSink(Sink):
            """The golden's own door to the sink: it knows which golden a run that retrieved nothing was."""

            def __init__(self, i: int) -> None:
                self.i = i

            def deliver(self, record: Any) -> None:
                sink.deliver(record)

            def deliver_turn(self, turn: Any) -> None:
                sink.deliver_turn(turn)

            def note_root(self, retrievals: int, seen: dict[str, Any] | None) -> None:
                if not retrievals and seen:
                    ran[self.i] = seen

        failures: dict[int, GoldenFailure] = {}
        answers: dict[int, str | None] = {}
        lock = threading.Lock()

        def tags_of(i: int) -> dict[str, Any]:
            g = goldens.items[i]
            tags: dict[str, Any] = {GOLDEN_INDEX_TAG: i}
            if g.id:
                tags[GOLDEN_ID_KEY] = g.id  # the one golden key
            return tags

        def done(i: int, result: Any = None, error: BaseException | None = None) -> None:
            with lock:
                if error is not None:
                    g = goldens.items[i]
                    # the failure is returned (an error case the CLI counts and shows), so only a debug line here
                    logger.debug("contextjudge: golden %s (%r) failed in the app: %r", g.id or i, g.input[:60], error)
                    failures[i] = GoldenFailure(golden=g, index=i, error=error)
                else:
                    answers[i] = _answer(result)
            if progress is not None:
                try:
                    progress()
                except Exception:  # noqa: BLE001 - a progress bar never stops the run
                    logger.debug("contextjudge: progress callback failed", exc_info=True)

        def run(i: int) -> None:
            g = goldens.items[i]
            token = current_sink.set(GoldenSink(i))
            try:
                with instrument_tags(tags_of(i)):
                    if kind == "chat":
                        obj.reset()
                        result = obj.chat(g.input)
                    elif kind == "query":
                        result = obj.query(g.input)
                    else:
                        result = obj.retrieve(g.input)
            except Exception as exc:  # noqa: BLE001 - one failing golden does not stop the run
                done(i, error=exc)
            else:
                done(i, result)
            finally:
                current_sink.reset(token)

        async def arun(i: int, slots: asyncio.Semaphore) -> None:
            g = goldens.items[i]
            async with slots:
                token = current_sink.set(GoldenSink(i))  # this task's own context: goldens never mix
                try:
                    with instrument_tags(tags_of(i)):
                        handler = obj.run(**_start_kwargs(obj, g.input))
                    result = await handler
                except Exception as exc:  # noqa: BLE001
                    done(i, error=exc)
                else:
                    done(i, result)
                finally:
                    current_sink.reset(token)

        async def all_workflows(indices: range) -> None:
            slots = asyncio.Semaphore(max(1, concurrency))
            await asyncio.gather(*(arun(i, slots) for i in indices))

        router.acquire()
        try:
            indices = range(len(goldens.items))
            if kind == "workflow":
                # A loop of its own, in a thread: collect may be called from code that already runs a loop.
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextjudge-app") as pool:
                    pool.submit(asyncio.run, all_workflows(indices)).result()
            elif kind == "chat" or concurrency <= 1:
                for i in indices:
                    run(i)
            else:
                with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="contextjudge-app") as pool:
                    list(pool.map(run, indices))
        finally:
            router.release()
        cases: list[Any] = scorer.ready_cases()  # assembled here, after the runs: one failing to assemble is left out
        scorer.close()
        seen = {c.metadata.get(GOLDEN_INDEX_KEY) for c in cases}
        for i in indices:
            if i in failures:
                cases.append(failures[i])
            elif i not in seen and kind != "retrieve":
                g = goldens.items[i]
                meta: dict[str, Any] = {"source": "llama_index", "kind": kind, "engine": type(obj).__name__,
                                        NO_RETRIEVAL_KEY: no_retrieval_message(ran.get(i), SHAPES)}
                tc = LLMTestCase(input=g.input, actual_output=answers.get(i), expected_output=g.expected_output,
                                 additional_metadata=meta)
                cases.append(CapturedCase(test_case=tc, source="llama_index", metadata={GOLDEN_INDEX_KEY: i},
                                          golden_id=g.id))

        def position(c: Any) -> int:
            if isinstance(c, GoldenFailure):
                return c.index
            idx = c.metadata.get(GOLDEN_INDEX_KEY)
            return idx if isinstance(idx, int) else 1 << 30

        return sorted(cases, key=position)


adapter = LlamaIndexAppAdapter()

"""``contextjudge eval --app module:app``: run goldens through a LangChain Runnable (a chain, a retriever, a LangGraph
compiled graph, a ``create_agent`` agent) and capture what it retrieved."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from contextjudge import LLMTestCase
from contextjudge.capture import AppAdapter, CapturedCase, GoldenFailure, no_retrieval_message
from contextjudge.cases.identity import GOLDEN_ID_KEY
from contextjudge.cases.provenance import GOLDEN_INDEX_KEY, NO_RETRIEVAL_KEY
from contextjudge.goldens import Golden, Goldens, load_goldens

from ._assemble import final_answer
from ._handler import SHAPES, ContextJudgeCallbackHandler

__all__ = ["LangChainAppAdapter", "adapter", "golden_input"]

_INPUT_KEYS = ("question", "input", "query", "user_input", "q")


def _is_graph(runnable: Any) -> bool:
    """A LangGraph compiled graph (``create_agent`` returns one), without importing LangGraph when it is absent."""
    return any(c.__module__.startswith("langgraph.") and c.__name__ == "Pregel" for c in type(runnable).__mro__)


def golden_input(runnable: Any, text: str) -> Any:
    """The input to give ``runnable`` for a golden's question.

    A LangGraph graph whose state has ``messages`` (a ``create_agent`` agent, a chat graph) takes
    ``{"messages": [{"role": "user", "content": text}]}``. Otherwise the Runnable's input schema decides: a string
    schema (or none) takes the text; an object schema takes ``{key: text}`` with the first of
    question/input/query/user_input/q it declares, else its only required key; a chat-style schema with
    ``messages`` takes the messages form too.
    """
    try:
        schema = runnable.get_input_jsonschema()
    except Exception:  # noqa: BLE001 - some Runnables cannot describe their input
        schema = _graph_state_schema(runnable)
        if schema is None:
            return text
    props = schema.get("properties") or {}
    messages = {"messages": [{"role": "user", "content": text}]}
    if _is_graph(runnable) and "messages" in props:
        return messages
    if schema.get("type") != "object" or not props:
        return text
    for key in _INPUT_KEYS:
        if key in props:
            return {key: text}
    if "messages" in props:
        return messages
    required = schema.get("required") or list(props)
    return {required[0]: text} if len(required) == 1 else text


def _graph_state_schema(runnable: Any) -> dict[str, Any] | None:
    """A LangGraph graph's input keys read from its state class's annotations, for a state pydantic cannot turn into
    a JSON schema (a ``typing.TypedDict`` on Python < 3.12)."""
    if not _is_graph(runnable):
        return None
    builder = getattr(runnable, "builder", None)
    state = getattr(builder, "input_schema", None) or getattr(builder, "state_schema", None)
    try:
        keys = list(getattr(state, "__annotations__", {}) or {})
    except Exception:  # noqa: BLE001
        return None
    return {"type": "object", "properties": {k: {} for k in keys}} if keys else None


class LangChainAppAdapter(AppAdapter):
    """Runs goldens through any LangChain Runnable with capture in mode "off", one golden per call."""

    name = "langchain"
    accepts = ("LangChain Runnables: LCEL chains, retrievers, LangGraph compiled graphs and create_agent agents "
               "(needs contextjudge-langchain)")

    def matches(self, obj: Any) -> bool:
        try:
            from langchain_core.runnables import Runnable  # noqa: PLC0415
        except ImportError:  # pragma: no cover
            return False
        return isinstance(obj, Runnable)

    def collect(self, obj: Any, goldens: Any, *, concurrency: int = 4,
                progress: Callable[[], Any] | None = None) -> list[CapturedCase | GoldenFailure]:
        gs: Goldens = load_goldens(goldens)
        # goldens are single questions: no conversation per golden thread; the goldens bound what is captured
        handler = ContextJudgeCallbackHandler(metrics=[], goldens=gs, mode="off", emit_events=False,
                                              conversations=False, max_kept=None)
        items = list(gs)
        run_ids = [uuid.uuid4() for _ in items]
        errors: dict[int, BaseException] = {}
        answers: dict[int, Any] = {}
        # a graph with a checkpointer needs a thread: each golden gets its own, so goldens never share a history
        checkpointed = _is_graph(obj) and getattr(obj, "checkpointer", None) not in (None, False)

        def one(i: int, g: Golden) -> None:
            config: dict[str, Any] = {"callbacks": [handler], "run_id": run_ids[i],
                                      "metadata": {GOLDEN_ID_KEY: g.id} if g.id else {},
                                      "run_name": f"golden:{g.id or i}"}
            if checkpointed:
                config["configurable"] = {"thread_id": f"contextjudge-golden-{run_ids[i]}"}
            answers[i] = obj.invoke(golden_input(obj, g.input), config=config)

        try:
            with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="contextjudge-app") as pool:
                futures = {pool.submit(one, i, g): i for i, g in enumerate(items)}
                for future in as_completed(futures):
                    error = future.exception()
                    if error is not None:
                        errors[futures[future]] = error
                    if progress is not None:
                        progress()
            handler.flush()
            by_root: dict[str, list[CapturedCase]] = {}
            for case in handler.cases:
                by_root.setdefault(case.root_run_id or "", []).append(case)
            ran = dict(handler.roots_without_retrieval)
        finally:
            handler.close()
        out: list[CapturedCase | GoldenFailure] = []
        for i, g in enumerate(items):
            if i in errors:  # what it retrieved before failing is not what it answers: the error is the case
                out.append(GoldenFailure(g, i, errors[i]))
            elif str(run_ids[i]) in by_root:
                out.extend(by_root[str(run_ids[i])])
            else:  # it answered without a retrieval capture sees: a case that says so, never a silent gap
                out.append(_no_retrieval_case(g, i, answers.get(i), ran.get(str(run_ids[i]))))
        return out


def _no_retrieval_case(g: Golden, index: int, answer: Any, ran: dict[str, Any] | None) -> CapturedCase:
    """A golden whose run retrieved nothing: its input, the app's answer and expected output, no retrieval context,
    and under ``provenance.NO_RETRIEVAL_KEY`` what the run did and what capture sees (the metrics' error)."""
    meta: dict[str, Any] = {NO_RETRIEVAL_KEY: no_retrieval_message(ran, SHAPES), GOLDEN_INDEX_KEY: index}
    if g.id:
        meta[GOLDEN_ID_KEY] = g.id
    tc = LLMTestCase(input=g.input, actual_output=final_answer(answer), expected_output=g.expected_output,
                     additional_metadata=meta, name=g.input[:80])
    return CapturedCase(test_case=tc, source="langchain", metadata={GOLDEN_INDEX_KEY: index}, golden_id=g.id)


adapter = LangChainAppAdapter()
"""The instance registered under the ``contextjudge.apps`` entry point."""

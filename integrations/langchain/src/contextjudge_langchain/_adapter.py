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
from contextjudge.errors import UsageError
from contextjudge.goldens import Golden, Goldens, load_goldens

from ._assemble import final_answer
from ._handler import SHAPES, ContextJudgeCallbackHandler

__all__ = ["InputKeyError", "LangChainAppAdapter", "adapter", "describe_input", "golden_input", "input_keys"]

_INPUT_KEYS = ("question", "input", "query", "user_input", "q")


def _is_graph(runnable: Any) -> bool:
    """A LangGraph compiled graph (``create_agent`` returns one), without importing LangGraph when it is absent."""
    return any(c.__module__.startswith("langgraph.") and c.__name__ == "Pregel" for c in type(runnable).__mro__)


class InputKeyError(UsageError, ValueError):
    """The golden's question cannot be given to the app: no input key can be told, or the one named is not one of
    the app's. Its message lists the app's input keys and says to pass ``--input-key``."""


def input_keys(runnable: Any) -> list[str] | None:
    """The keys of the app's input, read from its input schema (a LangGraph graph's input or state class), or None
    when its input is not an object with named keys."""
    schema = _input_schema(runnable)
    if not schema or schema.get("type") != "object":
        return None
    return list(schema.get("properties") or {}) or None


def _input_schema(runnable: Any) -> dict[str, Any] | None:
    try:
        return runnable.get_input_jsonschema()
    except Exception:  # noqa: BLE001 - some Runnables cannot describe their input
        return _graph_state_schema(runnable)


def golden_input(runnable: Any, text: str, input_key: str | None = None) -> Any:
    """The input to give ``runnable`` for a golden's question.

    ``input_key`` names the key that takes the question (``contextjudge eval --input-key``): the input is then
    ``{input_key: text}`` (``messages`` gives the chat form), and a key the app's input schema does not declare is an
    ``InputKeyError``. Without it, a LangGraph graph whose state has ``messages`` (a ``create_agent`` agent, a chat
    graph) takes ``{"messages": [{"role": "user", "content": text}]}``. Otherwise the Runnable's input schema
    decides: a string schema (or none) takes the text; an object schema takes ``{key: text}`` with the first of
    question/input/query/user_input/q it declares, else its only required key, else its only string key; a
    chat-style schema with ``messages`` takes the messages form too. An object schema with several keys and none
    of these is an ``InputKeyError`` that lists them (never the bare string, which such an app rejects).
    """
    schema = _input_schema(runnable)
    messages = {"messages": [{"role": "user", "content": text}]}
    props = (schema or {}).get("properties") or {}
    if input_key:
        if props and input_key not in props and (schema or {}).get("type") == "object":
            raise InputKeyError(f"--input-key {input_key!r} is not a key of the app's input; its keys are: "
                                f"{', '.join(props)}. Pass one of them as --input-key.")
        return messages if input_key == "messages" else {input_key: text}
    if schema is None:
        return text
    if _is_graph(runnable) and "messages" in props:
        return messages
    if schema.get("type") != "object" or not props:
        return text
    for key in _INPUT_KEYS:
        if key in props:
            return {key: text}
    if "messages" in props:
        return messages
    required = schema.get("required") or []
    if len(required) == 1:
        return {required[0]: text}
    if len(props) == 1:
        return {next(iter(props)): text}
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    if len(strings) == 1:
        return {strings[0]: text}
    raise InputKeyError(f"cannot tell which key of the app's input takes the golden's question: its keys are "
                        f"{', '.join(props)} and none is named question, input, query, user_input or q. Pass "
                        f"--input-key KEY (for example --input-key {next(iter(props))}).")


def describe_input(runnable: Any, input_key: str | None = None) -> str:
    """How the golden's question was given to the app, in words, for the message of a failing call."""
    try:
        given = golden_input(runnable, "Q", input_key)
    except InputKeyError as exc:
        return str(exc)
    keys = input_keys(runnable)
    others = f" (its input keys: {', '.join(keys)})" if keys else ""
    if isinstance(given, dict):
        how = "as a chat message under 'messages'" if "messages" in given and given["messages"] != "Q" else \
            f"under the key {next(iter(given))!r}"
    else:
        how = "as a bare string"
    return (f"the question was given to the app {how}{others}; if the app reads it from another key, pass "
            "--input-key KEY (and --answer-key KEY for the key of its answer)")


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

    def input_note(self, obj: Any, input_key: str | None = None) -> str:
        """How a golden's question is given to ``obj``, and how to choose another key (for a failing call)."""
        return describe_input(obj, input_key)

    def collect(self, obj: Any, goldens: Any, *, concurrency: int = 4,
                progress: Callable[[], Any] | None = None, input_key: str | None = None,
                answer_key: str | None = None) -> list[CapturedCase | GoldenFailure]:
        gs: Goldens = load_goldens(goldens)
        if gs and len(gs):
            golden_input(obj, next(iter(gs)).input, input_key)  # an InputKeyError before any call, not per golden
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
            answers[i] = obj.invoke(golden_input(obj, g.input, input_key), config=config)

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
                found = by_root[str(run_ids[i])]
                if answer_key:
                    found = [_with_answer(c, answers.get(i), answer_key) for c in found]
                out.extend(found)
            else:  # it answered without a retrieval capture sees: a case that says so, never a silent gap
                out.append(_no_retrieval_case(g, i, answers.get(i), ran.get(str(run_ids[i]))))
        return out


def _with_answer(case: CapturedCase, output: Any, answer_key: str) -> CapturedCase:
    """The case with ``actual_output`` read from the app's output under ``answer_key`` (``--answer-key``)."""
    if not isinstance(output, dict) or answer_key not in output:
        keys = ", ".join(map(str, output)) if isinstance(output, dict) else type(output).__name__
        raise InputKeyError(f"--answer-key {answer_key!r} is not in the app's output (its output: {keys}). Pass "
                            "the key that holds the answer, or leave --answer-key out.")
    tc = case.test_case
    if isinstance(tc, LLMTestCase):
        value = output[answer_key]
        text = value if isinstance(value, str) else (final_answer(value) or str(value))
        case.test_case = tc.model_copy(update={"actual_output": text})
    return case


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

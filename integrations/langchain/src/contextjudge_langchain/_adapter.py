"""``contextjudge eval --app module:chain``: run goldens through a LangChain Runnable and capture what it retrieved."""

from __future__ import annotations

import logging
from typing import Any

from contextjudge.capture import AppAdapter, CapturedCase
from contextjudge.goldens import Goldens, load_goldens
from contextjudge.cases.identity import GOLDEN_ID_KEY

from ._handler import ContextJudgeCallbackHandler

__all__ = ["LangChainAppAdapter", "adapter", "golden_input"]

logger = logging.getLogger("contextjudge")

_INPUT_KEYS = ("question", "input", "query", "user_input", "q")


def golden_input(runnable: Any, text: str) -> Any:
    """The input to give ``runnable`` for a golden's question: the string itself, or a dict with the question key.

    Reads the Runnable's input schema: a string schema (or none) takes the text; an object schema takes
    ``{key: text}`` with the first of question/input/query/user_input/q it declares, else its only required key;
    a chat-style schema with ``messages`` takes ``{"messages": [("human", text)]}``.
    """
    try:
        schema = runnable.get_input_jsonschema()
    except Exception:  # noqa: BLE001 - some Runnables cannot describe their input
        return text
    props = schema.get("properties") or {}
    if schema.get("type") != "object" or not props:
        return text
    for key in _INPUT_KEYS:
        if key in props:
            return {key: text}
    if "messages" in props:
        return {"messages": [("human", text)]}
    required = schema.get("required") or list(props)
    return {required[0]: text} if len(required) == 1 else text


class LangChainAppAdapter(AppAdapter):
    """Runs goldens through any LangChain Runnable with capture in mode "off"."""

    name = "langchain"

    def matches(self, obj: Any) -> bool:
        try:
            from langchain_core.runnables import Runnable  # noqa: PLC0415
        except ImportError:  # pragma: no cover
            return False
        return isinstance(obj, Runnable)

    def collect(self, obj: Any, goldens: Any, *, concurrency: int = 4) -> list[CapturedCase]:
        gs: Goldens = load_goldens(goldens)
        handler = ContextJudgeCallbackHandler(metrics=[], goldens=gs, mode="off", emit_events=False,
                                              max_kept=None)  # the goldens bound what is captured
        items = list(gs)
        inputs = [golden_input(obj, g.input) for g in items]
        configs = [{"callbacks": [handler], "metadata": {GOLDEN_ID_KEY: g.id} if g.id else {},
                    "run_name": f"golden:{g.id or i}", "max_concurrency": concurrency}
                   for i, g in enumerate(items)]
        outputs = obj.batch(inputs, config=configs, return_exceptions=True)
        for g, out in zip(items, outputs):
            if isinstance(out, BaseException):
                logger.warning("contextjudge: the app raised on golden %r: %s: %s", g.id or g.input,
                               type(out).__name__, out)
        handler.flush()
        cases = handler.cases
        handler.close()
        return cases


adapter = LangChainAppAdapter()
"""The instance registered under the ``contextjudge.apps`` entry point."""

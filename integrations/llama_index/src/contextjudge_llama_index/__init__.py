"""contextjudge for LlamaIndex: capture every query, retrieval and chat call as a test case and score it.

    import contextjudge_llama_index as cj
    session = cj.instrument(model=judge)          # every engine in the process, no change to the app
    engine = cj.EvaluatedQueryEngine(index.as_query_engine(), model=judge)   # or one engine at a time

Results come back as ``ContextJudgeResultEvent`` through LlamaIndex's dispatcher. Names are imported lazily, so
importing this package (as the ``contextjudge eval`` CLI does to find its app adapter) does not import LlamaIndex.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._adapter import LlamaIndexAppAdapter
    from ._events import ContextJudgeResultEvent
    from ._images import node_from_llama_image_node
    from ._instrument import aflush, flush, get_session, instrument, instrument_tags, is_instrumented, uninstrument
    from ._wrappers import EvaluatedChatEngine, EvaluatedQueryEngine

__version__ = "0.3.0.dev0"

__all__ = [
    "ContextJudgeResultEvent",
    "EvaluatedChatEngine",
    "EvaluatedQueryEngine",
    "LlamaIndexAppAdapter",
    "aflush",
    "flush",
    "get_session",
    "instrument",
    "instrument_tags",
    "is_instrumented",
    "node_from_llama_image_node",
    "uninstrument",
]

_WHERE = {
    "ContextJudgeResultEvent": "._events",
    "EvaluatedChatEngine": "._wrappers",
    "EvaluatedQueryEngine": "._wrappers",
    "LlamaIndexAppAdapter": "._adapter",
    "aflush": "._instrument",
    "flush": "._instrument",
    "get_session": "._instrument",
    "instrument": "._instrument",
    "instrument_tags": "._instrument",
    "is_instrumented": "._instrument",
    "node_from_llama_image_node": "._images",
    "uninstrument": "._instrument",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'contextjudge_llama_index' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

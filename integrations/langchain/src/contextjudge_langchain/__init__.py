"""contextjudge for LangChain: one callback handler turns a running chain into scored test cases.

    from contextjudge_langchain import ContextJudgeCallbackHandler, capture, instrument, uninstrument

    handler = ContextJudgeCallbackHandler(model="local")
    chain.invoke(question, config={"callbacks": [handler]})   # per call
    with capture(model="local") as session: ...                # a block, no change to the chain
    instrument(model="local"); ...; uninstrument()             # the whole process

Each metric result also comes back into LangChain as the custom event ``contextjudge/metric_result``.
"""

from ._attach import capture, current_handler, instrument, uninstrument
from ._handler import METRIC_RESULT_EVENT, ContextJudgeCallbackHandler
from ._images import node_from_image_metadata

__version__ = "0.3.0.dev0"

__all__ = [
    "METRIC_RESULT_EVENT",
    "ContextJudgeCallbackHandler",
    "capture",
    "current_handler",
    "instrument",
    "node_from_image_metadata",
    "uninstrument",
]

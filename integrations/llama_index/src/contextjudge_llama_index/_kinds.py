"""What the app adapter (``_adapter``), the capture router (``_capture``) and the agent runs (``_agents``) know of
LlamaIndex's app kinds and span ids, by class name only, so none imports another at module level and this module
stays free of LlamaIndex."""

from __future__ import annotations

KINDS = {"BaseChatEngine": "chat", "BaseQueryEngine": "query", "BaseRetriever": "retrieve", "Workflow": "workflow"}
MODULES = ("llama_index.", "workflows.")  # Workflow lives in the llama-index-workflows package
INPUT_FIELDS = ("user_msg", "query", "input", "question", "message", "msg", "query_str")  # a start event's input

SHAPES = ("query engines (query/aquery, streaming too), retrievers (retrieve/aretrieve of any BaseRetriever: "
          "index.as_retriever(), a retriever called by hand, in a query engine, a workflow step or an agent's "
          "tool), chat engines (chat/achat/stream_chat), and agents and workflows whose tools or steps call them")

_UUID_SUFFIX = 37  # "-" + str(uuid4())


def method_of(span_id: str) -> str:
    """The method a span ran, from its id (``Class.method-<uuid4>``)."""
    return span_id[:-_UUID_SUFFIX].rpartition(".")[2]

"""What the app adapter (``_adapter``) and the capture router (``_capture``) both know of LlamaIndex's app kinds, by
class name only, so neither imports the other at module level and this module stays free of LlamaIndex."""

from __future__ import annotations

KINDS = {"BaseChatEngine": "chat", "BaseQueryEngine": "query", "BaseRetriever": "retrieve", "Workflow": "workflow"}
MODULES = ("llama_index.", "workflows.")  # Workflow lives in the llama-index-workflows package
INPUT_FIELDS = ("user_msg", "query", "input", "question", "message", "msg", "query_str")  # a start event's input

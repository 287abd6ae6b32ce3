"""Provenance: where a captured case came from, in the keys of its ``additional_metadata`` that every stage reads.

The integrations write these keys; the runner, the store, the report, the CLI and exports read them. One place, so
the LangChain and LlamaIndex integrations say the same thing the same way:

- ``AGENT_KEY`` (``"agent"``): the case came from a retrieval inside an agent's tool call. A dict with ``tool`` (the
  tool's name), ``tool_input`` (the query the agent gave the tool), ``tool_output`` (the tool's own answer, which
  the agent may or may not have used), ``call`` (1 for the turn's first tool call, 2 for the second...), and
  optionally ``agent`` (the agent's class or graph name), ``framework`` and ``thread_id``. The case's ``input`` is
  the user's message that started the turn and its ``actual_output`` the agent's final answer.
- ``RETRIEVER_RANKING_KEY`` (``"retriever_ranking"``): the retriever's own ranking, as node dicts, when postprocessors,
  a reranker, a compressor or a filter changed what the LLM saw (the case's ``retrieval_context``). An empty
  ``retrieval_context`` with a ranking here means the postprocessors left no node.
- ``RETRIEVER_KEY`` (``"retriever"``, also spelled ``RETRIEVER_NAME_KEY``): the name of the retriever (a LangChain
  retriever's run name or class; a LlamaIndex retriever's class); a list when a case went through several.
- ``THREAD_KEY`` (``"thread_id"``): the conversation's id (LangChain's ``thread_id``, ``session_id`` or
  ``conversation_id``; a LlamaIndex chat session or memory), when there is one: sampling draws on it, so a
  conversation is judged whole or not at all.
- ``CHAIN_KEY`` (``"chain"``): the name of the root chain, graph, engine or agent.
- ``TAGS_KEY`` (``"tags"``): list[str], the call's tags (LangChain config tags; LlamaIndex instrument tags' keys).
- ``RUN_METADATA_KEY`` (``"run_metadata"``): dict, the call's metadata (LangChain config metadata; LlamaIndex
  instrument tags). ``Sampling``'s filters read these five keys.
- ``CHAIN_INPUT_KEY`` (``"chain_input"``): the root call's own input, when it differs from the retrieval's query; a
  golden may match it.
- ``GOLDEN_INDEX_KEY`` (``"golden_index"``): the golden's position, for the cases ``contextjudge eval --app`` makes.
- ``APP_ERROR_KEY`` (``"app_error"``): the app raised on this golden (``contextjudge eval``); a dict with ``type``
  and ``message``. Every metric of such a case is an error result, counted and gated like any other.
- ``MATCH_INPUTS_KEY`` (``"match_inputs"``): other texts a golden may match besides ``input`` (an agent's tool query).
- ``OTEL_KEY`` (``"otel"``): where the case sits in the app's OpenTelemetry trace, recorded at capture when the app
  has an active span: ``{"trace_id": "<32 hex>", "span_id": "<16 hex>" (the request's span: the one active when the
  chain/engine call began), "retriever_span_id": "<16 hex>" (the span active at the retrieval, when it differs),
  "trace_flags": int}``. Stored with the case, so a worker in another process can export evaluation spans into
  that trace (``contextjudge.otel``).
- ``NO_RETRIEVAL_KEY`` (``"no_retrieval"``): ``contextjudge eval`` ran the app on this golden and capture saw no
  retrieval; a message that says what the run did and which shapes are captured. The metrics that need the
  retrieval context give it as their error.

- ``ESCAPED_KEY`` (``"escaped_text"``): list[str], the fields of a captured case whose text held characters no store
  takes (a lone surrogate such as an end user's JSON ``"\\udce9"``, NUL) and were escaped (``\\udce9``) at capture.

A retrieved node's metadata may carry ``SOURCE_DOC_KEY`` (``"source_doc_id"``): the id of the document the chunk
came from (LlamaIndex: the node's ``ref_doc_id``, the user's ``Document(id_=...)``; LangChain: the document's
``metadata["source"]``), beside the node's own id (the chunk's). ``source_of`` reads it with the document's title.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AGENT_KEY", "APP_ERROR_KEY", "CHAIN_INPUT_KEY", "CHAIN_KEY", "ESCAPED_KEY", "GOLDEN_INDEX_KEY",
           "MATCH_INPUTS_KEY", "NO_RETRIEVAL_KEY", "OTEL_KEY", "RETRIEVER_KEY", "RETRIEVER_NAME_KEY",
           "RETRIEVER_RANKING_KEY", "RUN_METADATA_KEY", "SOURCE_DOC_KEY", "TAGS_KEY", "THREAD_KEY", "agent_of",
           "app_error_of", "match_inputs_of", "no_retrieval_of", "otel_of", "short", "source_of"]

AGENT_KEY = "agent"
RETRIEVER_RANKING_KEY = "retriever_ranking"
RETRIEVER_KEY = "retriever"
RETRIEVER_NAME_KEY = RETRIEVER_KEY  # the name sampling's filters were written with
THREAD_KEY = "thread_id"
CHAIN_KEY = "chain"
TAGS_KEY = "tags"
RUN_METADATA_KEY = "run_metadata"
CHAIN_INPUT_KEY = "chain_input"
GOLDEN_INDEX_KEY = "golden_index"
APP_ERROR_KEY = "app_error"
MATCH_INPUTS_KEY = "match_inputs"
OTEL_KEY = "otel"
NO_RETRIEVAL_KEY = "no_retrieval"
SOURCE_DOC_KEY = "source_doc_id"
ESCAPED_KEY = "escaped_text"
_TITLE_KEYS = ("title", "document_title", "file_name", "filename")


def _meta(test_case: Any) -> dict[str, Any]:
    meta = getattr(test_case, "additional_metadata", None)
    return meta if isinstance(meta, dict) else {}


def agent_of(test_case: Any) -> dict[str, Any] | None:
    """The agent provenance of a case (see ``AGENT_KEY``), or None when it did not come from an agent's tool."""
    found = _meta(test_case).get(AGENT_KEY)
    return found if isinstance(found, dict) else None


def app_error_of(test_case: Any) -> dict[str, Any] | None:
    """``{"type": ..., "message": ...}`` when the app raised on this case's golden, else None."""
    found = _meta(test_case).get(APP_ERROR_KEY)
    return found if isinstance(found, dict) else None


def no_retrieval_of(test_case: Any) -> str | None:
    """The message saying that the app's run on this golden retrieved nothing capture sees, or None."""
    found = _meta(test_case).get(NO_RETRIEVAL_KEY)
    return found if isinstance(found, str) and found else None


def source_of(node_metadata: Any) -> tuple[str | None, str | None]:
    """(the source document's id, its title) of a retrieved node, from its metadata: ``SOURCE_DOC_KEY`` (else
    LangChain's ``source``), and the first of ``title``, ``document_title``, ``file_name``, ``filename``."""
    meta = node_metadata if isinstance(node_metadata, dict) else {}
    doc = meta.get(SOURCE_DOC_KEY) or meta.get("source")
    title = next((meta[k] for k in _TITLE_KEYS if isinstance(meta.get(k), str) and meta[k]), None)
    return (str(doc) if isinstance(doc, (str, int)) and str(doc) else None), title


def otel_of(test_case: Any) -> dict[str, Any] | None:
    """The case's place in the app's OpenTelemetry trace (see ``OTEL_KEY``), or None when none was recorded."""
    found = _meta(test_case).get(OTEL_KEY)
    return found if isinstance(found, dict) and found.get("trace_id") and found.get("span_id") else None


def match_inputs_of(test_case: Any) -> list[str]:
    """The other texts a golden may match for this case: those listed under ``MATCH_INPUTS_KEY`` and an agent's
    tool query."""
    meta = _meta(test_case)
    out = [str(x) for x in meta.get(MATCH_INPUTS_KEY) or () if x]
    agent = agent_of(test_case)
    if agent and agent.get("tool_input"):
        out.append(str(agent["tool_input"]))
    return out


def short(text: Any, limit: int = 60) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters (with an ellipsis)."""
    from .._text import shorten  # noqa: PLC0415

    return shorten(str(text or ""), limit)

"""One trace's spans -> the test cases of its retrievals, read the way our own handlers read a framework run.

Two conventions are read:

- OpenInference (Phoenix, Arize; ``openinference-instrumentation-*``): ``openinference.span.kind`` (``RETRIEVER``,
  ``LLM``, ``CHAIN``, ``TOOL``, ``AGENT``), ``retrieval.documents.N.document.{content,id,score,metadata}``,
  ``input.value``, ``output.value``, ``llm.input_messages`` / ``llm.output_messages``, ``llm.prompts``,
  ``session.id``, ``metadata``, ``tag.tags``.
- OpenTelemetry GenAI / OpenLLMetry (Traceloop): ``traceloop.span.kind`` (``workflow``, ``task``, ``tool``,
  ``agent``), ``traceloop.entity.{name,input,output}``, ``gen_ai.operation.name``, ``gen_ai.prompt.N.content`` /
  ``gen_ai.completion.N.content`` (and the newer ``gen_ai.input.messages`` / ``gen_ai.output.messages``),
  ``gen_ai.conversation.id``, ``traceloop.association.properties.*``.

A case is made for each retriever span that has no retriever above it (its documents, else those of the first
retriever below it that has some): the question is the trace root's input when it is text (else the retriever's
query), the nodes are the documents in the order retrieved, and the answer is the first LLM call after the
retrieval whose prompt holds a document's text (else the first LLM call after it, else the root's output), as the
LangChain handler reads a run. A retrieval inside a tool call is an agent's step: its answer is the root's output.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from ..capture import CapturedCase, prompt_snippets, reader_of
from ..cases.provenance import (
    AGENT_KEY,
    CHAIN_INPUT_KEY,
    CHAIN_KEY,
    OTEL_KEY,
    RETRIEVER_KEY,
    RUN_METADATA_KEY,
    SOURCE_DOC_KEY,
    TAGS_KEY,
    THREAD_KEY,
    short,
)
from ..cases.testcase import LLMTestCase, RetrievedNode
from ._spans import Span

__all__ = ["TRACE_KEY", "cases_of_trace", "kind_of"]

TRACE_KEY = "trace"  # additional_metadata: {"source": "otlp" | "file" | "phoenix", "convention": ...}
_QUESTION_KEYS = ("question", "input", "query", "query_str", "user_input", "q", "prompt")
_OUTPUT_KEYS = ("answer", "output", "result", "response", "text", "content")
_SCORE_KEYS = ("score", "relevance_score", "similarity_score", "similarity", "_score", "distance")
_THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
_DOC_KEY = re.compile(r"^retrieval\.documents\.(\d+)\.document\.(content|id|score|metadata)$")
_TL_KIND = {"workflow": "CHAIN", "task": "CHAIN", "tool": "TOOL", "agent": "AGENT", "retriever": "RETRIEVER",
            "llm": "LLM"}
_GENAI_LLM = {"chat", "text_completion", "generate_content", "completion"}


def kind_of(span: Span) -> str | None:
    """The span's kind in OpenInference's words (``RETRIEVER``, ``LLM``, ``CHAIN``, ``TOOL``, ``AGENT``...), from
    either convention; None for a span of neither (counted as unknown)."""
    a = span.attributes
    kind = a.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        return kind.upper()
    op = a.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        op = op.lower()
        if op in _GENAI_LLM:
            return "LLM"
        if op in ("retrieval", "retrieve", "search", "vector_db_retrieve"):
            return "RETRIEVER"
        if op in ("execute_tool",):
            return "TOOL"
        if op in ("invoke_agent", "create_agent"):
            return "AGENT"
        if op == "embeddings":
            return "EMBEDDING"
    if any(k.startswith("retrieval.documents.") for k in a):
        return "RETRIEVER"
    tl = a.get("traceloop.span.kind")
    if isinstance(tl, str) and tl:
        if _traceloop_docs(span) is not None:
            return "RETRIEVER"
        return _TL_KIND.get(tl.lower(), "CHAIN")
    if "llm.request.type" in a or "gen_ai.system" in a or "gen_ai.request.model" in a:
        return "LLM"
    return None


def _loads(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _text(value: Any, keys: tuple[str, ...]) -> str | None:
    """The text in a span's input or output value: a plain string, or a recognisable key of a JSON object."""
    value = _loads(value)
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, dict):
        for k in ("inputs", "outputs", "query_bundle", "kwargs"):  # OpenLLMetry's and LlamaIndex's wrappings
            if isinstance(value.get(k), (dict, str)) and not any(isinstance(value.get(x), str) for x in keys):
                found = _text(value[k], keys) if isinstance(value[k], dict) else value[k]
                if found and found.strip():
                    return found
        for k in keys:
            v = value.get(k)
            if isinstance(v, str) and v.strip():
                return v
        messages = value.get("messages")
        if isinstance(messages, list):
            for m in reversed(messages):
                if isinstance(m, dict) and (m.get("role") in ("user", "human") or m.get("type") == "human"):
                    content = m.get("content")
                    if isinstance(content, str):
                        return content
    return None


# --- documents ------------------------------------------------------------------------------------------------


def _doc_id(text: str, given: Any, meta: dict[str, Any]) -> str:
    """A node's id as the LangChain handler gives it: the document's id, else ``id``/``doc_id`` in its metadata,
    else a hash of its text."""
    found = given if given not in (None, "") else (meta.get("id") or meta.get("doc_id"))
    if found is None:
        return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
    return str(found)


def _node(text: Any, given_id: Any, score: Any, meta: Any) -> RetrievedNode:
    text = "" if text is None else str(text)
    meta = _loads(meta)
    meta = dict(meta) if isinstance(meta, dict) else {}
    nid = _doc_id(text, given_id, meta)
    source = meta.get("source")
    if isinstance(source, (str, int)) and str(source) and str(source) != nid:
        meta.setdefault(SOURCE_DOC_KEY, str(source))
    if not (isinstance(score, (int, float)) and not isinstance(score, bool)):
        score = next((meta[k] for k in _SCORE_KEYS if isinstance(meta.get(k), (int, float))
                      and not isinstance(meta.get(k), bool)), None)
    return RetrievedNode(text=text, id=nid, score=None if score is None else float(score), metadata=meta)


def _serialized_docs(value: Any) -> list[dict[str, Any]] | None:
    """LangChain Documents as a tracer serialises them (``{"documents": [{"page_content", "id", "metadata"}]}`` or a
    list of them, or ``{"lc": 1, "kwargs": {...}}`` constructors)."""
    value = _loads(value)
    if isinstance(value, dict):
        for k in ("documents", "outputs", "output"):
            if k in value:
                return _serialized_docs(value[k])
        return None
    if not isinstance(value, list):
        return None
    out = []
    for d in value:
        if isinstance(d, dict) and isinstance(d.get("kwargs"), dict) and "page_content" in d["kwargs"]:
            d = d["kwargs"]
        if not (isinstance(d, dict) and isinstance(d.get("page_content"), str)):
            return None
        out.append(d)
    return out


def _traceloop_docs(span: Span) -> list[dict[str, Any]] | None:
    """The documents of an OpenLLMetry retriever task (its ``traceloop.entity.output`` is LangChain Documents)."""
    a = span.attributes
    if "traceloop.entity.output" not in a:
        return None
    return _serialized_docs(a["traceloop.entity.output"])


def _ids_by_text(spans: Iterable[Span]) -> dict[str, str]:
    """Document ids by text, from every LangChain Document the trace's spans serialise with its id (OpenLLMetry's
    retriever span leaves the ids out, and the next step's input holds them)."""
    out: dict[str, str] = {}

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            kw = value.get("kwargs")
            d = kw if isinstance(kw, dict) and "page_content" in kw else value
            if isinstance(d.get("page_content"), str) and d.get("id") not in (None, ""):
                out.setdefault(d["page_content"], str(d["id"]))
                return
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    for s in spans:
        for key in ("traceloop.entity.input", "traceloop.entity.output", "input.value", "output.value"):
            raw = s.attributes.get(key)
            if isinstance(raw, str) and "page_content" in raw:
                visit(_loads(raw))
    return out


def documents(span: Span, trace: list[Span] | None = None) -> list[RetrievedNode] | None:
    """The span's retrieved documents, in order, as nodes; None when it records none. A document recorded without
    its id gets the id the same document has elsewhere in ``trace``, when it is there."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in span.attributes.items():
        if key.startswith("retrieval.documents."):
            m = _DOC_KEY.match(key)
            if m:
                fields.setdefault(int(m.group(1)), {})[m.group(2)] = value
    if fields:
        serialized = _serialized_docs(span.attributes.get("output.value")) or []
        out = []
        for i in sorted(fields):
            f = fields[i]
            given = f.get("id")
            if given in (None, "") and i < len(serialized):  # OpenInference's LangChain spans leave the id out
                given = serialized[i].get("id")
            out.append(_node(f.get("content"), given, f.get("score"), f.get("metadata")))
        return out
    docs = _traceloop_docs(span)
    if docs is None and span.attributes.get("openinference.span.kind") == "RETRIEVER":
        docs = _serialized_docs(span.attributes.get("output.value"))
    if docs is None:
        return None
    ids = _ids_by_text(trace) if trace and any(d.get("id") in (None, "") for d in docs) else {}
    return [_node(d.get("page_content"), d.get("id") or ids.get(d["page_content"]), None, d.get("metadata"))
            for d in docs]


# --- LLM calls ------------------------------------------------------------------------------------------------


def _indexed(a: dict[str, Any], prefix: str, field: str) -> list[str]:
    """Values of ``prefix.N.<...>field`` keys, by N."""
    found: dict[int, str] = {}
    for k, v in a.items():
        if k.startswith(prefix) and k.endswith(field) and isinstance(v, str):
            head = k[len(prefix):].split(".", 1)[0]
            if head.isdigit():
                found.setdefault(int(head), v)
    return [found[i] for i in sorted(found)]


def _message_texts(value: Any) -> list[str]:
    value = _loads(value)
    out = []
    for m in value if isinstance(value, list) else ():
        if isinstance(m, dict):
            content = m.get("content")
            if isinstance(content, str):
                out.append(content)
            for part in m.get("parts") or ():
                if isinstance(part, dict) and isinstance(part.get("content"), str):
                    out.append(part["content"])
    return out


def llm_prompt(span: Span) -> str:
    """Everything the LLM call was given, as text (to look for the documents in)."""
    a = span.attributes
    parts = [*_indexed(a, "llm.input_messages.", "message.content"), *_indexed(a, "gen_ai.prompt.", ".content"),
             *_message_texts(a.get("gen_ai.input.messages"))]
    prompts = a.get("llm.prompts")
    if isinstance(prompts, (list, tuple)):
        parts.extend(str(p) for p in prompts)
    if not parts:
        parts.append(str(a.get("input.value") or a.get("traceloop.entity.input") or ""))
    return "\n".join(parts)


def llm_answer(span: Span) -> str | None:
    """The LLM call's answer text."""
    a = span.attributes
    for texts in (_indexed(a, "llm.output_messages.", "message.content"), _indexed(a, "gen_ai.completion.", ".content"),
                  _message_texts(a.get("gen_ai.output.messages"))):
        if texts:
            return texts[0]
    out = _loads(a.get("output.value"))
    if isinstance(out, str):
        return out
    if isinstance(out, dict):
        for batch in out.get("generations") or ():
            for g in batch or ():
                if isinstance(g, dict) and g.get("text"):
                    return str(g["text"])
        return _text(out, _OUTPUT_KEYS)
    return None


# --- the trace ------------------------------------------------------------------------------------------------


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[Span]:
    out, seen = [], {span.span_id}
    parent = by_id.get(span.parent_id or "")
    while parent is not None and parent.span_id not in seen:
        out.append(parent)
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_id or "")
    return out


def _io(span: Span, which: str) -> Any:
    a = span.attributes
    return a.get(f"{which}.value", a.get(f"traceloop.entity.{which}"))


def _thread_id(spans: Iterable[Span]) -> str | None:
    for s in spans:
        a = s.attributes
        for key in ("session.id", "gen_ai.conversation.id", "conversation.id"):
            if a.get(key):
                return str(a[key])
        for key in _THREAD_KEYS:
            if a.get(f"traceloop.association.properties.{key}"):
                return str(a[f"traceloop.association.properties.{key}"])
        meta = _loads(a.get("metadata"))
        if isinstance(meta, dict):
            for key in _THREAD_KEYS:
                if meta.get(key):
                    return str(meta[key])
    return None


def _retriever_name(span: Span) -> str:
    name = str(span.attributes.get("traceloop.entity.name") or span.name)
    for tail in (".retrieve", ".aretrieve", "._retrieve", "._aretrieve", ".task"):
        if name.endswith(tail):
            return name[: -len(tail)]
    return name


def _convention(span: Span) -> str:
    a = span.attributes
    if "openinference.span.kind" in a or any(k.startswith("retrieval.") for k in a):
        return "openinference"
    return "openllmetry" if any(k.startswith("traceloop.") for k in a) else "gen_ai"


def cases_of_trace(spans: list[Span], *, source: str = "otlp") -> tuple[list[CapturedCase], int]:
    """The cases of one trace's spans, and how many of its spans were of no known convention."""
    by_id = {s.span_id: s for s in spans}
    kinds = {s.span_id: kind_of(s) for s in spans}
    unknown = sum(1 for k in kinds.values() if k is None)
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    llms = [s for s in ordered if kinds[s.span_id] == "LLM"]
    out: list[CapturedCase] = []
    for span in ordered:
        if kinds[span.span_id] != "RETRIEVER":
            continue
        ancestors = _ancestors(span, by_id)
        if any(kinds[a.span_id] == "RETRIEVER" for a in ancestors):
            continue
        nodes = documents(span, spans)
        if nodes is None:
            below = [s for s in ordered if kinds[s.span_id] == "RETRIEVER"
                     and any(a.span_id == span.span_id for a in _ancestors(s, by_id))]
            nodes = next((d for d in (documents(b, spans) for b in below) if d is not None), None)
        if nodes is None:
            continue
        case = _case(span, nodes, ancestors, llms, by_id, spans, source)
        if case is not None:
            out.append(case)
    return out, unknown


def _case(span: Span, nodes: list[RetrievedNode], ancestors: list[Span], llms: list[Span],
          by_id: dict[str, Span], spans: list[Span], source: str) -> CapturedCase | None:
    root = ancestors[-1] if ancestors else span
    query = _text(_io(span, "input"), _QUESTION_KEYS) or ""
    question = _text(_io(root, "input"), _QUESTION_KEYS) if root is not span else None
    case_input = question or query
    if not case_input.strip():
        return None
    tool = next((a for a in ancestors if kind_of(a) in ("TOOL",)), None)
    root_text = _text(_io(root, "output"), _OUTPUT_KEYS) if root is not span else None
    answer, answer_source = None, "none"
    if tool is not None and root_text is not None:
        answer, answer_source = root_text, "agent_final"
    else:
        consumer = _consumer(span, nodes, llms, by_id)
        if consumer is not None:
            answer, answer_source = llm_answer(consumer), f"llm:{consumer.name}"
        elif root_text is not None:
            answer, answer_source = root_text, "root_output"
    if answer is None:
        answer_source = "none"
    thread = _thread_id([root, span, *ancestors])
    meta: dict[str, Any] = {
        RETRIEVER_KEY: _retriever_name(span), "retriever_query": query, CHAIN_INPUT_KEY: question,
        CHAIN_KEY: str(root.attributes.get("traceloop.entity.name") or root.name), "answer_source": answer_source,
        OTEL_KEY: {"trace_id": span.trace_id, "span_id": root.span_id, "retriever_span_id": span.span_id,
                   "trace_flags": span.flags},
        TRACE_KEY: {"source": source, "convention": _convention(span)},
    }
    if thread is not None:
        meta[THREAD_KEY] = thread
    root_meta = _loads(root.attributes.get("metadata"))
    if isinstance(root_meta, dict) and root_meta:
        meta[RUN_METADATA_KEY] = root_meta
    tags = root.attributes.get("tag.tags")
    if isinstance(tags, (list, tuple)) and tags:
        meta[TAGS_KEY] = [str(t) for t in tags]
    if tool is not None:
        meta[AGENT_KEY] = {"tool": tool.name, "tool_input": _text(_io(tool, "input"), _QUESTION_KEYS) or query,
                           "tool_output": _text(_io(tool, "output"), _OUTPUT_KEYS), "call": 1,
                           "agent": root.name, "framework": "otel"}
    tc = LLMTestCase(input=case_input, actual_output=answer, retrieval_context=nodes,
                     name=short(case_input, 80), additional_metadata=meta)
    return CapturedCase(test_case=tc, source=f"trace:{span.trace_id}", root_run_id=root.span_id,
                        captured_at=(root.end or span.end) / 1e9)


def _consumer(retriever: Span, nodes: list[RetrievedNode], llms: list[Span], by_id: dict[str, Span]) -> Span | None:
    after = [s for s in llms if s.start >= retriever.end
             and all(a.span_id != retriever.span_id for a in _ancestors(s, by_id))]
    return reader_of(after, prompt_snippets(n.text for n in nodes), llm_prompt)

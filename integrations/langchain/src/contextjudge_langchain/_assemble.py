"""Turning one finished LangChain run tree into test cases: which retrievals, which question, which answer.

The rules, applied when a root run ends:

- A *retrieval* is a retriever run with no retriever above it. Retrievers nested inside another retriever
  (the parts of an ensemble or of a multi-query retriever) are kept as diagnostics on the outer one's case, because
  the outer retriever's fused list is what the app used.
- The *question* is the chain input when it is recognisably the user's question (a string, a dict with a
  ``question``/``input``/``query`` string, or the last human message); otherwise the retriever's own query.
- The *answer* is the text of the first LLM or chat-model run that starts after the retrieval ended, is not part of
  it, and whose prompt contains one of the retrieved documents; failing that, the first such run at all; failing
  that, the root output when it is text.
- *What the LLM saw* is the retriever's list after the steps that changed it: a retriever that wraps one other
  retriever and returns fewer or other documents (a contextual compression retriever, a filter) and chain steps that
  take the retriever's documents and return documents (``retriever | keep_relevant``). When they changed the list,
  the case's ``retrieval_context`` is the final list (empty when they dropped everything) and the retriever's own
  ranking goes under ``provenance.RETRIEVER_RANKING_KEY``.
- *Agents.* A retrieval inside a tool run (an agent's tool: ``create_retriever_tool``, any ``@tool`` calling a
  retriever) or inside a LangGraph node becomes an agent case: its ``input`` is the user's message that started the
  turn (the last human message of the root's input), its ``actual_output`` the agent's final answer (the last AI
  message without tool calls in the root's output), and ``additional_metadata["agent"]`` holds the tool's name, its
  input and its own answer, the call's 1-based index in the turn, the graph's name, the framework and the thread.
  A retriever in a graph node that is not a tool gets ``tool=None`` and ``node=<the node's name>``; its case is
  named after the node. Cases are named ``"<tool>: <user message>"`` (``"<tool> #2: ..."`` for the same tool's
  second call in the turn); other cases after their question.
- *Trace.* When the app traces with OpenTelemetry, the span active at the root run's start (the request) and at the
  retriever run's start go under ``provenance.OTEL_KEY`` (``contextjudge.otel.case_trace``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contextjudge import LLMTestCase, RetrievedNode
from contextjudge.capture import search_result, tool_output_items
from contextjudge.cases.identity import GOLDEN_ID_KEY
from contextjudge.cases.images import may_point_to_image
from contextjudge.cases.provenance import (
    AGENT_KEY,
    CHAIN_INPUT_KEY,
    OTEL_KEY,
    RETRIEVER_KEY,
    RETRIEVER_RANKING_KEY,
    SOURCE_DOC_KEY,
    short,
)
from contextjudge.cases.testcase import jsonable
from contextjudge.otel import case_trace

from ._images import node_from_image_metadata

THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
_QUESTION_KEYS = ("question", "input", "query", "user_input", "q", "prompt")
_OUTPUT_KEYS = ("answer", "output", "result", "response", "text", "content")
_SCORE_KEYS = ("score", "relevance_score", "similarity_score", "similarity", "_score", "distance")


class RunRecord:
    """What the handler keeps of one LangChain run: enough to assemble test cases, and cheap to make."""

    __slots__ = ("id", "parent_run_id", "root_id", "run_type", "name", "inputs", "tags", "metadata", "start",
                 "end", "outputs", "error", "child_runs", "tool_call_id", "otel")

    def __init__(self, id: Any, parent_run_id: Any, root_id: Any, run_type: str, name: str, inputs: Any,
                 tags: list[str] | None, metadata: dict[str, Any] | None, start: int) -> None:
        self.id = id
        self.parent_run_id = parent_run_id
        self.root_id = root_id
        self.run_type = run_type
        self.name = name
        self.inputs = inputs
        self.tags = tags
        self.metadata = metadata or {}
        self.start = start
        self.end: int | None = None
        self.outputs: Any = None
        self.error: str | None = None
        self.child_runs: list[RunRecord] = []
        self.tool_call_id: str | None = None  # a tool run's id of the model's tool call, which orders the calls
        self.otel: dict[str, Any] | None = None  # the app's active OpenTelemetry span at a root's or retriever's start

    def __repr__(self) -> str:
        return f"RunRecord({self.run_type}:{self.name} {self.id})"


@dataclass
class Retrieval:
    """One top-level retriever run inside a root, made ready to become a test case."""

    case: LLMTestCase
    name: str
    query: str
    question: str | None
    answer_source: str
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    agent: dict[str, Any] | None = None


RETRIEVAL_TOOL_TAG = "contextjudge:retrieval"
"""A tag (or ``metadata={"contextjudge": "retrieval"}``) that makes a tool's output a retrieval."""
_ITEM_TEXT_KEYS = ("page_content", "content", "text", "snippet", "body", "description", "result")


def is_retrieval_tool(run: Any, names: frozenset[str]) -> bool:
    """Whether a tool run's output is to be captured as a retrieval: named in ``retrieval_tools=``, tagged
    ``contextjudge:retrieval``, or with ``metadata={"contextjudge": "retrieval"}``."""
    return run.run_type == "tool" and (run.name in names or RETRIEVAL_TOOL_TAG in (run.tags or ())
                                       or (run.metadata or {}).get("contextjudge") == "retrieval")


def tool_items(output: Any) -> list[Any]:
    """A tool's output as ranked Documents: a ToolMessage's artifact when it has one (``content_and_artifact``),
    else its content; a list (or a JSON list in a string) split into items, anything else one item. A dict item
    (a search result) gives its text (``content``, ``snippet``...) and its id (``id``, ``url``...)."""
    from langchain_core.documents import Document  # noqa: PLC0415

    raw = output
    if hasattr(output, "content") and hasattr(output, "tool_call_id"):  # a ToolMessage
        raw = output.artifact if getattr(output, "artifact", None) is not None else output.content
    docs = []
    for item in tool_output_items(raw):
        if hasattr(item, "page_content"):
            docs.append(item)
        elif isinstance(item, dict):
            text, nid, meta = search_result(item, _ITEM_TEXT_KEYS)
            docs.append(Document(text, id=nid, metadata=meta))
        elif item is not None:
            text = message_text(item) if hasattr(item, "content") else None
            text = text if text is not None else (item if isinstance(item, str) else str(item))
            if text.strip():
                docs.append(Document(text))
    return docs


def add_tool_retrievals(root: Any, names: frozenset[str]) -> bool:
    """Give each retrieval tool run (``is_retrieval_tool``) that ran no retriever of its own a retriever child
    holding its output's items, so it is assembled as any retrieval inside a tool is; True when one was added."""
    added = False
    for run, _ in walk(root):
        if run.error or run.end is None or not is_retrieval_tool(run, names):
            continue
        if any(r.run_type == "retriever" for r, _ in walk(run)):
            continue
        output = run.outputs.get("output") if isinstance(run.outputs, dict) else run.outputs
        child = RunRecord(run.id, run.id, run.root_id, "retriever", run.name, {"query": tool_input_of(run)},
                          run.tags, {**(run.metadata or {}), "contextjudge_tool_output": True}, run.start + 0.25)
        child.id = _ToolRetrievalId(run.id)
        child.end = run.end - 0.25
        child.outputs = {"documents": tool_items(output)}
        run.child_runs.append(child)
        added = True
    return added


class _ToolRetrievalId:
    """The id of a tool's output seen as a retrieval: the tool run's own, as text and as a number."""

    __slots__ = ("int", "_s")

    def __init__(self, tool_id: Any) -> None:
        self.int = -tool_id.int
        self._s = f"{tool_id}:output"

    def __str__(self) -> str:
        return self._s


def walk(root: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """Every run of the tree with its ancestors, in start order (the tracer's dotted order)."""
    out: list[tuple[Any, tuple[Any, ...]]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        run, ancestors = stack.pop()
        out.append((run, ancestors))
        for child in getattr(run, "child_runs", None) or ():
            stack.append((child, ancestors + (run,)))
    out.sort(key=lambda pair: pair[0].start)
    return out


def metadata_of(run: Any) -> dict[str, Any]:
    return run.metadata or {}


def thread_id_of(runs: Iterable[Any]) -> str | None:
    for run in runs:
        meta = metadata_of(run)
        for key in THREAD_KEYS:
            value = meta.get(key)
            if isinstance(value, (str, int)) and str(value):
                return str(value)
    return None


def message_text(message: Any) -> str | None:
    content = getattr(message, "content", None)
    if content is None and isinstance(message, dict):
        content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = [b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, (str, dict))]
        return "".join(parts)
    return None


def question_of(inputs: Any) -> str | None:
    """The user's question in a chain input, when it is recognisable; None otherwise."""
    if isinstance(inputs, dict) and set(inputs) == {"input"}:
        inputs = inputs["input"]  # the tracer wraps non-dict inputs as {"input": x}
    if isinstance(inputs, str):
        return inputs if inputs.strip() else None
    if isinstance(inputs, dict):
        for key in _QUESTION_KEYS:
            value = inputs.get(key)
            if isinstance(value, str) and value.strip():
                return value
        messages = inputs.get("messages")
        if isinstance(messages, list):
            for m in reversed(messages):
                role = getattr(m, "type", None) or (m.get("role") if isinstance(m, dict) else None)
                if role in ("human", "user"):
                    return message_text(m)
    if isinstance(inputs, list) and inputs:
        for m in reversed(inputs):
            if getattr(m, "type", None) == "human":
                return message_text(m)
    return None


def text_of_output(outputs: Any) -> str | None:
    """The text of a chain output, when it is text (a string, a message, or a dict with an answer string)."""
    if isinstance(outputs, dict) and set(outputs) == {"output"}:
        outputs = outputs["output"]
    if isinstance(outputs, str):
        return outputs
    text = message_text(outputs) if hasattr(outputs, "content") else None
    if text is not None:
        return text
    if isinstance(outputs, dict):
        for key in _OUTPUT_KEYS:
            value = outputs.get(key)
            if isinstance(value, str):
                return value
            if hasattr(value, "content"):
                return message_text(value)
        messages = outputs.get("messages")
        if isinstance(messages, list) and messages:
            return message_text(messages[-1])
    return None


def llm_text(run: Any) -> str | None:
    outputs = run.outputs or {}
    gens = outputs.get("generations") or []
    for batch in gens:
        for g in batch or ():
            text = g.get("text") if isinstance(g, dict) else getattr(g, "text", None)
            if text:
                return text
    return None


def _prompt_text(run: Any) -> str:
    inputs = run.inputs or {}
    prompts = inputs.get("prompts")
    if hasattr(prompts, "render"):
        prompts = prompts.render()
    if isinstance(prompts, list):
        return "\n".join(p for p in prompts if isinstance(p, str))
    return str(inputs.get("messages", ""))


def doc_id(doc: Any) -> str:
    """A Document's id as a node's: ``Document.id``, else an ``id``/``doc_id`` in its metadata, else a hash of its
    text."""
    found = getattr(doc, "id", None)
    if not found:
        meta = getattr(doc, "metadata", None) or {}
        found = meta.get("id") or meta.get("doc_id")
    if found is None:
        text = getattr(doc, "page_content", None)
        text = str(doc) if text is None else text
        return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
    return str(found)


def node_of(doc: Any, score: Any = None) -> RetrievedNode:
    """A Document as a node: its id (``doc_id``), the score the vector store gave it (``score``, else a score in its
    metadata) and its metadata (with ``provenance.SOURCE_DOC_KEY`` when it names its source document)."""
    meta = dict(getattr(doc, "metadata", None) or {})
    text = getattr(doc, "page_content", None)
    if text is None:
        text = str(doc)
    nid = doc_id(doc)
    source = meta.get("source")  # the loader's source document (a URL, a path), beside the chunk's own id
    if isinstance(source, (str, int)) and str(source) and str(source) != nid:
        meta.setdefault(SOURCE_DOC_KEY, str(source))
    if not (isinstance(score, (int, float)) and not isinstance(score, bool)):
        score = None
        for key in _SCORE_KEYS:
            value = meta.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                score = value
                break
    score = None if score is None else float(score)
    if may_point_to_image(meta):
        # a document whose metadata points to an image (image_url, image_path, ...) becomes an image node
        return node_from_image_metadata(text, _jsonable(meta), id=nid, score=score)
    # the usual text document: every field is already of its type, so no validation is needed
    return RetrievedNode.model_construct(text=text, id=nid, score=score, metadata=jsonable(meta))


def _jsonable(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in meta.items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v)
    return out


def _snippets(docs: list[Any]) -> list[str]:
    """The start of each document's text, to look for in prompts (documents are usually pasted in verbatim)."""
    out = []
    for d in docs:
        text = (getattr(d, "page_content", None) or "").strip()
        if len(text) >= 12:
            out.append(text[:60])
    return out


def _consumer(retriever: Any, docs: list[Any], llms: list[tuple[Any, tuple[Any, ...]]]) -> Any:
    after = [run for run, ancestors in llms
             if retriever not in ancestors and retriever.end is not None and run.start > retriever.end]
    if not after:
        return None
    snippets = _snippets(docs)
    if snippets:
        for run in after:
            prompt = _prompt_text(run)
            if any(s in prompt for s in snippets):
                return run
    return after[0]


def _role(message: Any) -> str | None:
    role = getattr(message, "type", None)
    if role is None and isinstance(message, dict):
        role = message.get("role") or message.get("type")
    return {"user": "human", "assistant": "ai"}.get(role, role)


def _tool_calls(message: Any) -> list[Any]:
    calls = getattr(message, "tool_calls", None)
    if calls is None and isinstance(message, dict):
        calls = message.get("tool_calls")
    return list(calls or [])


def _messages(outputs: Any) -> list[Any] | None:
    messages = outputs.get("messages") if isinstance(outputs, dict) else None
    return messages if isinstance(messages, list) else None


def _this_turn(messages: list[Any]) -> list[Any]:
    """The messages after the last human one: a graph with a checkpointer returns the whole thread."""
    for i in range(len(messages) - 1, -1, -1):
        if _role(messages[i]) == "human":
            return messages[i + 1:]
    return messages


def final_answer(outputs: Any) -> str | None:
    """The agent's final answer in a root output: the last AI message of the turn that calls no tool; for other
    outputs, their text (``text_of_output``)."""
    messages = _messages(outputs)
    if messages is None:
        return text_of_output(outputs)
    for m in reversed(_this_turn(messages)):
        if _role(m) == "ai" and not _tool_calls(m):
            text = message_text(m)
            if text:
                return text
    rest = {k: v for k, v in outputs.items() if k != "messages"}  # a graph state's own answer field, if any
    return text_of_output(rest) if rest else None


def _call_order(root: Any, tools: list[Any]) -> dict[int, int]:
    """Each top-level tool run's 1-based index among the turn's tool calls: the order the model asked for them in
    (tools may run in parallel), else the order they started in."""
    ids: list[str] = []
    for m in _this_turn(_messages(root.outputs) or []):
        for call in _tool_calls(m):
            cid = call.get("id") if isinstance(call, dict) else getattr(call, "id", None)
            if cid:
                ids.append(str(cid))
    pos = {cid: i for i, cid in enumerate(ids)}
    ordered = sorted(tools, key=lambda t: (pos.get(str(t.tool_call_id), len(pos)), t.start))
    return {t.id.int: i for i, t in enumerate(ordered, 1)}


def tool_input_of(tool: Any) -> str:
    """The query an agent gave a tool: its question-like argument, its only string argument, or all its arguments."""
    inputs = tool.inputs
    if isinstance(inputs, dict):
        question = question_of(inputs)
        if question:
            return question
        texts = [v for v in inputs.values() if isinstance(v, str)]
        if len(texts) == 1:
            return texts[0]
        try:
            return json.dumps(inputs, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(inputs)
    return "" if inputs is None else str(inputs)


def tool_output_of(tool: Any) -> str | None:
    """The tool's own answer (the content of its ToolMessage), or None when it failed."""
    if tool.error:
        return None
    out = (tool.outputs or {}).get("output") if isinstance(tool.outputs, dict) else tool.outputs
    if out is None:
        return None
    text = message_text(out) if hasattr(out, "content") else None
    return text if text is not None else str(out)


def _docs_of(run: Any) -> list[Any] | None:
    if run.error or not isinstance(run.outputs, dict) or "documents" not in run.outputs:
        return None
    return list(run.outputs["documents"] or [])


def _unwrap(value: Any, key: str) -> Any:
    return value[key] if isinstance(value, dict) and set(value) == {key} else value


def _same_docs(a: Any, b: list[Any]) -> bool:
    return isinstance(a, list) and len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _is_docs(value: Any) -> bool:
    return isinstance(value, list) and all(hasattr(d, "page_content") for d in value)


def _after_steps(retriever: Any, docs: list[Any], runs: list[tuple[Any, tuple[Any, ...]]]) -> list[Any]:
    """The documents after the chain steps that took the retriever's list and returned documents (a filter, a
    compressor in LCEL: ``retriever | keep_relevant``), in order; ``docs`` when there is no such step."""
    if not docs or retriever.end is None:
        return docs
    used: set[int] = set()
    start = retriever.end
    for _ in range(8):  # a few steps at most; each must start after the one before
        step = next((r for r, ancestors in runs
                     if r.start > start and r.id.int not in used and not r.error and retriever not in ancestors
                     and r.run_type not in ("retriever", "llm", "chat_model", "tool")
                     and _same_docs(_unwrap(r.inputs, "input"), docs) and _is_docs(_unwrap(r.outputs, "output"))),
                    None)
        if step is None:
            break
        used.add(step.id.int)
        start = step.start
        docs = list(_unwrap(step.outputs, "output"))
        if not docs:
            break
    return docs


def _ids(docs: list[Any]) -> list[str]:
    return [doc_id(d) for d in docs]


def _agent_context(run: Any, ancestors: tuple[Any, ...], root: Any) -> tuple[str, Any] | None:
    """("tool", the tool run) when the retrieval ran inside an agent's tool, ("node", its name) inside a LangGraph
    node, else None."""
    tool = next((a for a in reversed(ancestors) if a.run_type == "tool" and a is not root), None)
    if tool is not None:
        return "tool", tool
    node = metadata_of(run).get("langgraph_node")
    if isinstance(node, str) and node and not node.startswith("__"):
        return "node", node
    return None


def _ranking(retrieved: list[Any], docs: list[Any], inside: list[Any]) -> list[Any] | None:
    """The documents in the order the retriever ranked them, when the LLM saw another list (a compressor or filter
    over one inner retriever, or LCEL steps after it); None when it saw the retriever's own list."""
    retrieved_ids = _ids(retrieved)
    ranking = None
    if len(inside) == 1:
        inner = _docs_of(inside[0])
        if inner is not None and _ids(inner) != retrieved_ids:
            ranking = inner
    if ranking is None and docs is not retrieved and _ids(docs) != retrieved_ids:
        ranking = retrieved
    return ranking


def _answer_of(context: tuple[str, Any] | None, consumer: Any, root_answer: str | None,
               root_text: str | None) -> tuple[str | None, str]:
    """The answer a retrieval's case is scored against, and where it came from (``answer_source``)."""
    answer: str | None
    if context is not None and root_answer is not None:
        answer, answer_source = root_answer, "agent_final"
    elif consumer is not None:
        answer, answer_source = llm_text(consumer), f"llm:{consumer.name}"
    else:
        answer, answer_source = root_text, "root_output"
    if answer is None:
        answer_source = "none"
    return answer, answer_source


def _case_metadata(root: Any, run: Any, root_meta: dict[str, Any], *, query: str, question: str | None,
                   answer_source: str, diagnostics: list[dict[str, Any]], ranking: list[Any] | None) -> dict[str, Any]:
    """The additional_metadata of a retrieval's case: where it came from in the root run, and how it was read."""
    meta = {
        RETRIEVER_KEY: run.name,
        "retriever_query": query,
        CHAIN_INPUT_KEY: question,
        "root_run_id": str(root.id),
        "retriever_run_id": str(run.id),
        "answer_source": answer_source,
    }
    meta.update({k: v for k, v in metadata_of(run).items() if k.startswith("ls_") and isinstance(v, str)})
    if metadata_of(run).get("contextjudge_tool_output"):
        meta["tool_output_retrieval"] = True  # a tool's output captured as a retrieval (retrieval_tools=)
    call = metadata_of(run).get("contextjudge_vector_store_call")
    if call:
        meta["vector_store_call"] = call  # a vector store method called directly (_vectorstores)
    if diagnostics:
        meta["sub_retrievals"] = diagnostics
    if ranking is not None:
        meta[RETRIEVER_RANKING_KEY] = [node_of(d).model_dump() for d in ranking]
    if root.error:
        meta["root_error"] = root.error[:300]
    where = case_trace(root.otel, run.otel)
    if where is not None:
        meta[OTEL_KEY] = where
    for key in (GOLDEN_ID_KEY, *THREAD_KEYS):
        if key in root_meta:
            meta[key] = root_meta[key]
    return meta


def _agent_step(context: tuple[str, Any], root: Any, query: str, tools: list[Any], call_of: dict[int, int],
                node_names: list[str], thread_id: str | None) -> tuple[dict[str, Any], str, int]:
    """The agent step a retrieval ran in (a tool call, or a graph node: then ``node_names`` gets its name), its
    label, and which of the steps with that label it was (1 for the first)."""
    kind, where = context
    if kind == "tool":
        label, call = where.name, call_of.get(where.id.int, 1)
        agent = {"tool": where.name, "tool_input": tool_input_of(where), "tool_output": tool_output_of(where),
                 "call": call}
        nth = 1 + sum(1 for t in tools if t.name == label and call_of[t.id.int] < call)
    else:
        label, call = where, len(node_names) + 1
        agent = {"tool": None, "node": where, "tool_input": query, "tool_output": None, "call": call}
        nth = 1 + node_names.count(label)
        node_names.append(label)
    agent.update({"agent": root.name, "framework": "langchain"})
    if thread_id is not None:
        agent["thread_id"] = thread_id
    return agent, label, nth


def retrievals(root: Any, thread_id: str | None = None,
               runs: list[tuple[Any, tuple[Any, ...]]] | None = None) -> list[Retrieval]:
    """The test cases of one finished root run, one per top-level retriever run (``runs``: ``walk(root)``, when the
    caller has it already)."""
    runs = walk(root) if runs is None else runs
    llms = [(r, a) for r, a in runs if r.run_type in ("llm", "chat_model") and not r.error]
    question = question_of(root.inputs)
    root_text = None if root.error else text_of_output(root.outputs)
    root_answer = None if root.error else final_answer(root.outputs)
    root_meta = metadata_of(root)
    tools = [r for r, a in runs if r.run_type == "tool" and r is not root
             and not any(x.run_type == "tool" and x is not root for x in a)]
    call_of = _call_order(root, tools)
    node_names: list[str] = []  # the graph nodes' retrievals so far: their call numbers, and " #2"
    out: list[Retrieval] = []
    for run, ancestors in runs:
        if run.run_type != "retriever" or any(a.run_type == "retriever" for a in ancestors):
            continue
        retrieved = _docs_of(run)
        if retrieved is None:
            continue
        query = (run.inputs or {}).get("query")
        query = query if isinstance(query, str) else str(query or "")
        # what the LLM saw: a compressor or filter wrapping one inner retriever, then LCEL steps after it
        subs = [(r, a) for r, a in runs if r.run_type == "retriever" and run in a]
        inside = [r for r, a in subs if next(x for x in reversed(a) if x.run_type == "retriever") is run]
        docs = _after_steps(run, retrieved, runs)
        ranking = _ranking(retrieved, docs, inside)
        consumer = _consumer(run, docs, llms)
        context = _agent_context(run, ancestors, root)
        answer, answer_source = _answer_of(context, consumer, root_answer, root_text)
        diagnostics = [
            {"name": r.name, "query": (r.inputs or {}).get("query"),
             "ids": [doc_id(d) for d in ((r.outputs or {}).get("documents") or [])]}
            for r, _ in subs
        ]
        meta = _case_metadata(root, run, root_meta, query=query, question=question, answer_source=answer_source,
                              diagnostics=diagnostics, ranking=ranking)
        case_input = question or query
        if not case_input.strip():
            continue
        agent = None
        if context is not None:
            agent, label, nth = _agent_step(context, root, query, tools, call_of, node_names, thread_id)
            name = f"{label}{f' #{nth}' if nth > 1 else ''}: {short(case_input, 60)}"
            meta[AGENT_KEY] = agent
        else:
            name = short(case_input, 80)
        scored = run.outputs.get("scores")  # a vector store's *_with_score call: one score per document
        by_doc = ({id(d): sc for d, sc in zip(retrieved, scored, strict=False)} if isinstance(scored, list) else {})
        case = LLMTestCase(input=case_input, actual_output=answer,
                           retrieval_context=[node_of(d, by_doc.get(id(d))) for d in docs],
                           name=name, additional_metadata=meta)
        out.append(Retrieval(case=case, name=run.name, query=query, question=question,
                             answer_source=answer_source, diagnostics=diagnostics, agent=agent))
    return out

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

One concept a module: ``_tree`` the run tree the handler keeps (``RunRecord``, ``walk``); ``_texts`` questions,
answers and prompts read from runs; ``_nodes`` a Document as a node; ``_tools`` a tool's output as a retrieval;
``_agents`` the agent step a retrieval ran in; ``_seen`` what the LLM saw; ``_cases`` the rules above applied
(``retrievals``).
"""

from __future__ import annotations

from ._cases import Retrieval, retrievals
from ._texts import final_answer, question_of
from ._tools import RETRIEVAL_TOOL_TAG, add_tool_retrievals
from ._tree import THREAD_KEYS, RunRecord, thread_id_of, walk

__all__ = ["RETRIEVAL_TOOL_TAG", "THREAD_KEYS", "Retrieval", "RunRecord", "add_tool_retrievals", "final_answer",
           "question_of", "retrievals", "thread_id_of", "walk"]

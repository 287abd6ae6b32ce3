"""The judge protocol: what one judge request asks and the shape of a judge's answer.

A request asks for one verdict family for one test case, with every item (node, statement or sentence) at once,
each under a short stable id. The request travels with the prompt message, in
``HumanMessage.additional_kwargs["contextjudge_request"]`` (a plain dict, ``JudgeRequest.model_dump()``), so a judge
that understands it (the embedded judge, the test fakes) can answer without reading the prompt text. Other chat
models read only the prompt text. Verdicts are keyed by id, never by position.

Tasks:
    node_usefulness     is item (a retrieved node) useful for arriving at ``reference`` for ``input``?
                        (contextual precision: reference = expected_output; utilization: reference = actual_output;
                        turn precision: reference = the turn's expected content or the case's expected_outcome)
    statement_support   is item (a sentence of ``reference``) supported by the ``context`` nodes, and by which ids?
                        (contextual recall, turn recall)
    sentence_relevance  is item (a sentence of a node; ids "n<rank>.s<k>") relevant to ``input``?
                        (contextual relevancy, turn relevancy)
    rubric_recall       one 0.0-1.0 score: how well ``answer`` matches ``reference`` given ``context``.

``history`` holds the earlier turns of a conversation window as ``{"role", "content"}`` dicts; ``input`` is then the
last user message, so "what about its price?" can be resolved against the history.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["REQUEST_KEY", "Item", "JudgeRequest", "Task", "request_from_message_kwargs"]

REQUEST_KEY = "contextjudge_request"
PROTOCOL_VERSION = 1

Task = Literal["node_usefulness", "statement_support", "sentence_relevance", "rubric_recall"]


class Item(BaseModel):
    """One thing to judge, or one piece of evidence, under a short stable id."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    # For sentence_relevance: the id of the node the sentence belongs to. Evidence items carry rank here too.
    parent: str | None = None
    # Images (multimodal) travel as URLs or data URLs; text-only judges get them described in the text.
    images: list[str] = Field(default_factory=list)


class JudgeRequest(BaseModel):
    """One judge request: one verdict family for one test case (or one turn of a conversation)."""

    model_config = ConfigDict(extra="forbid")

    version: int = PROTOCOL_VERSION
    task: Task
    metric: str = ""
    input: str
    history: list[dict[str, str]] = Field(default_factory=list)
    reference: str | None = None
    reference_kind: Literal["expected_output", "actual_output", "expected_outcome"] | None = None
    answer: str | None = None
    items: list[Item] = Field(default_factory=list)
    context: list[Item] = Field(default_factory=list)


def request_from_message_kwargs(kwargs: dict[str, Any]) -> JudgeRequest | None:
    """Read the request that travels beside a prompt, or None when the message has none."""
    raw = kwargs.get(REQUEST_KEY)
    if raw is None:
        return None
    return raw if isinstance(raw, JudgeRequest) else JudgeRequest.model_validate(raw)

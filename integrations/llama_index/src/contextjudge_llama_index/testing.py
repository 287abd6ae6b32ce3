"""Offline LlamaIndex components for tests, examples and benchmarks: no network, no model files, deterministic.

- ``KeywordEmbedding``: a hashing bag-of-words embedding, so that ``VectorStoreIndex`` ranks by shared words
  (``MockEmbedding`` returns a constant vector, which makes every similarity tie).
- ``ExtractiveLLM``: a ``CustomLLM`` that answers with the context sentence sharing the most words with the question,
  and rewrites follow-up questions into standalone ones for the condense chat modes.
- ``ReverseReranker`` and ``KeywordReranker``: node postprocessors that change the retriever's order.
- ``ScriptedAgentLLM``: a function-calling chat model for agents (``FunctionAgent``, ``AgentWorkflow``, and
  ``ReActAgent`` with ``react=True``) that plays a script: per user message, the tool calls to make, then the answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM as MockFunctionCallingLLMBase
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import Field, PrivateAttr

__all__ = ["ExtractiveLLM", "KeywordEmbedding", "KeywordReranker", "ReverseReranker", "ScriptedAgentLLM",
           "content_words"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP_TEXT = (
    "a am an and are as at be by can do does did for from get gets got has have how i if in is it its many may me much "
    "my of on or our so than that the their them there these they this to us was we what when where which who why "
    "will with would you your about after any also all"
)
_STOP = frozenset(_STOP_TEXT.split())


def _stem(w: str) -> str:
    """A crude suffix fold, enough for keyword matching: "days" -> "day", "travelling" -> "travel"."""
    for suffix in ("ing", "ed"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            w = w[: -len(suffix)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls" or len(w) > 3 and w.endswith("ll"):
                w = w[:-1]
            return w
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    return w


def content_words(text: str) -> list[str]:
    """Lower-cased content words of ``text``, stop words dropped, suffixes folded ("days" -> "day")."""
    return [_stem(w) for w in _WORD.findall((text or "").lower()) if w not in _STOP and len(w) > 1]


class KeywordEmbedding(BaseEmbedding):
    """A deterministic hashing bag-of-words embedding: cosine similarity grows with shared content words."""

    dim: int = Field(default=512, description="Number of hash buckets.")

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "KeywordEmbedding"

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for w in content_words(text):
            vec[zlib.crc32(w.encode()) % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0:
            vec[0] = 1e-6
            return vec
        return [v / norm for v in vec]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        await asyncio.sleep(0)  # let concurrent queries interleave, as a remote embedding would
        return self._embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


_METADATA_LINE = re.compile(r"^\s*[\w.-]+:\s*\S+(\s+\S+){0,3}\s*$")  # "topic: vacation", as LlamaIndex prints metadata


def _best_sentence(question: str, context: str) -> str:
    want = set(content_words(question))
    best, best_score = "", 0
    for line in context.splitlines():
        if _METADATA_LINE.match(line):
            continue
        for sent in _SENTENCE.split(line.strip()):
            sent = sent.strip()
            if not sent:
                continue
            score = len(want & set(content_words(sent)))
            if score > best_score:
                best, best_score = sent, score
    return best or "I don't know."


class ExtractiveLLM(CustomLLM):
    """An offline LLM: answers with the best-matching context sentence; rewrites follow-ups as standalone questions.

    It understands LlamaIndex's default question-answering, condense and context-chat prompts. ``delay`` (seconds)
    simulates a model's latency (``asyncio.sleep`` on the async paths, so concurrent calls interleave).
    """

    delay: float = 0.0

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "ExtractiveLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """What LlamaIndex reads of this model."""
        return LLMMetadata(model_name="extractive-offline", is_chat_model=False)

    def answer(self, prompt: str) -> str:
        """The completion for ``prompt``."""
        condensed = self._condense(prompt)
        if condensed is not None:
            return condensed
        question, context = self._split(prompt)
        return _best_sentence(question, context)

    @staticmethod
    def _condense(prompt: str) -> str | None:
        m = re.search(r"Follow Up Input:\s*(.*?)\s*\n?\s*Standalone question:", prompt, re.S) or re.search(
            r"<Follow Up Message>\s*(.*?)\s*<Standalone question>", prompt, re.S)
        if not m:
            return None
        follow_up = m.group(1).strip()
        history = prompt[: m.start()]
        users = re.findall(r"(?:^|\n)\s*(?:user|Human):\s*(.*)", history)
        if not users:
            return follow_up
        extra = [w for w in content_words(users[-1]) if w not in set(content_words(follow_up))]
        return f"{follow_up.rstrip('?')} ({' '.join(extra)})?" if extra else follow_up

    @staticmethod
    def _split(prompt: str) -> tuple[str, str]:
        m = re.search(r"Query:\s*(.*?)\s*\nAnswer:", prompt, re.S)
        if m:
            ctx = re.search(r"-{5,}\n(.*?)\n-{5,}", prompt, re.S)
            return m.group(1), ctx.group(1) if ctx else prompt[: m.start()]
        users = list(re.finditer(r"(?:^|\n)user:\s*(.*)", prompt))
        if users:
            question = users[-1].group(1)
            ctx = re.search(r"context:\s*\n(.*?)\n\s*Instruction:", prompt, re.S)
            return question, ctx.group(1) if ctx else prompt[: users[-1].start()]
        return prompt, prompt

    def _sleep(self) -> None:
        if self.delay:
            time.sleep(self.delay)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """The scripted completion of ``prompt``."""
        self._sleep()
        return CompletionResponse(text=self.answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """The scripted completion, as one streamed chunk."""
        self._sleep()
        text = self.answer(prompt)

        def gen() -> CompletionResponseGen:
            acc = ""
            for i, word in enumerate(text.split(" ")):
                delta = word if i == 0 else " " + word
                acc += delta
                yield CompletionResponse(text=acc, delta=delta)

        return gen()

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Async ``complete``."""
        await asyncio.sleep(self.delay)
        return CompletionResponse(text=self.answer(prompt))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        """Async ``stream_complete``."""
        await asyncio.sleep(self.delay)
        text = self.answer(prompt)

        async def gen() -> CompletionResponseAsyncGen:
            acc = ""
            for i, word in enumerate(text.split(" ")):
                delta = word if i == 0 else " " + word
                acc += delta
                await asyncio.sleep(0)
                yield CompletionResponse(text=acc, delta=delta)

        return gen()


class ReverseReranker(BaseNodePostprocessor):
    """Reverses the retriever's order (a stand-in for a reranker that disagrees with the retriever)."""

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "ReverseReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                           ) -> list[NodeWithScore]:
        return list(reversed(nodes))


class KeywordReranker(BaseNodePostprocessor):
    """Reorders nodes by the number of the query's content words they contain; keeps the best ``top_n``."""

    top_n: int = 3

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "KeywordReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                           ) -> list[NodeWithScore]:
        want = set(content_words(query_bundle.query_str if query_bundle else ""))

        def key(n: NodeWithScore) -> int:
            return -len(want & set(content_words(n.node.get_content())))

        ranked = sorted(nodes, key=key)[: self.top_n]
        return [NodeWithScore(node=n.node, score=float(-key(n))) for n in ranked]


Step = str | Sequence[tuple[str, dict[str, Any]]]
"""One reply of a scripted agent model: the final answer (a string), or the tool calls to make (name, arguments)."""


class ScriptedAgentLLM(MockFunctionCallingLLMBase):  # type: ignore[misc, valid-type]
    """A function-calling chat model that plays a script, for offline agent tests.

    ``script`` maps a user message to the replies of that turn, in order: each reply is a list of tool calls
    (``[("policy_search", {"input": "vacation days"})]``, several for parallel calls) or the final answer, a string
    in which ``{results}`` is replaced by the turn's tool results joined by a space. Or ``script`` is a function
    ``(user_message, tool_results) -> reply``. A user message the script does not know gets "I don't know.".

    With ``react=True`` the replies are written as ReAct text (``Thought / Action / Action Input`` and
    ``Thought / Answer``) for a ``ReActAgent``; otherwise they are tool-call blocks for a ``FunctionAgent``.
    The reply is a function of the turn only (its user message and tool results), so concurrent runs never mix.
    """

    react: bool = False
    _script: Any = PrivateAttr(default=None)

    def __init__(self, script: dict[str, Sequence[Step]] | Callable[[str, list[str]], Step], *, react: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.react = react
        self._script = script
        self.response_generator = self._reply

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "ScriptedAgentLLM"

    def _turn(self, messages: Sequence[Any]) -> tuple[str, list[str]]:
        """The turn's user message and the tool results since it."""
        user, results = "", []
        for m in messages:
            role = getattr(m.role, "value", m.role)
            content = m.content or ""
            if self.react and content.startswith("Observation:"):
                results.append(content[len("Observation:"):].strip())
            elif role == "user":
                user, results = content, []
            elif role == "tool":
                results.append(content)
        return user, results

    def _step(self, user: str, results: list[str]) -> Step:
        script = self._script
        if callable(script):
            return script(user, results)
        steps = script.get(user) or script.get(user.strip()) or ["I don't know."]
        answered = 0  # tool calls the replies before this one made (each has its result by now)
        for step in steps:
            if isinstance(step, str) or len(results) < answered + len(step):
                return step
            answered += len(step)
        return "I don't know."

    def _reply(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock  # noqa: PLC0415

        user, results = self._turn(messages)
        step = self._step(user, results)
        if isinstance(step, str):
            text = step.replace("{results}", " ".join(results))
            if self.react:
                text = f"Thought: I can answer without using any more tools.\nAnswer: {text}"
            return ChatMessage(role="assistant", content=text)
        if self.react:
            name, args = step[0]
            return ChatMessage(role="assistant", content=(
                f"Thought: I need to use a tool to help me answer the question.\nAction: {name}\n"
                f"Action Input: {json.dumps(args)}"))
        blocks = [ToolCallBlock(tool_call_id=f"call-{len(results) + n}", tool_name=name, tool_kwargs=dict(args))
                  for n, (name, args) in enumerate(step)]
        return ChatMessage(role="assistant", blocks=blocks)

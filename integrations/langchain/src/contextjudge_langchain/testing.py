"""Deterministic, offline stand-ins for the parts of a RAG app: embeddings, a chat model and an agent's model.

They let the demo, the tests and the benchmark build a real LCEL RAG chain, or a real ``create_agent`` agent or
LangGraph graph, with no model download and no network. None is a language model: ``BagOfWordsEmbeddings`` hashes
words into a vector, ``ExtractiveChatModel`` answers by quoting the context sentences that share the most words with
the question, and ``ScriptedAgentModel`` asks for the tool calls a script gives, then answers by quoting the tools'
results.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

__all__ = ["STOPWORDS", "BagOfWordsEmbeddings", "ExtractiveChatModel", "ScriptedAgentModel", "tokens"]

_STOP_TEXT = (
    "a an and are as at be by can do does for from get gets has have how i if in is it its me my of on or our "
    "the their there this to up we what when where which who will with you your do i'm any much many should "
    "would could after before also than then them they these those been being into per each every not no "
    "yes was were"
)
STOPWORDS = frozenset(_STOP_TEXT.split())
_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "ing", "ies", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def tokens(text: str, *, stopwords: bool = True, stem: bool = True) -> list[str]:
    """Lower-cased words, without stop words and lightly stemmed (each step can be turned off)."""
    words = _WORD.findall(text.lower())
    if stopwords:
        words = [w for w in words if w not in STOPWORDS]
    if stem:
        words = [_stem(w) for w in words]
    return words


class BagOfWordsEmbeddings(Embeddings):
    """Hashed bag-of-words vectors: texts that share words are close. Deterministic; no model, no numpy.

    ``dim`` is the number of hash buckets (small values make unrelated words collide); ``stopwords`` and ``stem``
    switch the clean-up of ``tokens`` on or off. Turning them off, with a small ``dim``, gives a deliberately weak
    retriever.
    """

    def __init__(self, dim: int = 1024, *, stopwords: bool = True, stem: bool = True) -> None:
        self.dim = dim
        self.stopwords = stopwords
        self.stem = stem

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for w in tokens(text, stopwords=self.stopwords, stem=self.stem):
            vec[zlib.crc32(w.encode()) % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """A fixed vector per text (word hashing): offline and deterministic."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        return self._embed(text)


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class ExtractiveChatModel(BaseChatModel):
    """An offline chat model that answers by quoting context sentences. Not a language model.

    It reads the last message, takes the text after ``question_marker`` as the question and the text between
    ``context_marker`` and the question as the context (everything before the question when the prompt has no
    ``context_marker``), and answers with the ``max_sentences`` context sentences
    that share the most words with the question (in context order). With no overlap it says it does not know.
    Streams word by word, so it also exercises streaming.
    """

    context_marker: str = "Context:"
    question_marker: str = "Question:"
    max_sentences: int = 2

    @property
    def _llm_type(self) -> str:
        return "contextjudge-extractive"

    def answer(self, prompt: str) -> str:
        """The scripted answer to ``prompt``."""
        q_at = prompt.rfind(self.question_marker)
        question = prompt[q_at + len(self.question_marker):] if q_at >= 0 else prompt
        c_at = prompt.find(self.context_marker)
        if c_at >= 0:
            context = prompt[c_at + len(self.context_marker): q_at if q_at > c_at else None]
        else:  # no context marker (a prompt like "Answer from the context.\n{context}\n\nQuestion: ..."):
            context = prompt[:q_at] if q_at >= 0 else ""  # everything before the question is the context
        q_words = set(tokens(question))
        sentences = [s.strip() for s in _SENTENCE.split(" ".join(context.split())) if s.strip()]
        scored = [(len(q_words & set(tokens(s))), i, s) for i, s in enumerate(sentences)]
        best = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1]))[: self.max_sentences]
        if not best:
            return "I could not find this in the documents I was given."
        return " ".join(s for _, _, s in sorted(best, key=lambda x: x[1]))

    def _prompt(self, messages: list[BaseMessage]) -> str:
        last = messages[-1].content if messages else ""
        return last if isinstance(last, str) else str(last)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answer(self._prompt(messages))))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        words = self.answer(self._prompt(messages)).split(" ")
        for i, word in enumerate(words):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


ToolPlan = Callable[[str], Sequence[tuple[str, dict[str, Any]]]]


class ScriptedAgentModel(BaseChatModel):
    """An offline tool-calling chat model for agents (``create_agent``, a LangGraph ``ToolNode`` graph). Not a
    language model.

    On a turn's user message it asks for the tool calls ``plan(user_message)`` returns, as ``(tool name, args)``
    pairs (all in one AI message, so a ToolNode runs them in parallel); by default, one call of the first bound tool
    with ``{"query": user_message}``. Once the tools have answered, it answers by quoting the ``max_sentences``
    sentences of the tools' results that share the most words with the user's message (as ``ExtractiveChatModel``).
    A plan that raises makes the model call raise, as a failing provider would. The same messages always give the
    same answer, so concurrent agents stay deterministic.
    """

    plan: ToolPlan | None = None
    max_sentences: int = 2

    @property
    def _llm_type(self) -> str:
        return "contextjudge-scripted-agent"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """This model with ``tools`` bound (tool calls are scripted)."""
        from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: PLC0415

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        at = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        user = messages[at].text if at >= 0 else ""
        turn = messages[at + 1:]
        tools = [t["function"]["name"] for t in kwargs.get("tools") or () if isinstance(t, dict) and "function" in t]
        if tools and not any(isinstance(m, AIMessage) and m.tool_calls for m in turn):
            plan = list(self.plan(user)) if self.plan is not None else [(tools[0], {"query": user})]
            if plan:
                calls = [{"name": name, "args": dict(args), "id": f"call-{len(messages)}-{i}", "type": "tool_call"}
                         for i, (name, args) in enumerate(plan, 1)]
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])
        context = "\n\n".join(m.text for m in turn if isinstance(m, ToolMessage))
        quoter = ExtractiveChatModel(max_sentences=self.max_sentences)
        answer = quoter.answer(f"Context:\n{context}\n\nQuestion: {user}")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])

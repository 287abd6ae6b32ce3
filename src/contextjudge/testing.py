"""Test doubles that ship with the library: a scripted judge that is a real LangChain chat model.

``FakeJudge`` answers contextjudge's judge requests by id, from rules you give it, in the style you choose:

    judge = FakeJudge(rules={"Paris": "yes"}, default="no")            # native structured output
    judge = FakeJudge(style="prose")                                     # JSON inside prose and a fenced block
    judge = FakeJudge(omit_ids={"n2"})                                   # leaves out n2 once (exercises the re-ask)
    judge = FakeJudge(failures=[JudgeHTTPError(429, retry_after=0)] * 2) # two rate limits, then answers
    judge = FakeJudge(failures=[JudgeHTTPError(401)])                    # authentication failure
    judge = FakeJudge(confidences={"Paris": 0.8, "n3": 0.3})             # reports confidences (yes at >= 0.5)
    judge = FakeJudge(temperature=0.7, sequences={"n2": ["yes", "no"]})  # samples: n2 is yes, no, yes, ... by call

It records every call in ``judge.calls`` (task, method, item ids, prompt), so tests can count judge calls.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import ConfigDict, Field, PrivateAttr

from .judges import REQUEST_KEY, Item, JudgeRequest

__all__ = ["FakeJudge", "JudgeHTTPError", "overlap_rule"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "in", "on", "is", "are", "was", "were", "to", "and", "or", "for", "what", "which",
         "who", "how", "does", "do", "did", "it", "its", "that", "this", "with", "by", "as", "at", "be", "from"}


class JudgeHTTPError(Exception):
    """An HTTP error as a provider SDK would raise it: ``status_code`` and a ``response`` with headers."""

    class _Response:
        def __init__(self, status: int, headers: dict[str, str]) -> None:
            self.status_code = status
            self.headers = headers

    def __init__(self, status_code: int, message: str = "", *, retry_after: float | None = None) -> None:
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        self.status_code = status_code
        self.response = self._Response(status_code, headers)
        super().__init__(message or f"HTTP {status_code}")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall((text or "").lower()) if w not in _STOP and len(w) > 1}


def overlap_rule(request: JudgeRequest, item: Item) -> str:
    """A crude but deterministic default: yes when the item shares two content words with the reference/input."""
    if request.verdict_family.cites_context:  # a statement against the retrieved nodes
        support = set().union(*(_words(c.text) for c in request.context)) if request.context else set()
        need = _words(item.text)
        return "yes" if need and len(need & support) / len(need) >= 0.6 else "no"
    target = _words(request.reference or "") | _words(request.input)
    return "yes" if len(_words(item.text) & target) >= 2 else "no"


class FakeJudge(BaseChatModel):
    """A scripted judge for tests and demos. Deterministic, offline, and a real LangChain chat model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    rules: dict[str, str] = Field(default_factory=dict)
    """Substring of an item's text (or an exact item id) -> "yes"/"no"; first match wins."""
    default: str | Callable[[JudgeRequest, Item], str] = "overlap"
    """Verdict when no rule matches: "yes", "no", "overlap" (word overlap) or a function (request, item) -> verdict."""
    style: str = "native"
    """native: supports structured output. json: plain JSON text only. prose: JSON in prose and a fenced block."""
    supported_methods: tuple[str, ...] = ("json_schema", "function_calling", "json_mode")
    omit_ids: set[str] = Field(default_factory=set)
    """Ids left out of the first answer that includes them (each id once)."""
    failures: list[BaseException] = Field(default_factory=list)
    """Raised, in order, by the next calls, before the judge starts answering."""
    confidences: dict[str, float] | Callable[[JudgeRequest, Item], float | None] = Field(default_factory=dict)
    """Substring of an item's text (or an exact item id) -> the confidence (0-1) the judge reports for it, first match
    wins; or a function (request, item) -> confidence or None. An item with a confidence and no matching rule gets
    "yes" at confidence >= 0.5, as a judge that reports confidences decides; items without one report none.
    Confidences reach the judge client on the plain chat path (``style="json"`` or ``"prose"``) only: the
    structured-output schemas have no confidence field, as a provider's strict schema would not either."""
    temperature: float = 0.0
    """Above 0, the judge says it samples, so ``repeats=k`` asks it k times; at 0 it is deterministic (asked once)."""
    sequences: dict[str, list[str]] = Field(default_factory=dict)
    """Substring of an item's text (or an exact item id) -> verdicts given in turn, one per time the item is asked
    (then again from the start): a judge that disagrees with itself. Checked before ``rules``."""
    rubric_scores: list[float] = Field(default_factory=list)
    """Rubric scores given in turn, one per rubric request (then again from the start); empty: ``rubric_score``."""
    rubric_score: float = 1.0
    verdict_words: dict[str, str] = Field(default_factory=lambda: {"yes": "yes", "no": "no"})
    """How to spell the verdicts, e.g. {"yes": "Yes.", "no": "FALSE"}, to test normalisation."""
    model_name: str = "fake-judge"
    delay: float = 0.0
    """Seconds each call takes (to exercise timeouts and concurrency)."""
    supports_images: bool = False
    """Whether metrics may send this judge images (a multimodal judge); each call records them in ``images``."""
    record_calls: bool = True
    """Keep every call in ``calls``; turn off for long runs, where the record would grow with every call."""
    contextjudge_bills_schema: ClassVar[bool] = False
    """Its answers are scripted here: no request goes out, so no structured-output answer schema is billed as input
    (a provider's is, and a budget reserves it before each call)."""

    _calls: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _omitted: set[str] = PrivateAttr(default_factory=set)
    _asked: dict[tuple[str, str, str], int] = PrivateAttr(default_factory=dict)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every call the fake answered, in order (task, method, ids, prompt, messages), for tests to inspect."""
        return self._calls

    @property
    def _llm_type(self) -> str:
        return "contextjudge-fake"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "style": self.style, "rules": self.rules,
                "default": self.default if isinstance(self.default, str) else getattr(self.default, "__name__", "fn"),
                "rubric_score": self.rubric_score, "temperature": self.temperature, "sequences": self.sequences,
                "rubric_scores": self.rubric_scores,
                "confidences": self.confidences if isinstance(self.confidences, dict)
                else getattr(self.confidences, "__name__", "fn")}

    # -------------------------------------------------------------------------------------------- answering
    def _confidence(self, request: JudgeRequest, item: Item) -> float | None:
        if callable(self.confidences):
            return self.confidences(request, item)
        for needle, conf in self.confidences.items():
            if needle == item.id or needle in item.text:
                return float(conf)
        return None

    def _decide(self, request: JudgeRequest, item: Item) -> str:
        for needle, seq in self.sequences.items():
            if seq and (needle == item.id or needle in item.text):
                with self._lock:
                    key = (request.task, item.id, item.text)
                    n = self._asked[key] = self._asked.get(key, -1) + 1
                return seq[n % len(seq)]
        for needle, verdict in self.rules.items():
            if needle == item.id or needle in item.text:
                return verdict
        conf = self._confidence(request, item) if self.confidences else None
        if conf is not None:
            return "yes" if conf >= 0.5 else "no"
        if callable(self.default):
            return self.default(request, item)
        if self.default == "overlap":
            return overlap_rule(request, item)
        return self.default

    def answer(self, request: JudgeRequest) -> dict[str, Any]:
        """The answer this judge gives to ``request``, as a dict."""
        if not request.verdict_family.per_item:
            score = self.rubric_score
            if self.rubric_scores:
                with self._lock:
                    n = self._asked[("rubric_recall", "", "")] = self._asked.get(("rubric_recall", "", ""), -1) + 1
                score = self.rubric_scores[n % len(self.rubric_scores)]
            return {"score": score, "reason": f"scripted rubric score {score}"}
        verdicts = []
        for item in request.items:
            with self._lock:
                if item.id in self.omit_ids and item.id not in self._omitted:
                    self._omitted.add(item.id)
                    continue
            v = self._decide(request, item)
            entry: dict[str, Any] = {"id": item.id, "verdict": self.verdict_words.get(v, v),
                                     "reason": f"scripted: {v}"}
            conf = self._confidence(request, item) if self.confidences else None
            if conf is not None:
                entry["confidence"] = conf
            if request.verdict_family.cites_context and v == "yes":
                entry["node_ids"] = [c.id for c in request.context if _words(c.text) & _words(item.text)][:3]
            verdicts.append(entry)
        return {"verdicts": verdicts}

    def _next_failure(self) -> BaseException | None:
        with self._lock:
            return self.failures.pop(0) if self.failures else None

    def _respond(self, messages: list[BaseMessage], method: str, tags: list[str] | None = None) -> AIMessage:
        request = None
        for m in reversed(messages):
            raw = m.additional_kwargs.get(REQUEST_KEY) if hasattr(m, "additional_kwargs") else None
            if raw is not None:
                request = JudgeRequest.model_validate(raw)
                break
        prompt = "\n".join(str(m.content) for m in messages)
        with self._lock:
            if self.record_calls:
                self._calls.append({"task": request.task if request else None, "method": method,
                                    "family": request.verdict_family.name if request else None,
                                    "ids": [i.id for i in request.items] if request else [], "prompt": prompt,
                                    "metric": request.metric if request else None, "messages": messages,
                                    "tags": list(tags or []), "images": _image_blocks(messages)})
        failure = self._next_failure()
        if failure is not None:
            raise failure
        if request is None:
            body = json.dumps({"reason": "scripted summary"})
        else:
            body = json.dumps(self.answer(request))
        if self.style == "prose" and method == "text":
            body = f"Let me look at each item carefully.\n\n```json\n{body}\n```\n\nThose are my verdicts."
        usage = {"input_tokens": max(1, len(prompt) // 4), "output_tokens": max(1, len(body) // 4)}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        return AIMessage(content=body, usage_metadata=usage)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        if self.delay:
            import time  # noqa: PLC0415

            time.sleep(self.delay)
        tags = list(run_manager.tags) if run_manager is not None else []
        msg = self._respond(messages, kwargs.pop("_contextjudge_method", "text"), tags)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> ChatResult:
        if self.delay:
            import asyncio  # noqa: PLC0415

            await asyncio.sleep(self.delay)
        tags = list(run_manager.tags) if run_manager is not None else []
        msg = self._respond(messages, kwargs.pop("_contextjudge_method", "text"), tags)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, method: str | None = None,
                               **kwargs: Any):
        """LangChain's structured output, for the methods this fake's ``style`` supports."""
        method = method or "function_calling"
        if self.style != "native" or method not in self.supported_methods:
            raise NotImplementedError(f"FakeJudge(style={self.style!r}) does not support {method}")

        async def run(messages: Any, config: Any = None) -> Any:
            msg = await self.ainvoke(messages, config=config, _contextjudge_method=method)
            parsed = schema.model_validate(_json_of(msg))
            return {"raw": msg, "parsed": parsed, "parsing_error": None} if include_raw else parsed

        def run_sync(messages: Any, config: Any = None) -> Any:
            msg = self.invoke(messages, config=config, _contextjudge_method=method)
            parsed = schema.model_validate(_json_of(msg))
            return {"raw": msg, "parsed": parsed, "parsing_error": None} if include_raw else parsed

        return RunnableLambda(run_sync, afunc=run, name=f"FakeJudge[{method}]")

    def count(self, task: str | None = None) -> int:
        """How many calls were made (of ``task``, when given)."""
        return sum(1 for c in self._calls if task is None or c["task"] == task)


def _image_blocks(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """The image content blocks of ``messages`` (LangChain standard ``image`` or OpenAI-style ``image_url``)."""
    out = []
    for m in messages:
        if isinstance(m.content, list):
            out += [b for b in m.content if isinstance(b, dict) and b.get("type") in ("image", "image_url")]
    return out


def _json_of(msg: Any) -> Any:
    """The JSON of a FakeJudge answer, which is always text."""
    content = msg.content
    if not isinstance(content, str):
        raise TypeError(f"FakeJudge answered with {type(content).__name__} content, not text")
    return json.loads(content)

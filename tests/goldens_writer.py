"""A scripted question writer for the goldens tests and benchmarks/goldens_cost.py: it answers from the passage
it is sent (the question names the passage's first content words, the answer is its sentence), and knobs make it
misbehave on chunks holding a given word (unreadable JSON, refusals, invented answers, duplicates)."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr


def _passage(prompt: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.S)
    return m.group(1) if m else None


class ScriptedWriter(BaseChatModel):
    """A question writer that answers from the passage it is sent: the question names the passage's first content
    words, the answer is its first sentence. Knobs make it misbehave on chunks holding a given word."""

    bad_json_once: str = ""  # a chunk holding this word gets an unreadable answer the first time
    bad_json_always: str = ""
    refuse: str = ""  # ... a refusal
    invent: str = ""  # ... an answer the chunk does not support
    same_question: bool = False  # every chunk gets the same question (duplicates)
    _calls: list[str] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted-writer"

    def _reply(self, prompt: str) -> str:
        a = _passage(prompt, "passage_A") or ""
        b = _passage(prompt, "passage_B")
        with self._lock:
            self._calls.append(prompt)
            seen = sum(1 for p in self._calls if _passage(p, "passage_A") == a)
        if self.bad_json_always and self.bad_json_always in a:
            return '{"questions": [{"question": "unterminated'
        if self.bad_json_once and self.bad_json_once in a and seen == 1:
            return "Sure! Here are some questions: 1. What is it? 2. Why?"
        if self.refuse and self.refuse in a:
            return "I can't help with writing questions about this content."
        styles = re.findall(r'^\d+\. style "(\w+)"', prompt, re.M)
        sents = [s.strip() for s in re.split(r"(?<=\.)\s+", " ".join(a.split("\n\n")[1:] or [a])) if s.strip()]
        items = []
        for k, style in enumerate(styles):
            sent = sents[k % len(sents)]
            words = [w for w in re.findall(r"[A-Za-z]+", sent) if len(w) > 3][:4]
            q = "what is the rule on " + " ".join(words) if not self.same_question else "what is the policy here"
            answer = sent
            if style == "unanswerable":
                q, answer = "who founded the company and when", "NOT IN THE DOCUMENTS"
            elif style == "two_chunks" and b:
                answer = sent + " " + re.split(r"(?<=\.)\s+", b.split("\n\n")[-1])[0]
                q = "what do the rules say about " + " ".join(words[:2]) + " and the other topic"
            elif style == "conversational":
                q = "hey so whats teh deal with " + " ".join(words[:3])
            elif style == "multi_part":
                q = f"what are the rules on {' '.join(words[:2])}, and when do they apply to {' '.join(words[2:4])}"
            if self.invent and self.invent in a:
                answer = "Zebras migrate across the Serengeti plains every autumn season."
            items.append({"style": style, "question": q, "answer": answer})
        return json.dumps({"questions": items})

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        prompt = "\n".join(str(m.content) for m in messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._reply(prompt)))])

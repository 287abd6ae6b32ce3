"""HTTP salvage: the judge's answer behind an SDK's parsing failure, and a response that is not a chat completion told
apart from a real failure.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from langchain_core.messages import AIMessage

from ..errors import JudgeResponseError

__all__ = []

logger = logging.getLogger("contextjudge")


def _find_cause(exc: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _odd_response(exc: BaseException) -> JudgeResponseError | None:
    """A judge call that failed because of what the server sent back, as a (transient) ``JudgeResponseError``.

    OpenAI's SDK client of ours raises it from its response hook (wrapped by the SDK as a connection error); other
    providers' SDKs and LangChain fail on an unreadable body with ``IndexError`` (no choices), ``KeyError``,
    ``AttributeError``, ``TypeError``, or a ``ValueError`` about the response."""
    found = _find_cause(exc, JudgeResponseError)
    if found is not None:
        return found  # type: ignore[return-value]
    if isinstance(exc, (IndexError, KeyError, AttributeError, TypeError)) or (
            isinstance(exc, ValueError) and "response" in str(exc).lower()):
        return JudgeResponseError(f"its response could not be read ({type(exc).__name__}: {str(exc)[:300]})")
    return None


def _recover_answer(exc: BaseException) -> AIMessage | None:
    """The raw answer behind a structured-output parsing failure, as an AIMessage, or None when there is none.

    The openai SDK parses json_schema/json_object answers itself and raises on invalid JSON (pydantic
    ``ValidationError``), on ``finish_reason="length"`` (``LengthFinishReasonError``, carrying the completion) and
    on content filtering; LangChain output parsers raise ``OutputParserException`` with ``llm_output``.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        completion = getattr(cur, "completion", None)
        choices = getattr(completion, "choices", None)
        if choices:
            message = getattr(choices[0], "message", None)
            text = getattr(message, "content", None) or getattr(message, "refusal", None) or ""
            if not text:
                for tc in getattr(message, "tool_calls", None) or []:
                    text = getattr(getattr(tc, "function", None), "arguments", "") or text
            usage = getattr(completion, "usage", None)
            meta = None
            if usage is not None:
                pin = int(getattr(usage, "prompt_tokens", 0) or 0)
                pout = int(getattr(usage, "completion_tokens", 0) or 0)
                meta = {"input_tokens": pin, "output_tokens": pout, "total_tokens": pin + pout}
            return AIMessage(content=str(text), usage_metadata=meta) if meta else AIMessage(content=str(text))
        body = _response_body(getattr(cur, "response", None))
        if body is not None:
            return body
        llm_output = getattr(cur, "llm_output", None)
        if isinstance(llm_output, str):
            return AIMessage(content=llm_output)
        errors = getattr(cur, "errors", None)
        if callable(errors) and type(cur).__name__ == "ValidationError":
            try:
                first = errors()[0]
            except Exception:  # noqa: BLE001
                first = {}
            if first.get("type") == "json_invalid" and isinstance(first.get("input"), str):
                return AIMessage(content=first["input"])  # the whole answer, which is not JSON
        doc = getattr(cur, "doc", None)
        if isinstance(cur, json.JSONDecodeError) and isinstance(doc, str):
            return AIMessage(content=doc)
        cur = cur.__cause__ or cur.__context__
    return None


def _response_body(response: Any) -> AIMessage | None:
    """The answer in an HTTP chat-completions response (LangChain attaches it to errors raised after the call)."""
    if getattr(response, "status_code", None) != 200 or not callable(getattr(response, "json", None)):
        return None
    try:
        data = response.json()
        message = data["choices"][0]["message"]
    except Exception:  # noqa: BLE001 - not a chat completion, or a streamed body
        return None
    text = message.get("content") or ""
    if not text:
        for tc in message.get("tool_calls") or []:
            text = (tc.get("function") or {}).get("arguments") or text
    text = text or message.get("refusal") or ""
    usage = data.get("usage") or {}
    pin, pout = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    if pin or pout:
        return AIMessage(content=str(text), usage_metadata={"input_tokens": pin, "output_tokens": pout,
                                                            "total_tokens": pin + pout})
    return AIMessage(content=str(text))

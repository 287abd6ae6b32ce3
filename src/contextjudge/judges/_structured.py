"""Structured-output negotiation: which method (json_schema, function_calling, json_mode, text) a judge takes, a method
the server rejects told apart from other failures, and the judge copies calls go through (answer length capped, SDK
retries off, one client per event loop).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
import weakref
from collections import OrderedDict
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from pydantic import BaseModel

from ..errors import JudgeResponseError
from ._naming import judge_identity, judge_name
from ._retry import status_kind, status_of

__all__ = ['METHODS', 'known_method', 'schema_tokens', 'sent_schema_tokens']

logger = logging.getLogger("contextjudge")


METHODS = ("json_schema", "function_calling", "json_mode", "text")


class _MethodUnsupported(Exception):
    """This structured-output method does not work with this judge; try the next one."""


class _JudgeCopies:
    """One judge model as contextjudge calls it: answer length capped (part of its identity), the provider SDK's own
    retries off, and, for clients bound to an event loop, one client per loop.

    Our retry policy (``_retry``) is the only one: with the SDK retrying too, a persistent 503 at
    ``max_attempts=3`` made 9 requests. Copying a ChatOpenAI with ``max_retries=0`` is not enough, because the copy
    keeps the SDK client already built with the old setting; so the SDK client is rebuilt with ``max_retries=0``
    and, unless the user gave their own ``http_async_client``, a fresh HTTP client for each event loop. That also
    keeps a judge valid on the user's own loop (``await aevaluate()`` in FastAPI or a pytest-asyncio test) after it
    was used on contextjudge's loop: langchain-openai caches one HTTP client per base URL, bound to the first loop.
    """

    def __init__(self, model: BaseChatModel, limit: int | None) -> None:
        self.original = model
        self.capped = _with_output_cap(model, limit)
        self.identity = judge_identity(self.capped)
        self.name = judge_name(model)
        # the structured-output method this model's server took last (_asking.Asker.answer): set by the first
        # call that got an answer, replaced when a later run finds that method refused
        self.method: str | None = None
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BaseChatModel] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()

    def for_loop(self) -> BaseChatModel:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self.capped
        hit = self._per_loop.get(loop)
        if hit is None:
            with self._lock:
                hit = self._per_loop.get(loop)
                if hit is None:
                    hit = self._per_loop[loop] = _without_sdk_retries(self.capped)
        return hit


_COPIES: OrderedDict[tuple[int, int | None], _JudgeCopies] = OrderedDict()


_COPIES_LOCK = threading.Lock()


_COPIES_MAX = 64


def _judge_of(model: BaseChatModel, limit: int | None) -> _JudgeCopies:
    """The process-wide judge copies of ``model`` (kept for the most recent 64 models: a copy holds its HTTP
    connections, which later runs reuse)."""
    key = (id(model), limit)
    with _COPIES_LOCK:
        hit = _COPIES.get(key)
        if hit is not None and hit.original is model:
            _COPIES.move_to_end(key)
            return hit
    made = _JudgeCopies(model, limit)
    with _COPIES_LOCK:
        hit = _COPIES.get(key)
        if hit is not None and hit.original is model:
            return hit
        _COPIES[key] = made
        while len(_COPIES) > _COPIES_MAX:
            _COPIES.popitem(last=False)
    return made


class _DirectCall:
    """A langchain-openai model called the way a judge call needs: straight to its ``_agenerate`` with the request
    options, honouring its ``rate_limiter``.

    LangChain's run machinery around a chat model (callback managers, tracers, its response cache, run ids) costs
    about half a millisecond of CPU a call, and a judge call must trigger none of it: judge traffic is never traced
    into the user's app, and verdicts have our own cache. ``_agenerate`` is the method every LangChain chat model
    implements; for langchain-openai it builds the request, calls the SDK and reads usage as ``ainvoke`` would.
    """

    __slots__ = ("kwargs", "model")

    def __init__(self, model: BaseChatModel, kwargs: dict[str, Any]) -> None:
        self.model = model
        self.kwargs = {k: v for k, v in kwargs.items() if not k.startswith("ls_")}  # LangSmith-only hints

    async def ainvoke(self, messages: list[Any], config: Any = None, max_tokens: int | None = None) -> AIMessage:
        """The answer to ``messages``; ``max_tokens``: this request's own answer cap, lower than the model's (a call
        that reserved less of a budget than the model's cap, ``_spend.CallSpend.take``). It is sent with the
        request, the model is not changed: its identity, and so the verdict-cache keys, stay as they are."""
        limiter = getattr(self.model, "rate_limiter", None)
        if limiter is not None:
            await limiter.aacquire(blocking=True)
        kwargs = self.kwargs
        if max_tokens is not None:
            kwargs = {**kwargs, "max_tokens": int(max_tokens)}
            extra = kwargs.get("extra_body", getattr(self.model, "extra_body", None))
            if isinstance(extra, dict) and "max_tokens" in extra:  # the cap _with_output_cap sends in the body
                kwargs["extra_body"] = {**extra, "max_tokens": int(max_tokens)}
        result = await self.model._agenerate(messages, **kwargs)  # noqa: SLF001 - see the class docstring
        gen = result.generations[0]
        message = gen.message
        if gen.generation_info:  # finish_reason: what ainvoke would have put in the message's metadata
            message.response_metadata = {**gen.generation_info, **(message.response_metadata or {})}
        return message  # type: ignore[return-value]  # a chat model's


def _is_openai_sdk_model(model: Any) -> bool:
    """A langchain-openai chat model (ChatOpenAI and the models built on it), which sends ``extra_body`` as is."""
    fields = getattr(type(model), "model_fields", {})
    return "extra_body" in fields and callable(getattr(getattr(model, "root_async_client", None), "with_options", None))


@functools.lru_cache(maxsize=16)
def _openai_response_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The ``response_format`` of OpenAI's structured outputs for ``schema``: strict, every object closed."""
    body = schema.model_json_schema()

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(body)
    return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": body, "strict": True}}


def _schema_as_sent(schema: type[BaseModel], method: str) -> Any:
    """The answer schema as a request with ``method`` carries it: for ``json_schema`` the closed schema of the
    ``response_format`` (``_openai_response_format``), for ``function_calling`` the ``tools`` LangChain binds
    (``convert_to_openai_tool``, no strict flag: what ``with_structured_output(schema, method=...)`` sends); None for
    ``json_mode`` (a bare ``{"type": "json_object"}``) and ``text``, which carry no schema."""
    if method == "json_schema":
        return _openai_response_format(schema)["json_schema"]["schema"]
    if method == "function_calling":
        from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: PLC0415

        return [convert_to_openai_tool(schema)]
    return None


@functools.lru_cache(maxsize=64)
def schema_tokens(schema: type[BaseModel], method: str | None, model_name: str | None) -> int:
    """The prompt tokens the answer schema adds to each call of ``method`` (0 for ``json_mode``, ``text`` or
    None): OpenAI-compatible providers bill the schema of a ``response_format`` or of the ``tools`` as input. Counted
    as the JSON the request carries (``json.dumps``) with the judge's tokenizer (``count_tokens``)."""
    from ._spend import count_tokens  # noqa: PLC0415

    sent = _schema_as_sent(schema, method) if method else None
    return 0 if sent is None else count_tokens(json.dumps(sent), model_name)


def sent_schema_tokens(request_options: dict[str, Any], model_name: str | None) -> int:
    """The prompt tokens of the answer schema in a bound request's options (``_DirectCall.kwargs``): the
    ``response_format``'s json_schema (sent in ``extra_body`` or as is) and the ``tools``, counted as
    ``schema_tokens`` counts them; 0 for a ``json_object`` format and for none."""
    from ._spend import count_tokens  # noqa: PLC0415

    n = 0
    tools = request_options.get("tools")
    if tools:
        n += count_tokens(json.dumps(tools, default=str), model_name)
    extra = request_options.get("extra_body")
    fmt = request_options.get("response_format") or (extra.get("response_format") if isinstance(extra, dict)
                                                     else None)
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        n += count_tokens(json.dumps((fmt.get("json_schema") or {}).get("schema") or {}, default=str), model_name)
    return n


def known_method(model: Any) -> str | None:
    """The structured-output method this model object's server took last in this process (``_JudgeCopies.method``),
    else None."""
    with _COPIES_LOCK:
        for copies in _COPIES.values():
            if copies.original is model and copies.method is not None:
                return copies.method
    return None


def _without_sdk_retries(model: BaseChatModel) -> BaseChatModel:
    """A copy of ``model`` whose provider SDK never retries (and, for OpenAI's SDK, with a new HTTP client that
    reports a 200 answer that is not a completion). Providers with neither a ``max_retries`` field nor an OpenAI
    SDK client are used as they are: their SDK's own retry setting, if any, adds to ours (see the README)."""
    fields = getattr(type(model), "model_fields", {})
    root = getattr(model, "root_async_client", None)
    try:
        if root is not None and callable(getattr(root, "with_options", None)):  # langchain-openai's chat models
            options: dict[str, Any] = {"max_retries": 0}
            if getattr(model, "http_async_client", None) is None:
                options["http_client"] = _new_openai_http_client(root)
            new_root = root.with_options(**options)
            update: dict[str, Any] = {"root_async_client": new_root, "async_client": new_root.chat.completions}
            if "max_retries" in fields:
                update["max_retries"] = 0
            return model.model_copy(update=update)
        if "max_retries" in fields:
            copy = model.model_copy(update={"max_retries": 0})
            # SDK clients built lazily (functools.cached_property, as ChatAnthropic's) were copied along with the
            # instance dict: drop them so the copy builds its own, with no retries and bound to this loop
            for name in list(vars(copy)):
                if isinstance(getattr(type(copy), name, None), functools.cached_property):
                    vars(copy).pop(name, None)
            return copy
    except Exception:  # noqa: BLE001 - a model that cannot be copied keeps its own setting
        logger.debug("contextjudge: could not turn off the SDK retries of %s", type(model).__name__, exc_info=True)
    return model


def _new_openai_http_client(root: Any) -> Any:
    """A new HTTP client for OpenAI's SDK, like its default one, whose response hook turns a 200 answer that is
    not a chat completion (an HTML page from a proxy, an empty ``choices`` list) into a ``JudgeResponseError``."""
    import openai  # noqa: PLC0415 - only reached for langchain-openai models, so the SDK is installed

    async def check(response: Any) -> None:
        if response.status_code != 200 or getattr(response.request, "method", "POST") != "POST":
            return
        ctype = response.headers.get("content-type", "")
        if "event-stream" in ctype:
            return
        if "json" in ctype:
            # only a short body can be a completion without choices; a real answer is never read twice here
            size = response.headers.get("content-length")
            if size is None or not size.isdigit() or int(size) > 600:
                return
        await response.aread()
        body = response.content
        if "json" not in ctype or _EMPTY_CHOICES.search(body) or not body.strip():
            raise JudgeResponseError(
                "the server answered HTTP 200, but not with a chat completion "
                f"(content-type {ctype or 'none'!r}): {body[:300].decode('utf-8', 'replace')!r}")

    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [check]})


_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')


def _with_output_cap(model: BaseChatModel, limit: int | None) -> BaseChatModel:
    """``model`` with its answer length capped at ``limit`` tokens, where the model allows it (see JudgeOptions)."""
    if not limit:
        return model
    fields = getattr(type(model), "model_fields", {})
    update: dict[str, Any] = {}
    if "max_tokens" in fields and getattr(model, "max_tokens", None) is None:
        update["max_tokens"] = int(limit)
    base = getattr(model, "openai_api_base", None)
    if "extra_body" in fields and base and "api.openai.com" not in str(base):
        extra = dict(getattr(model, "extra_body", None) or {})
        if "max_tokens" not in extra:
            extra["max_tokens"] = int(limit)
            update["extra_body"] = extra
    if not update:
        return model
    try:
        return model.model_copy(update=update)
    except Exception:  # noqa: BLE001 - a model that cannot be copied keeps its own setting
        logger.debug("contextjudge: could not cap the answer length of %s", type(model).__name__)
        return model


_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "json mode", "tool", "function", "structured",
                 "schema", "not supported", "unsupported", "not implemented")


_NOT_FORMAT_WORDS = ("context length", "context_length", "maximum context", "too many tokens", "too long",
                     "max_tokens", "prompt is too", "reduce the length")


def _is_method_rejection(exc: BaseException, method: str) -> bool:
    """A structured-output request the server does not support: move on to the next method, do not retry.

    Only a rejection that is about the request format counts: a 400 for a prompt over the context window, say,
    fails at once, since every other method would send the same prompt."""
    if method == "text":
        return False
    if isinstance(exc, NotImplementedError):
        return True
    status = status_of(exc)
    kind = status_kind(status)
    if kind != "bad_request" and not (kind == "transient" and status is not None and status >= 500):
        return False  # a rate limit, a timeout or an auth failure is never about the format
    text = str(exc).lower()
    if any(w in text for w in _NOT_FORMAT_WORDS):
        return False
    return any(w in text for w in _FORMAT_WORDS)

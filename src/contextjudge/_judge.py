"""The judge client: one facade that owns structured output, retries, re-asks, caching, concurrency and usage.

A metric hands it a ``JudgeRequest`` and a prompt builder; it returns verdicts keyed by the request's ids, or
raises a ``JudgeError`` subclass with a message that says what to do. Per-run state (the verdict cache, the
semaphores, which structured-output method works for which judge, usage totals) lives in a ``RunContext`` held in a
ContextVar, never in a module global.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import json
import logging
import pickle
import re
import sys
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableBinding
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt, stop_after_delay

from ._models import judge_identity, judge_name
from ._parsing import parse_answer
from ._protocol import REQUEST_KEY, Item, JudgeRequest
from ._result import Usage
from ._retry import JudgeOptions, backoff_seconds, classify, status_of
from .errors import JudgeError, JudgeOutputError, JudgeResponseError, JudgeUnavailableError

__all__ = ["JUDGE_TAG", "Answer", "JudgeClient", "RunContext", "VerdictCache", "current_run_context", "in_judge_call",
           "use_run_context"]

logger = logging.getLogger("contextjudge")

JUDGE_TAG = "contextjudge:judge"
METHODS = ("json_schema", "function_calling", "json_mode", "text")


class CacheBackend(Protocol):
    """Where verdicts persist across runs (the results store implements it)."""

    def get_verdict(self, key: str) -> dict[str, Any] | None: ...

    def put_verdict(self, key: str, value: dict[str, Any]) -> None: ...


class VerdictCache:
    """Verdicts by (judge identity, rendered prompt, request content); in memory, optionally backed by a store.

    The memory part is a bounded LRU (``max_entries``, default 4096) so a long run or a long-lived capture process
    does not grow with every judge call: reuse happens between the metrics of one case and between cases in flight
    together, well inside the bound, and a backing store keeps everything for later runs. Entries are held pickled,
    which keeps their many small dicts away from the garbage collector; ``get`` returns a fresh copy.
    """

    def __init__(self, backend: CacheBackend | None = None, max_entries: int = 4096) -> None:
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self.backend = backend
        self.max_entries = max(1, int(max_entries))

    def get(self, key: str) -> dict[str, Any] | None:
        packed = self._mem.get(key)
        if packed is not None:
            self._mem.move_to_end(key)
            return pickle.loads(packed)  # noqa: S301 - our own bytes
        if self.backend is not None:
            hit = self.backend.get_verdict(key)
            if hit is not None:
                return pickle.loads(self._remember(key, hit))  # noqa: S301 - a copy, whatever the backend keeps
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._remember(key, value)
        if self.backend is not None:
            self.backend.put_verdict(key, value)

    def _remember(self, key: str, value: dict[str, Any]) -> bytes:
        packed = self._mem[key] = pickle.dumps(value, 5)
        self._mem.move_to_end(key)
        while len(self._mem) > self.max_entries:
            self._mem.popitem(last=False)
        return packed

    def __len__(self) -> int:
        return len(self._mem)


CallHook = Callable[[dict[str, Any]], None]


@dataclass
class RunContext:
    """Everything judge calls share within one run: cache, limits, working methods, usage, progress hooks."""

    options: JudgeOptions = field(default_factory=JudgeOptions)
    cache: VerdictCache = field(default_factory=VerdictCache)
    usage: Usage = field(default_factory=Usage)
    on_call: list[CallHook] = field(default_factory=list)
    # The run's judge for metrics built without a model (``model=`` of evaluate, capture or the pytest plugin):
    # held here, so the user's metric objects are never changed. Resolved once, on first use.
    default_model: Any = None
    _default_resolved: Any = None
    _semaphores: dict[tuple[str, int], asyncio.Semaphore] = field(default_factory=dict)
    _methods: dict[str, str] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Future] = field(default_factory=dict)
    _probes: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)
    # Built once per run and judge, not per call: LangChain's with_structured_output converts the schema and builds
    # a parser chain each time, and the answer-length cap copies the model. Keyed by id(model) with the model kept
    # alive in the value, so an id is never reused while its entry exists.
    _runnables: dict[tuple[Any, ...], tuple[Any, Any]] = field(default_factory=dict)

    def semaphore(self, identity: str, model: Any = None) -> asyncio.Semaphore:
        """Judge calls in flight per model: ``JudgeOptions.max_concurrency``, or more when the model asks for it
        (``contextjudge_min_concurrency``: the embedded judge has no rate limit, and the calls it has waiting are
        embedded together)."""
        key = (identity, id(asyncio.get_running_loop()))
        sem = self._semaphores.get(key)
        if sem is None:
            n = max(self.options.max_concurrency, int(getattr(model, "contextjudge_min_concurrency", 0) or 0))
            sem = self._semaphores[key] = asyncio.Semaphore(n)
        return sem

    def judge_for(self, metric: Any) -> Any:
        """The judge model ``metric`` uses in this run: its own, else the run's default, else the global default."""
        if getattr(metric, "_model_arg", "own") is None and self.default_model is not None:
            resolved = self._default_resolved
            if resolved is None or resolved[0] is not self.default_model:
                from ._models import resolve_model  # noqa: PLC0415

                resolved = self._default_resolved = (self.default_model, resolve_model(self.default_model))
            return resolved[1]
        return metric.model

    def probe(self, identity: str) -> tuple[asyncio.Future, bool]:
        """The probe of a judge's structured-output method on this loop, and whether the caller runs it (the first
        caller does; it sets the future's result when done, found or not)."""
        key = (identity, id(asyncio.get_running_loop()))
        fut = self._probes.get(key)
        if fut is not None:
            return fut, False
        fut = self._probes[key] = asyncio.get_running_loop().create_future()
        return fut, True

    def record(self, event: dict[str, Any]) -> None:
        for hook in self.on_call:
            try:
                hook(event)
            except Exception:  # noqa: BLE001 - a progress or store hook never breaks judging
                logger.exception("contextjudge: a judge-call hook failed")


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("contextjudge_run", default=None)


def current_run_context() -> RunContext | None:
    return _current.get()


class use_run_context:  # noqa: N801 - used as a context manager, named like one
    """Make ``ctx`` the run context of the code inside ``with``."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._token: contextvars.Token | None = None

    def __enter__(self) -> RunContext:
        self._token = _current.set(self.ctx)
        return self.ctx

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _current.reset(self._token)


@dataclass
class Answer:
    """A judge's usable answer: verdicts by id (or a rubric score), with what it cost."""

    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    score: float | None = None
    reason: str = ""
    usage: Usage = field(default_factory=Usage)
    method: str | None = None

    def to_cache(self) -> dict[str, Any]:
        return {"verdicts": self.verdicts, "score": self.score, "reason": self.reason}


# The answer schemas sent for structured output. They are deliberately bare (no descriptions, no optional
# fields a task does not use): the prompt already explains every field, and a provider bills the schema as prompt
# tokens on every call. Every field is required, because LangChain sends pydantic schemas with "strict": true and
# OpenAI's strict mode rejects a schema whose properties are not all required (an HTTP 400 on every first call).
# The parser reads any answer leniently anyway; these only steer the judge.
# No docstrings: a model's docstring becomes the schema's (billed) description.
def _strict_schema(schema: dict[str, Any]) -> None:
    """Every property required, no defaults: what strict structured output accepts, at the fewest tokens."""
    props = schema.get("properties") or {}
    for prop in props.values():
        prop.pop("default", None)
        prop.pop("title", None)
    schema["required"] = list(props)


# Validation stays lenient (defaults, free-form verdict words) because a judge's near-miss answer is still
# worth reading; the schema sent to the judge is strict and steers it to "yes"/"no".
class _Verdict(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    id: str
    verdict: str = Field(json_schema_extra={"enum": ["yes", "no"]})
    reason: str = ""


class _SupportVerdict(_Verdict):
    node_ids: list[str] = Field(default_factory=list)


class Verdicts(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    verdicts: list[_Verdict]


class SupportVerdicts(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    verdicts: list[_SupportVerdict]


class Rubric(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    score: float
    reason: str = ""


_ANSWER_SCHEMAS: dict[str, type[BaseModel]] = {"rubric_recall": Rubric, "statement_support": SupportVerdicts}


class _MethodUnsupported(Exception):
    """This structured-output method does not work with this judge; try the next one."""


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _usage_of(msg: Any, seconds: float) -> Usage:
    u = Usage(calls=1, seconds=seconds)
    meta = getattr(msg, "usage_metadata", None) or {}
    if meta:
        u.input_tokens = int(meta.get("input_tokens", 0) or 0)
        u.output_tokens = int(meta.get("output_tokens", 0) or 0)
    return u


def _content_text(msg: Any) -> str:
    content = getattr(msg, "content", msg)
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") in ("text", "output_text"):
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return "" if content is None else str(content)


def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()


def _sub_request(request: JudgeRequest, items: list[Item], context: list[Item] | None = None) -> JudgeRequest:
    return request.model_copy(update={"items": items, "context": request.context if context is None else context})


def _split_by_budget(items: list[Item], budget: int) -> list[list[Item]]:
    chunks: list[list[Item]] = [[]]
    used = 0
    for it in items:
        cost = _approx_tokens(it.text) + 8
        if chunks[-1] and used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(it)
        used += cost
    return chunks


def _explain_unavailable(exc: BaseException, name: str, kind: str) -> JudgeUnavailableError:
    status = status_of(exc)
    if kind == "auth":
        msg = (f"The judge {name!r} rejected the credentials (HTTP {status or 401}): check the API key for this "
               "provider (for OpenAI: OPENAI_API_KEY), or pass model='local' to judge offline.")
    else:
        msg = (f"The judge {name!r} rejected the request (HTTP {status or 400}): {str(exc)[:300]}. Check the model "
               "name and base_url; if the server does not support a feature, report it to contextjudge.")
    return JudgeUnavailableError(msg, status_code=status)


class JudgeClient:
    """Asks one judge model one kind of question, with every safeguard. Cheap to create; state is in the run."""

    def __init__(self, model: BaseChatModel, template: Any, ctx: RunContext | None = None,
                 options: JudgeOptions | None = None) -> None:
        self.template = template
        self.ctx = ctx or current_run_context() or RunContext()
        # A metric's own options (token budget, retries, timeouts, answer cap) win over the run's for its calls;
        # calls in flight are counted per judge model across the run, so concurrency is the run's.
        self.options = options or self.ctx.options
        self.native = bool(getattr(model, "contextjudge_native", False))
        self._judge = _judge_of(model, self.options.max_output_tokens)
        self.identity = self._judge.identity
        self.name = self._judge.name

    @property
    def model(self) -> BaseChatModel:
        """The judge copy for the running loop (see ``_JudgeCopies``), or the capped model outside a loop."""
        return self._judge.for_loop()

    # ----------------------------------------------------------------------------------------------- public
    async def ask(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        """Ask ``request`` (split by the token budget when large) and merge the answers."""
        if request.task == "rubric_recall":
            return await self._ask_cached(request, build)
        budget = self.options.token_budget
        item_chunks = _split_by_budget(request.items, budget)
        ctx_chunks = _split_by_budget(request.context, budget) if request.context else [[]]
        if len(item_chunks) == 1 and len(ctx_chunks) == 1:
            return await self._ask_cached(request, build)  # the whole request fits: no copy
        subs = [_sub_request(request, ic, cc) for ic in item_chunks for cc in ctx_chunks]
        answers = await asyncio.gather(*(self._ask_cached(s, build) for s in subs))
        merged = Answer(method=answers[0].method)
        for ans in answers:
            merged.usage.add(ans.usage)
            for vid, v in ans.verdicts.items():
                prev = merged.verdicts.get(vid)
                if prev is None:
                    merged.verdicts[vid] = dict(v)
                elif v["verdict"] == "yes":  # support from any part of the context counts
                    node_ids = sorted(set(prev.get("node_ids", [])) | set(v.get("node_ids", [])))
                    if prev["verdict"] == "yes":
                        prev["node_ids"] = node_ids
                    else:
                        merged.verdicts[vid] = {**v, "node_ids": node_ids}
        return merged

    async def complete_text(self, prompt: str) -> tuple[str, Usage]:
        """A plain prompt and its text answer (for the opt-in LLM-written reason)."""
        messages = [SystemMessage(self.template.system()), HumanMessage(prompt)]
        t0 = time.perf_counter()
        async with self.ctx.semaphore(self.identity, self.model):
            msg = await self._invoke("text", messages)
        usage = _usage_of(msg, time.perf_counter() - t0)
        self.ctx.usage.add(usage)
        return _content_text(msg), usage

    # ----------------------------------------------------------------------------------------------- cache
    async def _ask_cached(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        prompt = build(request)
        dump = request.model_dump(mode="json")
        key = _hash(self.identity, prompt, {k: v for k, v in dump.items() if k not in ("metric", "reference_kind")})
        hit = self.ctx.cache.get(key)
        if hit is not None:
            return self._from_cache(hit, request)
        pending = self.ctx._inflight.get(key)  # noqa: SLF001 - the run context is ours
        if pending is not None:
            await asyncio.shield(pending)
            hit = self.ctx.cache.get(key)
            if hit is not None:
                return self._from_cache(hit, request)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.ctx._inflight[key] = fut  # noqa: SLF001
        try:
            answer = await self._ask_fresh(request, prompt, build, dump)
            self.ctx.cache.put(key, answer.to_cache())
            return answer
        finally:
            self.ctx._inflight.pop(key, None)  # noqa: SLF001
            if not fut.done():
                fut.set_result(None)

    def _from_cache(self, hit: dict[str, Any], request: JudgeRequest) -> Answer:
        usage = Usage(cache_hits=1)
        self.ctx.usage.add(usage)
        self.ctx.record({"judge": self.name, "task": request.task, "metric": request.metric, "cached": True,
                         "usage": usage})
        # the cache hands out a fresh copy of every hit, so the answer may own it
        return Answer(verdicts=hit.get("verdicts") or {}, score=hit.get("score"), reason=hit.get("reason") or "",
                      usage=usage, method="cache")

    # ----------------------------------------------------------------------------------------------- asking
    async def _ask_fresh(self, request: JudgeRequest, prompt: str, build: Callable[[JudgeRequest], str],
                         dump: dict[str, Any] | None = None) -> Answer:
        ids = [it.id for it in request.items]
        total = Usage()
        parsed, method, raw = await self._call_and_parse(request, prompt, total, dump)
        if request.task == "rubric_recall":
            if parsed is None:
                parsed, method, raw = await self._call_and_parse(
                    request, prompt + '\n\nYour previous answer could not be read. Answer with JSON only: '
                    '{"score": <0.0-1.0>, "reason": "..."}', total)
            if parsed is None:
                raise JudgeOutputError(
                    f"The judge {self.name!r} gave no readable score (0.0-1.0) after one re-ask. Its answer began: "
                    f"{(raw or '')[:200]!r}. Use a stronger judge model, or one that supports structured output.",
                    raw=raw)
            return Answer(score=parsed["score"], reason=parsed["reason"], usage=total, method=method)
        verdicts = dict(parsed["verdicts"]) if parsed else {}
        missing = [i for i in ids if i not in verdicts]
        if missing:
            sub = _sub_request(request, [it for it in request.items if it.id in set(missing)])
            again = self.template.reask(build(sub), missing)
            parsed2, method, raw2 = await self._call_and_parse(sub, again, total)
            if parsed2:
                for vid, v in parsed2["verdicts"].items():
                    if vid in set(missing):
                        verdicts[vid] = v
            missing = [i for i in ids if i not in verdicts]
            raw = raw2 or raw
        if missing:
            shown = ", ".join(missing[:12]) + (" ..." if len(missing) > 12 else "")
            raise JudgeOutputError(
                f"The judge {self.name!r} gave no usable verdict for {len(missing)} of {len(ids)} items "
                f"({shown}) even after a re-ask, so the ranks cannot be scored safely. Its answer began: "
                f"{(raw or '')[:200]!r}. Use a stronger judge model, or lower JudgeOptions.token_budget so each "
                "request holds fewer items.", raw=raw)
        return Answer(verdicts=verdicts, usage=total, method=method)

    def _messages(self, request: JudgeRequest, prompt: str, dump: dict[str, Any] | None = None) -> list[Any]:
        kwargs = {REQUEST_KEY: request.model_dump(mode="json") if dump is None else dump}
        labelled = [(it.id, u) for it in (*request.items, *request.context) for u in it.images]
        if labelled:
            from .multimodal import to_image  # noqa: PLC0415 - only requests with images need it

            # LangChain's provider-agnostic image blocks, each after a label naming the item it belongs to
            content: list[Any] = [{"type": "text", "text": prompt}]
            for item_id, url in labelled:
                content.append({"type": "text", "text": f"Image attached to {item_id}:"})
                content.append(to_image(url).to_content_block("standard"))
            human = HumanMessage(content=content, additional_kwargs=kwargs)
        else:
            human = HumanMessage(content=prompt, additional_kwargs=kwargs)
        return [SystemMessage(self.template.system()), human]

    async def _call_and_parse(self, request: JudgeRequest, prompt: str, total: Usage,
                              dump: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str, str]:
        """One answer to ``prompt``, read by the parser, with the structured-output method this judge supports.

        While a judge's method is not yet known, the first call probes the methods in turn and concurrent first
        calls wait for it, instead of each trying every method; once that probe has ended, calls go ahead."""
        messages = self._messages(request, prompt, dump)
        if self.native:
            return await self._try_methods(["text"], request, messages, total)
        known = self.ctx._methods.get(self.identity)  # noqa: SLF001
        if known is None:
            fut, owner = self.ctx.probe(self.identity)
            if owner:
                try:
                    return await self._try_methods(list(METHODS), request, messages, total)
                finally:
                    fut.set_result(None)
            if not fut.done():
                await asyncio.shield(fut)
            known = self.ctx._methods.get(self.identity)  # noqa: SLF001
        methods = list(METHODS[METHODS.index(known):]) if known else list(METHODS)
        return await self._try_methods(methods, request, messages, total)

    async def _try_methods(self, methods: list[str], request: JudgeRequest, messages: list[Any], total: Usage
                           ) -> tuple[dict[str, Any] | None, str, str]:
        ids = [it.id for it in request.items]
        last_exc: BaseException | None = None
        for method in methods:
            t0 = time.perf_counter()
            try:
                async with self.ctx.semaphore(self.identity, self.model):
                    result = await self._invoke(method, messages)
            except _MethodUnsupported as exc:
                logger.debug("contextjudge: %s does not support %s (%s); trying the next method",
                             self.name, method, exc)
                last_exc = exc
                continue
            self.ctx._methods.setdefault(self.identity, method)  # noqa: SLF001
            raw_msg = result.get("raw") if isinstance(result, dict) else result
            usage = _usage_of(raw_msg, time.perf_counter() - t0)
            total.add(usage)
            self.ctx.usage.add(usage)
            self.ctx.record({"judge": self.name, "task": request.task, "metric": request.metric, "cached": False,
                             "usage": usage, "method": method})
            text = _content_text(raw_msg)
            parsed = None
            judged = _judged_text(request)
            if isinstance(result, dict) and result.get("parsed") is not None:
                obj = result["parsed"]
                data = obj.model_dump() if hasattr(obj, "model_dump") else obj
                parsed = parse_answer(data, task=request.task, ids=ids, data=judged)
            if parsed is None and not text:
                # valid tool calls carry parsed args; invalid ones (broken JSON) carry the raw argument string
                for tc in getattr(raw_msg, "tool_calls", None) or []:
                    parsed = parse_answer(tc.get("args"), task=request.task, ids=ids, data=judged) or parsed
                for tc in getattr(raw_msg, "invalid_tool_calls", None) or []:
                    if parsed is None and tc.get("args"):
                        parsed = parse_answer(str(tc["args"]), task=request.task, ids=ids, data=judged)
                        text = text or str(tc["args"])
            if parsed is None:
                parsed = parse_answer(text, task=request.task, ids=ids, data=judged)
            return parsed, method, text
        raise JudgeUnavailableError(
            f"The judge {self.name!r} supported none of the ways to answer (structured output, function calling, "
            f"JSON mode, plain text): {last_exc}. Check that it is a chat model that returns text.")

    def _structured(self, method: str, schema: type[BaseModel]) -> Any:
        """The runnable that asks ``method``: the model bound to that method's request options, so the answer comes
        back as the raw message and our own parser reads it. LangChain's ``with_structured_output`` chains a parser
        (and with ``include_raw`` a map of runnables) after the model, which costs CPU on every call; where a
        model's structured output is not such a chain, it is used whole with ``include_raw``."""
        model = self.model
        key = ("structured", id(model), method, schema)
        hit = self.ctx._runnables.get(key)  # noqa: SLF001
        if hit is not None:
            return hit[1]
        if method in ("json_schema", "json_mode") and _is_openai_sdk_model(model):
            # langchain-openai sends any response_format through the SDK's beta parse path, which converts the
            # schema and re-validates the request and answer on every call (the README's "Lean judge calls" has
            # what that cost). The same request body goes out through extra_body on the plain path; our parser
            # reads the answer.
            fmt = {"type": "json_object"} if method == "json_mode" else _openai_response_format(schema)
            runnable = _DirectCall(model, {"extra_body": {**(getattr(model, "extra_body", None) or {}),
                                                          "response_format": fmt}})
            self.ctx._runnables[key] = (model, runnable)  # noqa: SLF001
            return runnable
        kwargs: dict[str, Any] = {"method": method}
        try:
            chain = model.with_structured_output(schema, **kwargs)
        except (NotImplementedError, TypeError, ValueError) as exc:
            if method != "function_calling":
                raise _MethodUnsupported(f"{method}: {exc}") from exc
            kwargs = {}  # LangChain's base implementation takes no method= and always uses tool calling
            try:
                chain = model.with_structured_output(schema)
            except (NotImplementedError, TypeError, ValueError) as exc2:
                raise _MethodUnsupported(f"{method}: {exc2}") from exc2
        first = getattr(chain, "first", None)
        if isinstance(first, RunnableBinding) and first.bound is model:
            runnable = _DirectCall(model, first.kwargs) if _is_openai_sdk_model(model) else first
        else:
            runnable = model.with_structured_output(schema, include_raw=True, **kwargs)
        self.ctx._runnables[key] = (model, runnable)  # noqa: SLF001
        return runnable

    async def _invoke(self, method: str, messages: list[Any]) -> Any:
        """One request with retries. Returns an AIMessage, or LangChain's include_raw dict for a model whose
        structured output is not a bound model (see ``_structured``)."""
        opts = self.options
        request_dump = messages[-1].additional_kwargs.get(REQUEST_KEY) or {}
        schema = _ANSWER_SCHEMAS.get(request_dump.get("task"), Verdicts)
        if method == "text":
            runnable = _DirectCall(self.model, {}) if _is_openai_sdk_model(self.model) else self.model
        else:
            runnable = self._structured(method, schema)
        config = {"callbacks": [], "tags": [JUDGE_TAG], "run_name": "contextjudge_judge",
                  "metadata": {"contextjudge": "judge"}}

        async def attempt_once() -> Any:
            try:
                return await _isolated(runnable.ainvoke(messages, config=config), opts.attempt_timeout)
            except JudgeError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted here, raised again below
                recovered = _recover_answer(exc) if method != "text" else None
                if recovered is not None:
                    # The server answered, but the SDK's own parsing of the structured answer failed (invalid or
                    # truncated JSON, prose around it, finish_reason "length"): read it with our tolerant parser.
                    logger.info("contextjudge: judge %s answered %s output its SDK could not parse (%s); reading "
                                "the raw text instead", self.name, method, type(exc).__name__)
                    return recovered
                odd = _odd_response(exc)
                if odd is not None:
                    raise odd from exc
                raise

        def _retryable(exc: BaseException) -> bool:
            return classify(exc) == "transient" and not _is_method_rejection(exc, method)

        def _wait(state: Any) -> float:
            exc = state.outcome.exception() if state.outcome else None
            delay = backoff_seconds(state.attempt_number, exc, opts) if exc else 0.0
            if exc is not None:
                logger.warning("contextjudge: judge %s call failed (%s: %s); retry %d in %.1fs", self.name,
                               type(exc).__name__, str(exc)[:120], state.attempt_number, delay)
            return delay

        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            wait=_wait,
            stop=stop_after_attempt(opts.max_attempts) | stop_after_delay(opts.deadline),
            reraise=False,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await attempt_once()
        except RetryError as exc:
            inner = exc.last_attempt.exception()
            n = exc.last_attempt.attempt_number
            odd = _find_cause(inner, JudgeResponseError)
            if odd is not None:
                raise JudgeUnavailableError(
                    f"The judge {self.name!r} answered {n} attempt(s) with something that is not a chat completion: "
                    f"{odd}. Check base_url (a proxy or login page may stand in front of the server) and that the "
                    "server speaks the OpenAI chat-completions API.", status_code=200) from inner
            raise JudgeUnavailableError(
                f"The judge {self.name!r} kept failing after {n} attempts "
                f"({type(inner).__name__}: {str(inner)[:200]}). It may be overloaded or down; try again later, "
                "lower max_concurrency, or raise JudgeOptions.deadline.", status_code=status_of(inner)) from inner
        except JudgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated at this one boundary
            if _is_method_rejection(exc, method):
                raise _MethodUnsupported(f"{method}: {str(exc)[:200]}") from exc
            kind = classify(exc)
            if kind in ("auth", "bad_request"):
                raise _explain_unavailable(exc, self.name, kind) from exc
            if isinstance(exc, NotImplementedError) and method != "text":
                raise _MethodUnsupported(f"{method}: {exc}") from exc
            raise JudgeError(f"The judge {self.name!r} failed: {type(exc).__name__}: {str(exc)[:300]}") from exc
        raise JudgeError("unreachable")  # pragma: no cover


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


def _judged_text(request: JudgeRequest) -> list[str]:
    """The data of a request, whose quoted JSON the parser must never take for the judge's answer.

    Each piece on its own, each node whole (a relevancy request holds a node as separate sentences, and JSON spread
    over two sentences or lines of a node is still the node's), and everything together (JSON spread across
    nodes). The parser only looks further into texts that hold a bracket."""
    pieces = [request.input, request.reference or "", request.answer or "",
              *(it.text for it in request.items), *(it.text for it in request.context),
              *(t.get("content", "") for t in request.history)]
    nodes: dict[str, list[str]] = {}
    for it in (*request.items, *request.context):
        if it.parent:
            nodes.setdefault(it.parent, []).append(it.text)
    joined = [" ".join(texts) for texts in nodes.values() if len(texts) > 1]
    bracketed = [p for p in pieces if "{" in p or "[" in p]
    if len(bracketed) > 1:
        joined.append(" ".join(bracketed))
    return pieces + joined


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


_COPIES: "OrderedDict[tuple[int, int | None], _JudgeCopies]" = OrderedDict()
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

    async def ainvoke(self, messages: list[Any], config: Any = None) -> AIMessage:
        limiter = getattr(self.model, "rate_limiter", None)
        if limiter is not None:
            await limiter.aacquire(blocking=True)
        result = await self.model._agenerate(messages, **self.kwargs)  # noqa: SLF001 - see the class docstring
        return result.generations[0].message


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
    if status is None:
        return False
    text = str(exc).lower()
    if any(w in text for w in _NOT_FORMAT_WORDS):
        return False
    mentions = any(w in text for w in _FORMAT_WORDS)
    if status in (400, 404, 415, 422) or status >= 500:
        return mentions
    return False


_IN_JUDGE: contextvars.ContextVar[bool] = contextvars.ContextVar("contextjudge_in_judge", default=False)


def in_judge_call() -> bool:
    """True in code a judge call runs (and the threads and tasks it starts with its context): capture integrations
    use it to never record a judge's own framework traffic as a test case."""
    return _IN_JUDGE.get()


def _judge_context() -> contextvars.Context:
    ctx = contextvars.Context()
    ctx.run(_IN_JUDGE.set, True)
    return ctx


async def _isolated(coro: Any, timeout: float) -> Any:
    """Run a judge call with no inherited LangChain context, so the user's tracers never see it."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 11):
        async def bounded() -> Any:
            async with asyncio.timeout(timeout):
                return await coro

        task = loop.create_task(bounded(), context=_judge_context())
        try:
            return await task
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"judge call took longer than {timeout:.0f}s") from exc
        finally:
            if not task.done():  # our caller was cancelled: the judge call goes too
                task.cancel()
    task = loop.create_task(coro)  # pragma: no cover - 3.10 cannot start a task in an empty context
    try:  # pragma: no cover
        return await asyncio.wait_for(task, timeout=timeout)
    except asyncio.TimeoutError as exc:  # pragma: no cover
        raise TimeoutError(f"judge call took longer than {timeout:.0f}s") from exc


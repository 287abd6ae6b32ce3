"""The judge client: one facade that owns structured output, retries, re-asks, caching, concurrency and usage.

A metric hands it a ``JudgeRequest`` and a prompt builder; it returns verdicts keyed by the request's ids, or
raises a ``JudgeError`` subclass with a message that says what to do. Per-run state (the verdict cache, the
semaphores, which structured-output method works for which judge, usage totals) lives in a ``RunContext`` held in a
ContextVar, never in a module global.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt, stop_after_delay

from ._models import judge_identity, judge_name
from ._parsing import parse_answer
from ._protocol import REQUEST_KEY, Item, JudgeRequest
from ._result import Usage
from ._retry import JudgeOptions, backoff_seconds, classify, status_of
from .errors import JudgeError, JudgeOutputError, JudgeUnavailableError

__all__ = ["JUDGE_TAG", "Answer", "JudgeClient", "RunContext", "VerdictCache", "current_run_context", "use_run_context"]

logger = logging.getLogger("contextjudge")

JUDGE_TAG = "contextjudge:judge"
METHODS = ("json_schema", "function_calling", "json_mode", "text")


class CacheBackend(Protocol):
    """Where verdicts persist across runs (the results store implements it)."""

    def get_verdict(self, key: str) -> dict[str, Any] | None: ...

    def put_verdict(self, key: str, value: dict[str, Any]) -> None: ...


class VerdictCache:
    """Verdicts by (judge identity, rendered prompt, request content); in memory, optionally backed by a store."""

    def __init__(self, backend: CacheBackend | None = None) -> None:
        self._mem: dict[str, dict[str, Any]] = {}
        self.backend = backend

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self._mem.get(key)
        if hit is None and self.backend is not None:
            hit = self.backend.get_verdict(key)
            if hit is not None:
                self._mem[key] = hit
        return hit

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._mem[key] = value
        if self.backend is not None:
            self.backend.put_verdict(key, value)

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
    _semaphores: dict[tuple[str, int], asyncio.Semaphore] = field(default_factory=dict)
    _methods: dict[str, str] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Future] = field(default_factory=dict)
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
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
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

    def __init__(self, model: BaseChatModel, template: Any, ctx: RunContext | None = None) -> None:
        self.template = template
        self.ctx = ctx or current_run_context() or RunContext()
        self.native = bool(getattr(model, "contextjudge_native", False))
        limit = self.ctx.options.max_output_tokens
        key = ("capped", id(model), limit)
        hit = self.ctx._runnables.get(key)  # noqa: SLF001
        if hit is None:
            hit = self.ctx._runnables[key] = (model, _with_output_cap(model, limit))  # noqa: SLF001
        self.model = hit[1]
        self.identity = judge_identity(self.model)
        self.name = judge_name(model)

    # ----------------------------------------------------------------------------------------------- public
    async def ask(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        """Ask ``request`` (split by the token budget when large) and merge the answers."""
        if request.task == "rubric_recall":
            return await self._ask_cached(request, build)
        budget = self.ctx.options.token_budget
        item_chunks = _split_by_budget(request.items, budget)
        ctx_chunks = _split_by_budget(request.context, budget) if request.context else [[]]
        subs = [_sub_request(request, ic, cc) for ic in item_chunks for cc in ctx_chunks]
        if len(subs) == 1:
            return await self._ask_cached(subs[0], build)
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
        key = _hash(self.identity, prompt, request.model_dump(mode="json", exclude={"metric", "reference_kind"}))
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
            answer = await self._ask_fresh(request, prompt, build)
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
        return Answer(verdicts={k: dict(v) for k, v in (hit.get("verdicts") or {}).items()}, score=hit.get("score"),
                      reason=hit.get("reason") or "", usage=usage, method="cache")

    # ----------------------------------------------------------------------------------------------- asking
    async def _ask_fresh(self, request: JudgeRequest, prompt: str, build: Callable[[JudgeRequest], str]) -> Answer:
        ids = [it.id for it in request.items]
        total = Usage()
        parsed, method, raw = await self._call_and_parse(request, prompt, total)
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

    def _messages(self, request: JudgeRequest, prompt: str) -> list[Any]:
        kwargs = {REQUEST_KEY: request.model_dump(mode="json")}
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

    def _methods(self) -> list[str]:
        if self.native:
            return ["text"]
        known = self.ctx._methods.get(self.identity)  # noqa: SLF001
        if known:
            return list(METHODS[METHODS.index(known):])
        return list(METHODS)

    async def _call_and_parse(self, request: JudgeRequest, prompt: str, total: Usage
                              ) -> tuple[dict[str, Any] | None, str, str]:
        messages = self._messages(request, prompt)
        ids = [it.id for it in request.items]
        last_exc: BaseException | None = None
        for method in self._methods():
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
            if parsed is None and isinstance(result, dict) and not text:
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
        key = ("structured", id(self.model), method, schema)
        hit = self.ctx._runnables.get(key)  # noqa: SLF001
        if hit is not None:
            return hit[1]
        try:
            runnable = self.model.with_structured_output(schema, method=method, include_raw=True)
        except (NotImplementedError, TypeError, ValueError) as exc:
            if method != "function_calling":
                raise _MethodUnsupported(f"{method}: {exc}") from exc
            try:  # LangChain's base implementation takes no method= and always uses tool calling
                runnable = self.model.with_structured_output(schema, include_raw=True)
            except (NotImplementedError, TypeError, ValueError) as exc2:
                raise _MethodUnsupported(f"{method}: {exc2}") from exc2
        self.ctx._runnables[key] = (self.model, runnable)  # noqa: SLF001
        return runnable

    async def _invoke(self, method: str, messages: list[Any]) -> Any:
        """One request with retries. Returns an AIMessage (text) or LangChain's include_raw dict."""
        opts = self.ctx.options
        request_dump = messages[-1].additional_kwargs.get(REQUEST_KEY) or {}
        schema = _ANSWER_SCHEMAS.get(request_dump.get("task"), Verdicts)
        if method == "text":
            runnable = self.model
        else:
            runnable = self._structured(method, schema)
        config = {"callbacks": [], "tags": [JUDGE_TAG], "run_name": "contextjudge_judge",
                  "metadata": {"contextjudge": "judge"}}

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
                    return await _isolated(runnable.ainvoke(messages, config=config), opts.attempt_timeout)
        except RetryError as exc:
            inner = exc.last_attempt.exception()
            n = exc.last_attempt.attempt_number
            raise JudgeUnavailableError(
                f"The judge {self.name!r} kept failing after {n} attempts "
                f"({type(inner).__name__}: {str(inner)[:200]}). It may be overloaded or down; try again later, "
                "lower max_concurrency, or raise JudgeOptions.deadline.", status_code=status_of(inner)) from inner
        except JudgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated at this one boundary
            recovered = _recover_answer(exc) if method != "text" else None
            if recovered is not None:
                # The server answered, but the SDK's own parsing of the structured answer failed (invalid or
                # truncated JSON, prose around it, finish_reason "length"): read it with our tolerant parser.
                logger.info("contextjudge: judge %s answered %s output its SDK could not parse (%s); reading the "
                            "raw text instead", self.name, method, type(exc).__name__)
                return recovered
            if _is_method_rejection(exc, method):
                raise _MethodUnsupported(f"{method}: {str(exc)[:200]}") from exc
            kind = classify(exc)
            if kind in ("auth", "bad_request"):
                raise _explain_unavailable(exc, self.name, kind) from exc
            if isinstance(exc, NotImplementedError) and method != "text":
                raise _MethodUnsupported(f"{method}: {exc}") from exc
            raise JudgeError(f"The judge {self.name!r} failed: {type(exc).__name__}: {str(exc)[:300]}") from exc
        raise JudgeError("unreachable")  # pragma: no cover


def _judged_text(request: JudgeRequest) -> list[str]:
    """The data of a request, whose quoted JSON the parser must never take for the judge's answer."""
    return [request.input, request.reference or "", request.answer or "",
            *(it.text for it in request.items), *(it.text for it in request.context),
            *(t.get("content", "") for t in request.history)]


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


def _is_method_rejection(exc: BaseException, method: str) -> bool:
    """A structured-output request the server does not support: move on to the next method, do not retry."""
    if method == "text":
        return False
    if isinstance(exc, NotImplementedError):
        return True
    status = status_of(exc)
    text = str(exc).lower()
    mentions = any(w in text for w in ("response_format", "json_schema", "json_object", "tool", "function",
                                       "structured", "not supported", "unsupported"))
    if status in (400, 404, 415, 422):
        return True
    return status is not None and status >= 500 and mentions


async def _isolated(coro: Any, timeout: float) -> Any:
    """Run a judge call with no inherited LangChain context, so the user's tracers never see it."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 11):
        task = loop.create_task(coro, context=contextvars.Context())
    else:  # pragma: no cover - 3.10 cannot start a task in an empty context
        task = loop.create_task(coro)
    try:
        return await asyncio.wait_for(task, timeout=timeout)
    except asyncio.TimeoutError as exc:
        raise TimeoutError(f"judge call took longer than {timeout:.0f}s") from exc


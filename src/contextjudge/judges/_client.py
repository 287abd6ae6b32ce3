"""The judge client: one facade a metric calls with a ``JudgeRequest``; it caches, bounds concurrency (an adaptive
limit per judge, ``limiter``), reserves each call's tokens against the run's budget and rate limit before sending
it (``spend``), negotiates structured output (``structured``), splits by token budget (``budget``), retries
(``retry``), salvages odd answers (``salvage``), parses (``parsing``) and counts usage (and its cost, where the
judge's price is known). It returns verdicts keyed by the request's ids, or raises a ``JudgeError`` subclass with a
message that says what to do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, overload

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableBinding
from pydantic import BaseModel
from tenacity import (
    RetryError,
)

from .._result import Usage
from ..errors import (
    JudgeError,
    JudgeOutputError,
    JudgeResponseError,
    JudgeUnavailableError,
)
from ._budget import _split_by_budget, _sub_request
from ._cache import _hash
from ._context import JUDGE_TAG, RunContext, _judge_context, current_run_context
from ._limiter import is_rate_limited
from ._options import JudgeOptions
from ._parsing import parse_answer
from ._protocol import REQUEST_KEY, Adjustment, JudgeRequest, wrapper_of
from ._retry import classify, policy, status_of
from ._salvage import _find_cause, _odd_response, _recover_answer
from ._schemas import _ANSWER_SCHEMAS, Answer, Verdicts
from ._spend import BUDGET_OUTPUT_CAP, CallSpend, price_of
from ._structured import (
    METHODS,
    _DirectCall,
    _is_method_rejection,
    _is_openai_sdk_model,
    _judge_of,
    _MethodUnsupported,
    _openai_response_format,
)

__all__ = ['JudgeClient']

logger = logging.getLogger("contextjudge")


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
    """Asks one judge model one kind of question, with every safeguard. Cheap to create; state is in the run.

    A wrapper judge (``protocol.WrapperJudge``, a judge made of other judges) answers through this client's
    ``client_for``: the client asks nothing itself and hands it every request. ``adjust`` (given by a wrapper to the
    client of a judge it wraps) changes every answer this client reads and names and identifies it."""

    def __init__(self, model: BaseChatModel, template: Any, ctx: RunContext | None = None,
                 options: JudgeOptions | None = None, *, adjust: Adjustment | None = None) -> None:
        self.template = template
        self.ctx = ctx or current_run_context() or RunContext()
        # A metric's own options (token budget, retries, timeouts, answer cap) win over the run's for its calls;
        # calls in flight are counted per judge model across the run, so concurrency is the run's.
        self.options = options or self.ctx.options
        self.native = bool(getattr(model, "contextjudge_native", False))
        # A request never spends more than it reserved: under a token or dollar budget a billable judge's answers are
        # capped (JudgeOptions.max_output_tokens, else the model's own max_tokens, else BUDGET_OUTPUT_CAP), and each
        # request reserves what its cap allows (settled down to its real usage when it returns).
        self.output_cap = self.options.max_output_tokens
        budget = self.options.budget or self.ctx.options.budget
        if (self.output_cap is None and budget is not None and not self.native
                and (budget.has_token_limit or budget.has_dollar_limit)):
            own = getattr(model, "max_tokens", None)
            self.output_cap = own if isinstance(own, int) and own > 0 else BUDGET_OUTPUT_CAP
        self._judge = _judge_of(model, self.output_cap)
        self.adjust = adjust
        self.identity = self._judge.identity if adjust is None else adjust.identity(self._judge.identity)
        self.name = self._judge.name if adjust is None else adjust.name(self._judge.name)
        self._inner: dict[tuple[int, Any], JudgeClient] = {}
        self.wrapper = wrapper_of(model)
        if self.wrapper is not None:
            self.identity = self.wrapper.contextjudge_identity(self, self.identity)
        self.price = price_of(self.name) if self.wrapper is None else None
        self._spend: CallSpend | None | bool = False  # built on first call

    def _usage(self, msg: Any, seconds: float) -> Usage:
        usage = _usage_of(msg, seconds)
        if self.price is not None:
            usage.cost = self.price.cost(usage.input_tokens, usage.output_tokens)
        return usage

    def _call_spend(self) -> CallSpend | None:
        """This judge's budget ledger and rate gate (the metric's own options first, then the run's), or None."""
        if self._spend is False:
            budget = self.options.budget or self.ctx.options.budget
            rate = self.options.rate_limit or self.ctx.options.rate_limit
            if budget is None and rate is None:
                self._spend = None
            else:
                ledger = None
                if budget is not None:
                    # the embedded judge is billed by no provider: only a budget in judge calls applies to it
                    ledger = self.ctx.ledger(budget, self.name, self.price, billable=not self.native)
                    ledger.check()
                gate = self.ctx.rate_gate(rate) if rate is not None else None
                self._spend = CallSpend(ledger, gate, model_name=self.name, max_output_tokens=self.output_cap)
        return self._spend  # type: ignore[return-value]

    def client_for(self, model: BaseChatModel, adjust: Adjustment | None = None) -> JudgeClient:
        """The client of ``model`` (a judge a wrapper judge wraps) sharing this client's run, template and options;
        one per model and adjustment."""
        key = (id(model), adjust)
        hit = self._inner.get(key)
        if hit is None:
            hit = self._inner[key] = JudgeClient(model, self.template, self.ctx, self.options, adjust=adjust)
        return hit

    @property
    def repeats(self) -> int:
        """How many times each request is asked (``JudgeOptions.repeats``: the metric's own, else the run's); 1 for
        a deterministic judge, which would answer the same every time."""
        k = self.options.repeats if self.options.repeats != 1 else self.ctx.options.repeats
        if k <= 1:
            return 1
        if _deterministic(self._judge.capped):
            self.ctx.add_repeats(self.name, k, deterministic=True)
            if self.identity not in _SAID_DETERMINISTIC:
                _SAID_DETERMINISTIC.add(self.identity)
                logger.info("contextjudge: judge %s is deterministic (temperature 0, or declared so): it answers "
                            "each request once, whatever repeats=%d says", self.name, k)
            return 1
        return k

    @property
    def model(self) -> BaseChatModel:
        """The judge copy for the running loop (see ``_JudgeCopies``), or the capped model outside a loop."""
        return self._judge.for_loop()

    # ----------------------------------------------------------------------------------------------- public
    async def ask(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        """Ask ``request`` (split by the token budget when large) and merge the answers; ``repeats`` times, past the
        verdict cache, for a judge that is not deterministic. A wrapper judge answers it itself."""
        if self.wrapper is not None:
            return await self.wrapper.contextjudge_ask(request, build, self)
        k = self.repeats
        if k > 1:
            return await self._ask_repeated(request, build, k)
        return await self._ask_split(request, build, self._ask_cached)

    async def _ask_repeated(self, request: JudgeRequest, build: Callable[[JudgeRequest], str], k: int) -> Answer:
        async def fresh(req: JudgeRequest, b: Callable[[JudgeRequest], str]) -> Answer:
            return await self._ask_fresh(req, b(req), b)  # neither read from nor written to the verdict cache

        got = await asyncio.gather(*(self._ask_split(request, build, fresh) for _ in range(k)),
                                   return_exceptions=True)
        for a in got:
            if isinstance(a, BaseException):
                raise a
        answers: list[Answer] = got  # type: ignore[assignment]
        merged, split = _majority(answers, request)
        self.ctx.add_repeats(self.name, k, items=len(merged.verdicts) or 1, split=split)
        return merged

    async def _ask_split(self, request: JudgeRequest, build: Callable[[JudgeRequest], str],
                         fetch: Callable[[JudgeRequest, Callable[[JudgeRequest], str]], Any]) -> Answer:
        if request.task == "rubric_recall":
            return await fetch(request, build)
        budget = self.options.token_budget
        item_chunks = _split_by_budget(request.items, budget)
        ctx_chunks = _split_by_budget(request.context, budget) if request.context else [[]]
        if len(item_chunks) == 1 and len(ctx_chunks) == 1:
            return await fetch(request, build)  # the whole request fits: no copy
        subs = [_sub_request(request, ic, cc) for ic in item_chunks for cc in ctx_chunks]
        answers = await asyncio.gather(*(fetch(s, build) for s in subs))
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
        if self.wrapper is not None:
            return await self.wrapper.contextjudge_text(prompt, self)
        messages = [SystemMessage(self.template.system()), HumanMessage(prompt)]
        t0 = time.perf_counter()
        msg = await self._invoke("text", messages)
        usage = self._usage(msg, time.perf_counter() - t0)
        self.ctx.usage.add(usage)
        return _content_text(msg), usage

    # ----------------------------------------------------------------------------------------------- cache
    async def _ask_cached(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        prompt = build(request)
        dump = request.model_dump(mode="json")
        key = _hash(self.identity, prompt, {k: v for k, v in dump.items() if k not in ("metric", "reference_kind")})
        hit = await self.ctx.cache.aget(key)
        if hit is not None:
            return self._from_cache(hit, request)
        pending = self.ctx._inflight.get(key)  # noqa: SLF001 - the run context is ours
        if pending is not None:
            await asyncio.shield(pending)
            hit = await self.ctx.cache.aget(key)
            if hit is not None:
                return self._from_cache(hit, request)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.ctx._inflight[key] = fut  # noqa: SLF001
        try:
            answer = await self._ask_fresh(request, prompt, build, dump)
            await self.ctx.cache.aput(key, answer.to_cache())
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
        if self.adjust is not None:  # before the answer is cached or merged with repeats
            self.adjust(request, verdicts)
        return Answer(verdicts=verdicts, usage=total, method=method)

    def _messages(self, request: JudgeRequest, prompt: str, dump: dict[str, Any] | None = None) -> list[Any]:
        kwargs = {REQUEST_KEY: request.model_dump(mode="json") if dump is None else dump}
        labelled = [(it.id, u) for it in (*request.items, *request.context) for u in it.images]
        if labelled:
            from ..cases.images import to_image  # noqa: PLC0415 - only requests with images need it

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

        While a judge's method is not yet known, the first call probes the methods in turn. Calls made while that
        probe is in flight do not wait for it: they send the first method too (most judges take it, so no slot is
        held back), and only a call whose first method is rejected waits for the probe and then uses the method it
        found, instead of trying every method itself. The method found is remembered with the judge model
        (``_JudgeCopies.method``), so a later run with the same model object sends no rejected request at all."""
        messages = self._messages(request, prompt, dump)
        if self.native:
            return await self._try_methods(["text"], request, messages, total)
        known = self.ctx._methods.get(self.identity) or self._judge.method  # noqa: SLF001
        if known is None:
            fut, owner = self.ctx.probe(self.identity)
            if owner:
                try:
                    return await self._try_methods(list(METHODS), request, messages, total)
                finally:
                    fut.set_result(None)
            if not fut.done():
                first = await self._try_methods(list(METHODS[:1]), request, messages, total, exhausted_ok=True)
                if first is not None:
                    return first
                await asyncio.shield(fut)
            known = self.ctx._methods.get(self.identity)  # noqa: SLF001
        methods = list(METHODS[METHODS.index(known):]) if known else list(METHODS)
        return await self._try_methods(methods, request, messages, total)

    @overload
    async def _try_methods(self, methods: list[str], request: JudgeRequest, messages: list[Any], total: Usage
                           ) -> tuple[dict[str, Any] | None, str, str]: ...

    @overload
    async def _try_methods(self, methods: list[str], request: JudgeRequest, messages: list[Any], total: Usage, *,
                           exhausted_ok: bool) -> tuple[dict[str, Any] | None, str, str] | None: ...

    async def _try_methods(self, methods: list[str], request: JudgeRequest, messages: list[Any], total: Usage, *,
                           exhausted_ok: bool = False) -> tuple[dict[str, Any] | None, str, str] | None:
        """The first of ``methods`` the judge answers, read; when it rejects them all, an error (or None with
        ``exhausted_ok``, for a call that then waits for the probe)."""
        ids = [it.id for it in request.items]
        last_exc: BaseException | None = None
        for method in methods:
            t0 = time.perf_counter()
            try:
                result = await self._invoke(method, messages)
            except _MethodUnsupported as exc:
                logger.debug("contextjudge: %s does not support %s (%s); trying the next method",
                             self.name, method, exc)
                last_exc = exc
                continue
            self._judge.method = self.ctx._methods.setdefault(self.identity, method)  # noqa: SLF001
            raw_msg = result.get("raw") if isinstance(result, dict) else result
            usage = self._usage(raw_msg, time.perf_counter() - t0)
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
        if exhausted_ok:
            return None
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
            runnable: Any = _DirectCall(model, {"extra_body": {**(getattr(model, "extra_body", None) or {}),
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
            runnable = _DirectCall(model, dict(first.kwargs)) if _is_openai_sdk_model(model) else first
        else:
            runnable = model.with_structured_output(schema, include_raw=True, **kwargs)
        self.ctx._runnables[key] = (model, runnable)  # noqa: SLF001
        return runnable

    async def _invoke(self, method: str, messages: list[Any]) -> Any:
        """One request with retries. Returns an AIMessage, or LangChain's include_raw dict for a model whose
        structured output is not a bound model (see ``_structured``).

        Each attempt holds a slot of the judge's adaptive limiter only while it is on the wire; the first one
        reserves the request's estimated tokens against the budget and rate limit before it is sent (raising
        ``BudgetExhaustedError`` when the budget has no room), and the request settles with its real usage. A 429
        halves the judge's calls in flight; 429s do not use up ``max_attempts`` (up to four times as many attempts),
        unless the provider says a quota is spent: only the deadline ends the retries of a provider that is only
        asking us to slow down."""
        opts = self.options
        request_dump = messages[-1].additional_kwargs.get(REQUEST_KEY) or {}
        schema = _ANSWER_SCHEMAS.get(str(request_dump.get("task")), Verdicts)
        if method == "text":
            runnable = _DirectCall(self.model, {}) if _is_openai_sdk_model(self.model) else self.model
        else:
            runnable = self._structured(method, schema)
        config: Any = {"callbacks": [], "tags": [JUDGE_TAG], "run_name": "contextjudge_judge",
                  "metadata": {"contextjudge": "judge"}}
        limiter = self.ctx.limiter(self.identity, self.model, self.name)
        spend = self._call_spend()
        holds: list[Any] = []  # the budget reservation and rate-limit room, taken by the first attempt

        async def attempt_once() -> Any:
            async with limiter.slot() as slot:
                if spend is not None and not holds:
                    text = "\n".join(_content_text(m) for m in messages)
                    n_items = len(request_dump.get("items") or []) if method != "text" else 0
                    holds.append(await spend.take(*spend.estimate(
                        text, request_dump.get("task") if method != "text" else None, n_items)))
                try:
                    # A native judge (the embedded one) waits for this machine's CPU, not for a server: on a busy
                    # machine its calls queue behind each other, and timing one out would only do its work again.
                    timeout = None if self.native else opts.attempt_timeout
                    out = await _isolated(runnable.ainvoke(messages, config=config), timeout)
                except JudgeError:
                    raise
                except Exception as exc:  # noqa: BLE001 - sorted here, raised again below
                    return self._sort_failure(exc, method, limiter, slot)
                slot.ok()
                return out

        free = [0]  # 429 attempts, which do not count against max_attempts

        def _retryable(exc: BaseException) -> bool:
            ok = classify(exc) == "transient" and not _is_method_rejection(exc, method)
            if ok and is_rate_limited(exc) and "quota" not in str(exc).lower():
                free[0] += 1
            return ok

        started = time.monotonic()  # the deadline counts from the first attempt, which runs before tenacity's loop

        def _stop(state: Any) -> bool:
            n = state.attempt_number
            return time.monotonic() - started >= opts.deadline or n >= 4 * opts.max_attempts \
                or n - free[0] >= opts.max_attempts

        def _on_retry(attempt: int, exc: BaseException, delay: float) -> None:
            if is_rate_limited(exc):
                logger.debug("contextjudge: judge %s rate limited (HTTP 429); retry %d in %.1fs", self.name,
                             attempt, delay)
                return
            logger.warning("contextjudge: judge %s call failed (%s: %s); retry %d in %.1fs", self.name,
                           type(exc).__name__, str(exc)[:120], attempt, delay)

        def retrying() -> Any:
            return policy(opts, _retryable, _on_retry).copy(stop=_stop)

        try:
            result = await self._retry_loop(retrying, attempt_once, method)
        except BaseException as exc:
            if holds and spend is not None:
                if _refused_status(exc):
                    await spend.release(holds[0])  # refused by the provider: not billed
                else:
                    await spend.settle(holds[0], None)  # timed out or cut: it may have been billed; keep the estimate
            raise
        if holds and spend is not None:
            raw = result.get("raw") if isinstance(result, dict) else result
            await spend.settle(holds[0], getattr(raw, "usage_metadata", None) or None)
        return result

    def _sort_failure(self, exc: Exception, method: str, limiter: Any, slot: Any) -> Any:
        """What a failed attempt becomes: a 429 lowers the calls in flight; a structured answer the SDK could not
        parse is read by our parser instead (returned); a 200 that is no completion becomes a ``JudgeResponseError``;
        anything else is raised again."""
        if is_rate_limited(exc):
            before = limiter.limit
            slot.throttle()
            if limiter.limit < before:
                logger.info("contextjudge: judge %s is rate limited (HTTP 429): calls in flight lowered from %d to %d",
                            self.name, before, limiter.limit)
        recovered = _recover_answer(exc) if method != "text" else None
        if recovered is not None:
            # The server answered, but the SDK's own parsing of the structured answer failed (invalid or truncated
            # JSON, prose around it, finish_reason "length"): read it with our tolerant parser.
            logger.info("contextjudge: judge %s answered %s output its SDK could not parse (%s); reading the raw "
                        "text instead", self.name, method, type(exc).__name__)
            slot.ok()
            return recovered
        odd = _odd_response(exc)
        if odd is not None:
            raise odd from exc
        raise exc

    async def _retry_loop(self, retrying: Callable[[], Any], attempt_once: Callable[[], Any], method: str) -> Any:
        """Run ``attempt_once`` under the policy ``retrying()`` builds and translate what fails into a ``JudgeError``.

        The first attempt runs on its own: most calls succeed at once, and tenacity's loop costs about as much CPU
        as the rest of our side of a call. When it fails, the policy starts with that failure as its first attempt
        (replayed, not sent again), so attempts, waits, logs and errors are those of the policy alone."""
        try:
            return await attempt_once()
        except Exception as exc:  # noqa: BLE001 - handed to the policy below, which sorts it
            replay: list[Exception] = [exc]

        async def again() -> Any:
            if replay:
                raise replay.pop()
            return await attempt_once()

        try:
            async for attempt in retrying():
                with attempt:
                    return await again()
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
                "lower max_concurrency, or raise JudgeOptions.deadline.",
                status_code=status_of(inner) if inner is not None else None) from inner
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


_SAID_DETERMINISTIC: set[str] = set()


def _refused_status(exc: BaseException) -> bool:
    """Whether a failed call ended with the provider refusing it (an HTTP error status), which it does not bill."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 4:
        if status_of(cur) is not None and status_of(cur) != 200:
            return True
        cur = cur.__cause__
        seen += 1
    return False


def _deterministic(model: Any) -> bool:
    """A judge that gives the same answer every time: declared so (``contextjudge_deterministic``, as the embedded
    judge), or a temperature of 0. A chat model with no temperature set samples at its provider's default."""
    if getattr(model, "contextjudge_deterministic", False):
        return True
    t = getattr(model, "temperature", None)
    try:
        return t is not None and float(t) == 0.0
    except (TypeError, ValueError):
        return False


def _majority(answers: list[Answer], request: JudgeRequest) -> tuple[Answer, int]:
    """The answers of k repeats as one: per item the majority verdict (a tie keeps the first repeat's, and says so
    in the reason), with ``votes`` (the k verdicts) and ``agreement`` (the share that agree with it); a rubric score
    is the mean of the k scores. Also how many items the repeats did not all agree on."""
    merged = Answer(method=answers[0].method)
    for a in answers:
        merged.usage.add(a.usage)
    k = len(answers)
    if request.task == "rubric_recall":
        scores = [float(a.score or 0.0) for a in answers]
        merged.score = sum(scores) / k
        merged.reason = (f"{answers[0].reason} (mean of {k} repeats: "
                         f"{', '.join(f'{x:.2f}' for x in scores)})").strip()
        merged.verdicts = {"rubric": {"verdict": "", "votes": scores, "agreement": None}}
        return merged, int(len(set(scores)) > 1)
    split = 0
    for vid in answers[0].verdicts:
        got = [a.verdicts[vid] for a in answers if vid in a.verdicts]
        votes = [v["verdict"] for v in got]
        yes = votes.count("yes")
        no = len(votes) - yes
        tie = yes == no
        majority = votes[0] if tie else ("yes" if yes > no else "no")
        out = dict(next(v for v in got if v["verdict"] == majority))
        out["votes"] = votes
        out["agreement"] = votes.count(majority) / len(votes)
        if tie:
            out["reason"] = (f"{out.get('reason', '')} (the {k} repeats tied {yes} yes to {no} no; the first "
                             "repeat's verdict is kept)").strip()
        split += len(set(votes)) > 1
        merged.verdicts[vid] = out
    return merged, split


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


async def _isolated(coro: Any, timeout: float | None) -> Any:
    """Run a judge call with no inherited LangChain context, so the user's tracers never see it."""
    loop = asyncio.get_running_loop()

    async def bounded() -> Any:
        async with asyncio.timeout(timeout):
            return await coro

    task = loop.create_task(bounded(), context=_judge_context())
    try:
        return await task
    except TimeoutError as exc:
        raise TimeoutError(f"judge call took longer than {timeout:.0f}s") from exc
    finally:
        if not task.done():  # our caller was cancelled: the judge call goes too
            task.cancel()

"""The judge client: one facade a metric calls with a ``JudgeRequest``; it caches, splits by token budget
(``budget``), asks a sampling judge ``repeats`` times (``_repeats``), re-asks for missing ids and applies a wrapper's
adjustment. The asking is two objects it builds: ``_asking.Asker`` (the structured-output method the judge takes,
usage, parsing) and ``_sending.Sender`` (limiter slot, budget and rate reservation, retries, salvage). It returns
verdicts keyed by the request's ids, or raises a ``JudgeError`` subclass with a message that says what to do."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from .._result import Usage
from ..errors import JudgeOutputError
from ._asking import Asker
from ._budget import _merge_parts, _split_by_budget, _sub_request
from ._cache import _hash
from ._context import RunContext, current_run_context
from ._options import JudgeOptions
from ._protocol import REQUEST_KEY, Adjustment, JudgeRequest, wrapper_of
from ._repeats import _deterministic, _majority
from ._schemas import Answer
from ._sending import Sender, _content_text
from ._spend import BUDGET_OUTPUT_CAP, price_of
from ._structured import _judge_of

__all__ = ['JudgeClient']

logger = logging.getLogger("contextjudge")


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
        # sends one request (limiter, budget, retries) and asks with the method the judge takes (probe, parsing)
        self._sender = Sender(self._judge, self.ctx, self.options, identity=self.identity, name=self.name,
                              native=self.native, price=self.price, output_cap=self.output_cap)
        self._asker = Asker(self._sender, self.ctx, self._judge, identity=self.identity, name=self.name,
                            native=self.native)

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
        if not request.verdict_family.per_item:
            return await fetch(request, build)
        budget = self.options.token_budget
        item_chunks = _split_by_budget(request.items, budget)
        ctx_chunks = _split_by_budget(request.context, budget) if request.context else [[]]
        if len(item_chunks) == 1 and len(ctx_chunks) == 1:
            return await fetch(request, build)  # the whole request fits: no copy
        subs = [_sub_request(request, ic, cc) for ic in item_chunks for cc in ctx_chunks]
        return _merge_parts(await asyncio.gather(*(fetch(s, build) for s in subs)))

    async def complete_text(self, prompt: str) -> tuple[str, Usage]:
        """A plain prompt and its text answer (for the opt-in LLM-written reason)."""
        if self.wrapper is not None:
            return await self.wrapper.contextjudge_text(prompt, self)
        messages = [SystemMessage(self.template.system()), HumanMessage(prompt)]
        t0 = time.perf_counter()
        msg = await self._sender.send("text", messages)
        usage = self._sender.usage(msg, time.perf_counter() - t0)
        self.ctx.usage.add(usage)
        return _content_text(msg), usage

    # ----------------------------------------------------------------------------------------------- cache
    async def _ask_cached(self, request: JudgeRequest, build: Callable[[JudgeRequest], str]) -> Answer:
        prompt = build(request)
        dump = request.model_dump(mode="json")
        # the metric, the reference's kind and a family named beside the task do not change the question asked
        key = _hash(self.identity, prompt, {k: v for k, v in dump.items()
                                            if k not in ("metric", "reference_kind", "family")})
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
        if not request.verdict_family.per_item:
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
        """One answer to ``prompt``, read by the parser, with the structured-output method this judge supports
        (``_asking.Asker``)."""
        return await self._asker.answer(request, self._messages(request, prompt, dump), total)


_SAID_DETERMINISTIC: set[str] = set()



"""Sending one request to one judge: the structured-output runnable for a method, one attempt per slot of the
judge's adaptive limiter (``limiter``), the request's tokens reserved against the run's budget and rate limit
(``spend``), retries (``retry``), odd answers salvaged (``salvage``), and every failure translated into a
``JudgeError`` that says what to do. What the answer says is read by ``_asking``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableBinding
from pydantic import BaseModel
from tenacity import RetryError

from .._result import Usage
from .._text import escape_unstorable, escape_unstorable_in
from ..errors import JudgeError, JudgeResponseError, JudgeUnavailableError
from ._context import JUDGE_TAG, RunContext, _judge_context
from ._families import family_of_request
from ._limiter import is_rate_limited
from ._options import JudgeOptions
from ._protocol import REQUEST_KEY
from ._retry import classify, policy, status_of
from ._salvage import _find_cause, _odd_response, _recover_answer
from ._schemas import Verdicts
from ._spend import CallSpend, Price
from ._spend._sizes import ANSWER_SIZES
from ._structured import (
    _DirectCall,
    _is_method_rejection,
    _is_openai_sdk_model,
    _JudgeCopies,
    _MethodUnsupported,
    _openai_response_format,
    schema_tokens,
    sent_schema_tokens,
)

__all__: list[str] = []

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


class Sender:
    """Sends one request to one judge model with one structured-output method, and returns its raw answer.

    Made by a ``JudgeClient`` with what it needs: the judge's copies, the run, the options in force, and the judge's
    identity, name, price and answer cap. The budget ledger and rate gate it reserves against are found on its
    first call."""

    def __init__(self, judge: _JudgeCopies, ctx: RunContext, options: JudgeOptions, *, identity: str, name: str,
                 native: bool, price: Price | None, output_cap: int | None) -> None:
        self._judge = judge
        self.ctx = ctx
        self.options = options
        self.identity = identity
        self.name = name
        self.native = native
        self.price = price
        self.output_cap = output_cap
        self._spend: CallSpend | None | bool = False  # built on first call
        self._schema_sizes: dict[int, tuple[Any, int]] = {}  # a runnable's answer schema tokens (_schema_tokens)

    @property
    def model(self) -> BaseChatModel:
        """The judge copy for the running loop (see ``_JudgeCopies``), or the capped model outside a loop."""
        return self._judge.for_loop()

    def usage(self, msg: Any, seconds: float) -> Usage:
        """What one answer cost: its tokens, time and, where the judge's price is known, dollars."""
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

    def _schema_tokens(self, runnable: Any, method: str, schema: type[BaseModel]) -> int:
        """The prompt tokens of the answer schema a request through ``runnable`` carries, which providers bill as
        input: read from the request's own options where they are at hand (``response_format`` in ``extra_body`` or
        as is, the ``tools`` bound for function calling), else the schema LangChain's structured output is given
        for ``method`` (``schema_tokens``, as ``contextjudge estimate`` counts it); 0 for a native judge (nothing is
        sent), for ``text``, and for a model that says it is billed for none (``contextjudge_bills_schema = False``:
        the scripted ``testing.FakeJudge``)."""
        if self.native or method == "text" or not getattr(self.model, "contextjudge_bills_schema", True):
            return 0
        hit = self._schema_sizes.get(id(runnable))
        if hit is not None and hit[0] is runnable:
            return hit[1]
        if isinstance(runnable, _DirectCall):
            n = sent_schema_tokens(runnable.kwargs, self.name)
        elif isinstance(runnable, RunnableBinding):
            n = sent_schema_tokens(dict(runnable.kwargs), self.name)
            if not n and "ls_structured_output_format" in runnable.kwargs:
                # the schema under a key of the provider's own (Gemini's response_schema, Ollama's format)
                n = schema_tokens(schema, method, self.name)
        else:  # a structured output that is a chain of the model's own: the schema it is given, as estimate counts
            n = schema_tokens(schema, method, self.name)
        if len(self._schema_sizes) >= 64:  # a runnable per event loop's judge copy: kept bounded
            self._schema_sizes.clear()
        self._schema_sizes[id(runnable)] = (runnable, n)
        return n

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

    async def send(self, method: str, messages: list[Any], *, at_least: int | None = None) -> Any:
        """One request with retries. Returns an AIMessage, or LangChain's include_raw dict for a model whose
        structured output is not a bound model (see ``_structured``).

        Each attempt holds a slot of the judge's adaptive limiter only while it is on the wire; the first one
        reserves the request's estimated tokens against the budget and rate limit before it is sent (raising
        ``BudgetExhaustedError`` when the budget has no room), and the request settles with its real usage. A 429
        halves the judge's calls in flight; 429s do not use up ``max_attempts`` (up to four times as many attempts),
        unless the provider says a quota is spent: only the deadline ends the retries of a provider that is only
        asking us to slow down.

        A call that finds no room in the budget for its whole answer cap may reserve what this judge's answers really
        take and be sent with that as its own cap (``CallSpend.take``); an answer cut by that cap (``finish_reason``
        "length") is never read: it is asked again with twice the cap (``at_least``; up to the whole cap), which
        reserves that, waits for room, or is refused."""
        opts = self.options
        messages = _sendable(messages)
        request_dump = messages[-1].additional_kwargs.get(REQUEST_KEY) or {}
        schema = family_of_request(request_dump).schema if request_dump.get("task") else Verdicts
        if method == "text":
            runnable = _DirectCall(self.model, {}) if _is_openai_sdk_model(self.model) else self.model
        else:
            runnable = self._structured(method, schema)
        config: Any = {"callbacks": [], "tags": [JUDGE_TAG], "run_name": "contextjudge_judge",
                  "metadata": {"contextjudge": "judge"}}
        task = request_dump.get("task") if method != "text" else None
        n_items = len(request_dump.get("items") or []) if method != "text" else 0
        limiter = self.ctx.limiter(self.identity, self.model, self.name)
        spend = self._call_spend()
        holds: list[Any] = []  # the budget reservation and rate-limit room, taken by the first attempt
        estimated: list[int] = []  # its prompt's estimated tokens

        async def attempt_once() -> Any:
            async with limiter.slot() as slot:
                if spend is not None and not holds:
                    inp, out_full = spend.estimate(messages, task, n_items,
                                                   self._schema_tokens(runnable, method, schema))
                    sized = None if not isinstance(runnable, _DirectCall) else spend.sized(
                        self.identity, task, n_items, inp, out_full, at_least)
                    holds.append(await spend.take(inp, out_full, sized))
                    estimated.append(inp)
                try:
                    # A native judge (the embedded one) waits for this machine's CPU, not for a server: on a busy
                    # machine its calls queue behind each other, and timing one out would only do its work again.
                    timeout = None if self.native else opts.attempt_timeout
                    cap = holds[0].cap if holds else None
                    call = (runnable.ainvoke(messages, config=config, max_tokens=cap) if cap is not None
                            else runnable.ainvoke(messages, config=config))
                    out = await _isolated(call, timeout)
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
            usage = getattr(raw, "usage_metadata", None) or None
            await spend.settle(holds[0], usage)
            cut = (getattr(raw, "response_metadata", None) or {}).get("finish_reason") == "length"
            cap = holds[0].cap
            if cut and cap is not None:
                # cut by the smaller cap this call reserved: never read cut, asked again with twice the cap (which
                # reserves it, waits for room, or is refused); later calls of this judge reserve more too
                ANSWER_SIZES.observe(self.identity, task, n_items, 2 * cap, estimated[0] if estimated else 0,
                                     int((usage or {}).get("input_tokens", 0) or 0))
                logger.info("contextjudge: judge %s answer was cut at the %d answer tokens reserved for it; asking "
                            "again with up to %d", self.name, cap, 2 * cap)
                return await self.send(method, messages, at_least=2 * cap)
            if not cut and usage:
                ANSWER_SIZES.observe(self.identity, task, n_items, int(usage.get("output_tokens", 0) or 0),
                                     estimated[0] if estimated else 0, int(usage.get("input_tokens", 0) or 0))
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


def _sendable(messages: list[Any]) -> list[Any]:
    """The messages with each character no HTTP body takes (a lone surrogate from an end user's text, NUL) escaped
    (``_text.escape_unstorable``): an OpenAI-compatible client encodes the body as UTF-8 and would fail the case.
    Messages without one are passed as they are."""
    out = []
    for m in messages:
        content = getattr(m, "content", None)
        if isinstance(content, str):
            new: Any = escape_unstorable(content)
        elif isinstance(content, list):
            new = escape_unstorable_in(content)[0]
        else:
            new = content
        out.append(m if new is content else m.model_copy(update={"content": new}))
    return out


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

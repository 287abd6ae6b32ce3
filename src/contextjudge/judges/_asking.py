"""Asking one judge one prompt and reading its answer: the structured-output method the judge supports is found
by a probe (``structured``) and remembered; each call is sent by ``_sending.Sender``; usage is counted and recorded;
the answer is read by the tolerant parser (``parsing``), never taking the judged text's own JSON for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, overload

from .._result import Usage
from ..errors import JudgeUnavailableError
from ._context import RunContext
from ._parsing import parse_answer
from ._protocol import JudgeRequest
from ._sending import Sender, _content_text
from ._structured import METHODS, _JudgeCopies, _MethodUnsupported

__all__: list[str] = []

logger = logging.getLogger("contextjudge")


class Asker:
    """Asks one judge a prompt with the structured-output method it supports, and reads the answer.

    Made by a ``JudgeClient`` with its ``Sender``, the run, the judge's copies (where the method found is kept), and
    the judge's identity and name."""

    def __init__(self, sender: Sender, ctx: RunContext, judge: _JudgeCopies, *, identity: str, name: str,
                 native: bool) -> None:
        self._sender = sender
        self.ctx = ctx
        self._judge = judge
        self.identity = identity
        self.name = name
        self.native = native

    async def answer(self, request: JudgeRequest, messages: list[Any], total: Usage
                     ) -> tuple[dict[str, Any] | None, str, str]:
        """The answer to ``messages`` (asking ``request``), read by the parser, with the structured-output method this
        judge supports, its usage added to ``total``; also the method and the answer's text.

        While a judge's method is not yet known, the first call probes the methods in turn. Calls made while that
        probe is in flight do not wait for it: they send the first method too (most judges take it, so no slot is
        held back), and only a call whose first method is rejected waits for the probe and then uses the method it
        found, instead of trying every method itself. The method found is remembered with the judge model
        (``_JudgeCopies.method``), so a later run with the same model object sends no rejected request at all."""
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
        fam = request.verdict_family
        last_exc: BaseException | None = None
        for method in methods:
            t0 = time.perf_counter()
            try:
                result = await self._sender.send(method, messages)
            except _MethodUnsupported as exc:
                logger.debug("contextjudge: %s does not support %s (%s); trying the next method",
                             self.name, method, exc)
                last_exc = exc
                continue
            self._judge.method = self.ctx._methods.setdefault(self.identity, method)  # noqa: SLF001
            raw_msg = result.get("raw") if isinstance(result, dict) else result
            usage = self._sender.usage(raw_msg, time.perf_counter() - t0)
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
                parsed = parse_answer(data, task=fam, ids=ids, data=judged)
            if parsed is None and not text:
                # valid tool calls carry parsed args; invalid ones (broken JSON) carry the raw argument string
                for tc in getattr(raw_msg, "tool_calls", None) or []:
                    parsed = parse_answer(tc.get("args"), task=fam, ids=ids, data=judged) or parsed
                for tc in getattr(raw_msg, "invalid_tool_calls", None) or []:
                    if parsed is None and tc.get("args"):
                        parsed = parse_answer(str(tc["args"]), task=fam, ids=ids, data=judged)
                        text = text or str(tc["args"])
            if parsed is None:
                parsed = parse_answer(text, task=fam, ids=ids, data=judged)
            return parsed, method, text
        if exhausted_ok:
            return None
        raise JudgeUnavailableError(
            f"The judge {self.name!r} supported none of the ways to answer (structured output, function calling, "
            f"JSON mode, plain text): {last_exc}. Check that it is a chat model that returns text.")


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

"""``generate``: chunks read, questions asked, near-duplicates dropped, each checked, provenance written on every
golden kept."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from typing import Any

from ...cases.goldens import normalize_input
from ...errors import BudgetExhaustedError, ConfigurationError, JudgeError
from ._asking import _ask_chunk
from ._check import _check, _judge_in_use
from ._chunks import Chunk, read_chunks
from ._cost import estimate_generation
from ._dedup import _Seen
from ._prompts import DEFAULT_STYLES, PROMPT_VERSION, _plan, _system_template
from ._results import GenerationEstimate, GenerationResult


def _golden_id(chunk_id: str, question: str) -> str:
    return "g-" + hashlib.blake2b(f"{chunk_id}\x00{normalize_input(question)}".encode(), digest_size=6).hexdigest()


def generate(docs: Any, *, model: Any, per_chunk: int = 3, styles: Sequence[str] = DEFAULT_STYLES, judge: Any = None,
             check: bool = True, budget: Any = None, seed: int = 0, chunk_size: int = 1000, splitter: Any = None,
             max_chunks: int | None = None, dry_run: bool = False, concurrency: int = 8,
             options: Any = None) -> GenerationResult:
    """Goldens from ``docs`` (anything ``read_chunks`` reads): ``per_chunk`` questions per chunk written by
    ``model`` (any LangChain chat model, or a model name), each with its expected answer and
    ``expected_context_ids``, near-duplicates dropped, each checked by ``judge`` (default: the judge in use,
    ``$CONTEXTJUDGE_MODEL``, else the embedded judge; ``check=False`` keeps every readable one). ``budget`` (a ``contextjudge.Budget``) bounds the calls, tokens or
    dollars of writing and checking together: when it runs out, the goldens made so far are kept and ``stopped``
    says so. ``options`` (a ``JudgeOptions``: retries, timeouts, ``max_output_tokens``) apply to writing and
    checking. ``splitter`` (the app's LangChain text splitter or LlamaIndex node parser) cuts files the way the app
    does. ``dry_run=True`` returns the estimate only (``result.estimate``), calling nothing."""
    from ..._aio import run_sync  # noqa: PLC0415

    judge = _judge_in_use(judge)
    chunks = read_chunks(docs, chunk_size=chunk_size, splitter=splitter)
    if not chunks:
        raise ConfigurationError("no text found in the documents given: pass files with text, or Documents/nodes.")
    if max_chunks is not None:
        rng = random.Random(seed)
        chunks = chunks if len(chunks) <= max_chunks else [chunks[i] for i in sorted(rng.sample(
            range(len(chunks)), max_chunks))]
    est = estimate_generation(chunks, model=model, per_chunk=per_chunk, styles=styles, judge=judge, seed=seed)
    if dry_run:
        return GenerationResult([], [], {"calls": 0, "input_tokens": 0, "output_tokens": 0}, estimate=est)
    return run_sync(_agenerate(chunks, model=model, per_chunk=per_chunk, styles=styles, judge=judge, check=check,
                               budget=budget, seed=seed, estimate=est, concurrency=concurrency,
                               options=options))


async def _agenerate(chunks: list[Chunk], *, model: Any, per_chunk: int, styles: Sequence[str], judge: Any,
                     check: bool, budget: Any, seed: int, estimate: GenerationEstimate, concurrency: int,
                     options: Any = None) -> GenerationResult:
    from ...judges import (  # noqa: PLC0415
        ContextualPrecisionTemplate,
        JudgeClient,
        JudgeOptions,
        RunContext,
        judge_name,
        local_spec,
        resolve_model,
    )

    if (isinstance(model, str) and local_spec(model)) or getattr(model, "contextjudge_native", False):
        raise ConfigurationError("the embedded judge checks goldens but cannot write questions: pass a chat model "
                                 "as model= (e.g. 'gpt-4o-mini' or ChatOpenAI(base_url=...)).")
    gen_model = resolve_model(model)
    if options is None:
        options = JudgeOptions()
    if budget is not None:
        import dataclasses  # noqa: PLC0415

        options = dataclasses.replace(options, budget=budget)
    ctx = RunContext(options=options)
    client = JudgeClient(gen_model, _system_template(), ctx)
    plan = _plan(chunks, per_chunk, styles, seed)
    dropped: list[dict[str, Any]] = []
    stop: list[str] = []
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(c: Chunk, s: list[str], d: Chunk | None) -> list[dict[str, Any]]:
        async with sem:
            return await _ask_chunk(client, c, s, d, dropped, stop)

    asked = await asyncio.gather(*(one(c, s, d) for c, s, d in plan))
    writing = {"calls": ctx.usage.calls, "input_tokens": ctx.usage.input_tokens,
               "output_tokens": ctx.usage.output_tokens}
    # near-duplicates: the first (in chunk order) is kept
    kept: list[dict[str, Any]] = []
    seen = _Seen()
    for q in (q for qs in asked for q in qs):
        if not seen.add_if_new(q["question"]):
            dropped.append({"reason": "duplicate", "chunk_id": q["ids"][0], "question": q["question"]})
            continue
        kept.append(q)
    checker_name = None
    if check and kept:
        jmodel = resolve_model(judge)
        jclient = JudgeClient(jmodel, ContextualPrecisionTemplate, ctx)
        checker_name = jclient.name

        async def checked(q: dict[str, Any]) -> tuple[bool, str]:
            # questions written before a budget ran out are still checked while it has room; one whose check is
            # refused is dropped ("budget"): a golden is never kept unchecked
            async with sem:
                try:
                    return await _check(jclient, q)
                except BudgetExhaustedError as exc:
                    stop.append(str(exc))
                    return False, "budget"
                except JudgeError as exc:
                    return False, f"check failed: {str(exc)[:200]}"

        verdicts = await asyncio.gather(*(checked(q) for q in kept))
        passed = []
        for q, (ok, why) in zip(kept, verdicts, strict=True):
            if ok:
                passed.append(q)
            else:
                dropped.append({"reason": why, "chunk_id": q["ids"][0], "question": q["question"],
                                "answer": q["answer"]})
        kept = passed
    gen_name = judge_name(gen_model)
    rows = []
    for q in kept:
        first: Chunk = q["chunks"][0]
        un = q["style"] == "unanswerable"
        prov = {"chunk_ids": q["ids"], "document": first.document, "chunk_origin": first.origin,
                "model": gen_name, "prompt_version": PROMPT_VERSION, "seed": seed, "style": q["style"],
                "checked_by": checker_name}
        row: dict[str, Any] = {"id": _golden_id(first.id, q["question"]), "input": q["question"]}
        if un:
            row["expected_outcome"] = "says the documents do not answer this"
            row["unanswerable"] = True
        else:
            row["expected_output"] = q["answer"]
            row["expected_context_ids"] = q["ids"]
            row["expected_context"] = [c.text for c in q["chunks"]]
        row["style"] = q["style"]
        row["provenance"] = prov
        rows.append(row)
    usage = {"calls": ctx.usage.calls, "input_tokens": ctx.usage.input_tokens,
             "output_tokens": ctx.usage.output_tokens, "writing": writing,
             "checking": {k: getattr(ctx.usage, k) - writing[k] for k in writing}}
    return GenerationResult(rows, dropped, usage, estimate=estimate, stopped=stop[0] if stop else None)


generate_goldens = generate  # the engine door's name for it

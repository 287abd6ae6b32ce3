"""What generating would cost, before any call (``estimate_generation``): the real prompts counted, answers at the
size the prompt asks for (``_stand_in``), every question checked by the requests ``_check`` sends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..._result import is_embedded_judge
from ..._text import split_sentences
from ._check import _check_requests, _judge_in_use
from ._chunks import Chunk
from ._prompts import _SYSTEM, DEFAULT_STYLES, UNANSWERED, _plan, _prompt
from ._results import GenerationEstimate

# For estimates before any call, the answer's shape as the prompt asks for it: per style, the words of the question
# (a short one "under 12 words"; a multi-part or two-passage one asks two things) and the sentences of its answer
# ("one or two sentences" of the passage's facts: one for a single fact, two where two are asked for); a stand-in
# golden of that shape is made of the chunk's own words and sentences (``_stand_in``) and counted.
_QUESTION_WORDS = {"short": 9, "conversational": 11, "multi_part": 18, "two_chunks": 16, "unanswerable": 10}
_ANSWER_SENTENCES = {"short": 1, "conversational": 1, "multi_part": 2, "two_chunks": 2, "unanswerable": 0}


def estimate_generation(chunks: list[Chunk], *, model: Any, per_chunk: int = 3, styles: Sequence[str] = DEFAULT_STYLES,
                        judge: Any = None, seed: int = 0) -> GenerationEstimate:
    """Calls and tokens of ``generate`` before any call: the real prompts counted, answers at the size the prompt
    asks for (``_stand_in``: per style, a question's words and an answer's sentences of the chunk's typical length),
    every question checked by the requests ``_check`` sends (two each, one for an unanswerable question), each
    verdict with a short sentence of reason."""
    from ...judges import count_tokens, family, local_spec, price_of, prompt_tokens, schema_tokens  # noqa: PLC0415
    from .._estimate import schema_method  # noqa: PLC0415

    plan = _plan(chunks, per_chunk, styles, seed)
    mname = _model_name(model)
    jmodel = _judge_in_use(judge)
    jname = _model_name(jmodel)
    # the answer schema each check call sends (OpenAI-compatible providers bill it as input); none from the
    # embedded judge
    method = schema_method(jmodel, jname)
    schema_in = 0
    inp = sum(prompt_tokens([("system", _SYSTEM), ("user", _prompt(c, s, d))], mname) for c, s, d in plan)
    out = 0
    calls = len(plan)
    c_calls = c_in = c_out = 0
    for c, s, d in plan:
        out += count_tokens('{"questions": []}', mname)
        for st in s:
            # a stand-in of the golden this style asks for, at the size the prompt asks for, from the chunk's words
            question, answer = _stand_in(c, st, d)
            out += count_tokens(json.dumps({"style": st, "question": question, "answer": answer}) + ", ", mname)
            mine = [c] + ([d] if d is not None and st == "two_chunks" else [])
            for req, step in _check_requests(question, answer, st, mine):
                c_calls += 1
                c_in += prompt_tokens([("system", _CHECK_SYSTEM()), ("user", step(req))], jname)
                sch = schema_tokens(family(req.family or req.task).schema, method, jname) if method else 0
                c_in += sch
                schema_in += sch
                c_out += _verdicts_tokens(len(req.items), jname)
    dollars: float | None = None
    price = price_of(mname)
    free_check = bool(local_spec(jname or "")) or is_embedded_judge(jname)
    if price is not None:
        dollars = price.cost(inp, out)
        if not free_check:
            jp = price_of(jname)
            dollars = None if jp is None else dollars + jp.cost(c_in, c_out)
    return GenerationEstimate(
        model=mname or "?", judge=jname or "?", chunks=len(chunks), questions=sum(len(s) for _, s, _ in plan),
        calls=calls, input_tokens=inp, output_tokens=out, check_calls=c_calls, check_input_tokens=c_in,
        check_output_tokens=0 if free_check else c_out, dollars=dollars, check_schema_tokens=schema_in,
        assumptions=["answers as the prompts ask for them: a question of 9 to 18 words by style, its answer one "
                     "sentence of the passage's typical length (two for a multi-part or two-passage question); a "
                     "check's verdicts a short sentence of reason each",
                     (f"a check's input counts the answer schema it sends ({method}: "
                      f"{schema_in / max(1, c_calls):,.0f} tokens a call), which OpenAI-compatible providers bill"
                      if schema_in else "the checking judge sends no answer schema"),
                     "every question is checked (duplicates and unreadable answers would lower this)",
                     "a re-ask after an unreadable answer is not counted"])


def _typical_sentence(chunk: Chunk) -> str:
    """The chunk's sentence of about its mean length (in characters): what an answer sentence drawn from it is
    counted as."""
    sents = split_sentences(" ".join(chunk.text.split())) or [" ".join(chunk.text.split())]
    mean = sum(len(x) for x in sents) / len(sents)
    return min(sents, key=lambda x: abs(len(x) - mean))


def _stand_in(chunk: Chunk, style: str, second: Chunk | None) -> tuple[str, str]:
    """A question and answer of the size ``_prompt`` asks for in ``style``, made of the chunk's own words, for the
    estimate: the question ``_QUESTION_WORDS`` words long, the answer ``_ANSWER_SENTENCES`` sentences of the
    chunk's typical length (for two passages, one of each), an unanswerable one's the fixed answer."""
    words = " ".join(chunk.text.split()).split(" ")
    n = _QUESTION_WORDS[style]
    question = " ".join((words * (n // max(1, len(words)) + 1))[:n]) + "?"
    if style == "unanswerable":
        return question, UNANSWERED
    if style == "two_chunks" and second is not None:
        return question, f"{_typical_sentence(chunk)} {_typical_sentence(second)}"
    return question, " ".join([_typical_sentence(chunk)] * max(1, _ANSWER_SENTENCES[style]))


def _CHECK_SYSTEM() -> str:  # noqa: N802 - the judge's system message, as JudgeClient sends it
    from ...judges import ContextualPrecisionTemplate  # noqa: PLC0415

    return ContextualPrecisionTemplate.system()


# a verdict's reason as the judge prompt asks for it ("one short sentence"), for estimates before any call
_SHORT_REASON = "The passage states this fact directly and it answers the question as asked."


def _verdicts_tokens(items: int, model_name: str | None) -> int:
    """The output tokens of a judge's answer of ``items`` verdicts in the form the prompt asks for (an id, a
    verdict and a one-sentence reason each)."""
    from ...judges import count_tokens  # noqa: PLC0415

    return count_tokens(json.dumps({"verdicts": [{"id": f"s{k}", "verdict": "yes", "reason": _SHORT_REASON}
                                                 for k in range(1, items + 1)]}), model_name)


def _model_name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    from ...judges import judge_name  # noqa: PLC0415

    try:
        return str(judge_name(model))
    except Exception:  # noqa: BLE001
        return type(model).__name__

"""A golden checked by the judge in use (``_check``), through the requests the metrics send (``_check_requests``):
its expected answer supported by its chunk(s) and the chunk(s) useful for it; an unanswerable one's chunk not
useful."""

from __future__ import annotations

from typing import Any

from ..._text import split_sentences
from ._chunks import Chunk


def _check_requests(question: str, answer: str, style: str, chunks: list[Chunk]) -> list[tuple[Any, Any]]:
    """The judge requests that check one golden, with their prompt steps, in order: for an unanswerable question,
    its chunk's usefulness; else the expected answer's sentences against its chunk(s) (statement support), then the
    chunk(s)' usefulness for that answer to that question. ``_check`` asks them; the estimate counts them."""
    from ...judges import ContextualPrecisionTemplate as prec  # noqa: PLC0415, N813
    from ...judges import ContextualRecallTemplate as recall  # noqa: PLC0415, N813
    from ...judges import Item, JudgeRequest  # noqa: PLC0415

    nodes = [Item(id=f"n{k}", text=c.text) for k, c in enumerate(chunks, start=1)]
    if style == "unanswerable":
        return [(JudgeRequest(task="node_usefulness", metric="goldens check", input=question, items=nodes[:1]),
                 prec.node_usefulness)]
    sents = split_sentences(answer) or [answer]
    return [(JudgeRequest(task="statement_support", metric="goldens check", input=question,
                          items=[Item(id=f"s{k}", text=s) for k, s in enumerate(sents, start=1)], context=nodes),
             recall.statement_support),
            (JudgeRequest(task="node_usefulness", metric="goldens check", input=question, reference=answer,
                          reference_kind="expected_output", items=nodes), prec.node_usefulness)]


async def _check(judge_client: Any, q: dict[str, Any]) -> tuple[bool, str]:
    """Is the golden what it claims (answer supported by its chunks, chunks useful for its question); for an
    unanswerable one, is its chunk not useful for answering it."""
    steps = _check_requests(q["question"], q["answer"], q["style"], q["chunks"])
    if q["style"] == "unanswerable":
        req, step = steps[0]
        ans = await judge_client.ask(req, step)
        v = ans.verdicts.get("n1", {}).get("verdict")
        return (v == "no", "its chunk answers it" if v != "no" else "")
    (req, step), (req2, step2) = steps
    ans = await judge_client.ask(req, step)
    unsupported = [v for k, v in ans.verdicts.items() if v.get("verdict") != "yes"]
    if unsupported or len(ans.verdicts) < len(req.items):
        return False, "answer not supported by its chunk"
    nodes = req2.items
    ans = await judge_client.ask(req2, step2)
    useless = [i.id for i in nodes if ans.verdicts.get(i.id, {}).get("verdict") != "yes"]
    if useless:
        return False, "chunk not useful for the question"
    return True, ""


def _judge_in_use(judge: Any) -> Any:
    """``judge``, else the judge in use: ``$CONTEXTJUDGE_MODEL``, else the embedded judge (free and offline)."""
    import os  # noqa: PLC0415

    return judge if judge is not None else (os.environ.get("CONTEXTJUDGE_MODEL") or "local")

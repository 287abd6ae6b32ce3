"""Token budget: a request whose items exceed ``JudgeOptions.token_budget`` is split into sub-requests, and their
verdicts merged, so a small judge's context window is never overflowed.
"""

from __future__ import annotations

import logging

from ._protocol import Item, JudgeRequest
from ._schemas import Answer

__all__ = []

logger = logging.getLogger("contextjudge")


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _sub_request(request: JudgeRequest, items: list[Item], context: list[Item] | None = None) -> JudgeRequest:
    return request.model_copy(update={"items": items, "context": request.context if context is None else context})


def _split_by_budget(items: list[Item], budget: int) -> list[list[Item]]:
    # the common case, checked without a cost per item: everything fits (each item costs at most len // 4 + 9)
    if sum(len(it.text) for it in items) // 4 + 9 * len(items) <= budget:
        return [list(items)]
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


def _merge_parts(answers: list[Answer]) -> Answer:
    """The answers to the parts of one split request as one: every part's verdicts, and a "yes" from any part of the
    context wins (with the nodes of every part that said yes)."""
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

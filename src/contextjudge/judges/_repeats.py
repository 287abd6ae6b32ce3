"""Repeats: whether a judge answers the same every time, and the answers of k repeats of one request merged by
majority (``JudgeOptions.repeats``).
"""

from __future__ import annotations

from typing import Any

from ._protocol import JudgeRequest
from ._schemas import Answer

__all__: list[str] = []


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
    if not request.verdict_family.per_item:
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

"""The three verdict families, written once and shared by the single-turn and turn metrics.

Each core judges one retrieval (one test case, or one assistant turn) with exactly one logical judge request and
returns an ``Outcome`` with the score, the verdicts in rank or statement order, and a reason composed from the
verdicts' own short reasons (no extra judge call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._text import shorten, split_sentences, split_statements
from ..cases.testcase import RetrievedNode
from ..judges import Item, JudgeClient, JudgeRequest
from ._base import Outcome, node_items
from ._formulas import fraction, weighted_cumulative_precision

# a metric's formula: its score from its yes/no verdicts in the order judged (``BaseMetric.score_labels``)
Formula = Callable[[list[bool]], float]

__all__ = ["answer_relevance", "empty_retrieval", "node_usefulness", "sentence_relevance", "statement_support"]


def _short(text: str, n: int = 90) -> str:
    return shorten(text, n)


def _gist(reason: str, n: int = 200) -> str:
    """A verdict's reason as quoted in a metric's reason: its first sentence (what the judge said and why, figures
    included), whole when it fits, never cut inside a word."""
    first = split_sentences(reason or "")
    return shorten(first[0] if first else reason, n).rstrip(".")


# What a verdict may carry beyond yes/no and its reason: the tier that gave it (tiered.py), the fallback's reason,
# the cheap tier's verdict it replaced, with judge repeats the k votes and the share agreeing with the majority, and
# a jury's per-juror verdicts (jury.py).
_CARRIED = ("tier", "fallback_reason", "cheap_verdict", "cheap_confidence", "votes", "agreement", "jurors")


def _carried(v: dict[str, Any]) -> dict[str, Any]:
    return {k: v[k] for k in _CARRIED if k in v}


def _repeat_scores(flags: list[bool], votes: list[list[str] | None], formula: Any) -> list[float] | None:
    """With judge repeats, the score each repeat's verdicts give (items no repeat judged keep their verdict)."""
    k = max((len(v) for v in votes if v), default=0)
    if k < 2:
        return None
    return [formula([(v[r] == "yes") if v and r < len(v) else f for f, v in zip(flags, votes, strict=True)]) for r in range(k)]


def _ranks(ks: list[int]) -> str:
    """'rank 3', 'ranks 1, 2', or 'none'."""
    if not ks:
        return "none"
    return ("rank " if len(ks) == 1 else "ranks ") + ", ".join(str(k) for k in ks)


def empty_retrieval(what: str) -> Outcome:
    return Outcome(0.0, [], f"No retrieval context: the LLM saw no retrieved node (the retriever returned nothing, or a "
                   f"postprocessor, reranker or filter removed every node), so {what} is 0.", judged=False)


async def node_usefulness(client: JudgeClient, *, metric: str, input: str, reference: str | None,
                          reference_kind: str, nodes: list[RetrievedNode], history: list[dict[str, str]] | None = None,
                          formula: Formula = weighted_cumulative_precision) -> Outcome:
    """Precision-style: is each node useful for arriving at ``reference``? Score is ``formula`` of the verdicts in
    rank order (weighted cumulative precision)."""
    if not nodes:
        return empty_retrieval("precision")
    req = JudgeRequest(task="node_usefulness", metric=metric, input=input, history=history or [],
                       reference=reference, reference_kind=reference_kind, items=node_items(nodes))
    ans = await client.ask(req, client.template.generate_verdicts)
    verdicts: list[dict[str, Any]] = []
    flags: list[bool] = []
    votes: list[list[str] | None] = []
    for k, node in enumerate(nodes, start=1):
        v = ans.verdicts[f"n{k}"]
        flags.append(v["verdict"] == "yes")
        votes.append(v.get("votes"))
        verdicts.append({"rank": k, "id": f"n{k}", "node_id": node.id, "verdict": v["verdict"],
                         "reason": v.get("reason", ""), "confidence": v.get("confidence"), **_carried(v)})
    score = formula(flags)
    useful = [k for k, f in enumerate(flags, 1) if f]
    useless = [k for k, f in enumerate(flags, 1) if not f]
    target = "the actual_output" if reference_kind == "actual_output" else "the expected_output"
    if not useful:
        reason = f"None of the {len(nodes)} nodes is useful for {target}"
        if verdicts:
            reason += f" (rank 1: {_gist(verdicts[0]['reason'])})"
        reason += "."
    else:
        reason = f"{len(useful)} of {len(nodes)} nodes are useful for {target}, at {_ranks(useful)}."
        outranking = [k for k in useless if k < useful[-1]]
        if outranking:
            k = outranking[0]
            reason += (f" Irrelevant rank {k} outranks useful rank {next(u for u in useful if u > k)}"
                       f" ({_gist(verdicts[k - 1]['reason'])})")
            if len(outranking) > 1:
                reason += f"; also irrelevant above a useful node: {_ranks(outranking[1:])}"
            reason += "."
        else:
            reason += " Every useful node is ranked above every irrelevant one."
    return Outcome(score, verdicts, reason, usage=ans.usage,
                   details={"useful_ranks": useful, "irrelevant_ranks": useless},
                   repeat_scores=_repeat_scores(flags, votes, formula))


def no_statements(field: str, what: str) -> Outcome:
    return Outcome(0.0, [], f"The {field} has no statement to judge (no sentence with words in it), so {what} is 0.",
                   judged=False)


async def statement_support(client: JudgeClient, *, metric: str, input: str, reference: str,
                            nodes: list[RetrievedNode], history: list[dict[str, str]] | None = None,
                            reference_kind: str = "expected_output", formula: Formula = fraction) -> Outcome:
    """Recall-style: is each statement of ``reference`` (its sentences, split at clause boundaries) supported by the
    nodes? Score is supported / all.

    With ``reference_kind="actual_output"`` it is faithfulness: the statements are the app's own answer's."""
    what = "recall" if reference_kind == "expected_output" else "faithfulness"
    if not nodes:
        return empty_retrieval(what)
    statements = split_statements(reference)  # sentences, and the clauses of "A, and B" (``_text``)
    if not statements:
        return no_statements(reference_kind, what)
    items = [Item(id=f"s{j}", text=s) for j, s in enumerate(statements, start=1)]
    req = JudgeRequest(task="statement_support", metric=metric, input=input, history=history or [],
                       reference=reference, reference_kind=reference_kind, items=items,
                       context=node_items(nodes))
    ans = await client.ask(req, client.template.generate_verdicts)
    id_to_rank = {f"n{k}": k for k in range(1, len(nodes) + 1)}
    verdicts = []
    flags = []
    votes: list[list[str] | None] = []
    for j, s in enumerate(statements, start=1):
        v = ans.verdicts[f"s{j}"]
        yes = v["verdict"] == "yes"
        flags.append(yes)
        votes.append(v.get("votes"))
        ranks = sorted({id_to_rank[n] for n in v.get("node_ids", []) if n in id_to_rank}) if yes else []
        verdicts.append({"statement": s, "id": f"s{j}", "verdict": v["verdict"], "reason": v.get("reason", ""),
                         "supporting_ranks": ranks, "confidence": v.get("confidence"), **_carried(v)})
    score = formula(flags)
    unsupported = [v for v in verdicts if v["verdict"] != "yes"]
    reason = f"{len(statements) - len(unsupported)} of {len(statements)} statements of the {reference_kind} are " \
             "supported by the retrieval."
    if unsupported:
        shown = "; ".join(f"'{_short(v['statement'], 80)}'" for v in unsupported[:3])
        reason += f" Unsupported: {shown}" + (f" and {len(unsupported) - 3} more" if len(unsupported) > 3 else "") + "."
        if unsupported[0]["reason"]:
            why = _gist(unsupported[0]["reason"])
            reason += f" Why the first is not: {why}" + ("" if why.endswith("\u2026") else ".")
    used = sorted({r for v in verdicts for r in v["supporting_ranks"]})
    if used:
        reason += f" Supporting nodes: {_ranks(used)}."
    return Outcome(score, verdicts, reason, usage=ans.usage,
                   details={"unsupported_statements": [v["statement"] for v in unsupported],
                            "statements": statements},
                   repeat_scores=_repeat_scores(flags, votes, formula))


async def sentence_relevance(client: JudgeClient, *, metric: str, input: str, nodes: list[RetrievedNode],
                             history: list[dict[str, str]] | None = None, formula: Formula = fraction) -> Outcome:
    """Relevancy-style: is each sentence of each node relevant to the input? Score is relevant / all sentences."""
    if not nodes:
        return empty_retrieval("relevancy")
    items: list[Item] = []
    per_node: list[list[str]] = []
    for k, node in enumerate(nodes, start=1):
        sents = split_sentences(node.text)
        per_node.append(sents)
        items += [Item(id=f"n{k}.s{j}", text=s, parent=f"n{k}") for j, s in enumerate(sents, start=1)]
    verdicts: list[dict[str, Any]] = []
    ans = None
    if items:
        req = JudgeRequest(task="sentence_relevance", metric=metric, input=input, history=history or [], items=items)
        ans = await client.ask(req, client.template.generate_verdicts)
    flags: list[bool] = []
    votes: list[list[str] | None] = []
    node_rel: list[tuple[int, int, int]] = []
    for k, sents in enumerate(per_node, start=1):
        if not sents:  # an empty node is one irrelevant statement, judged by us, not the judge
            flags.append(False)
            votes.append(None)
            verdicts.append({"rank": k, "id": f"n{k}.s1", "statement": "", "verdict": "no",
                             "reason": "The node is empty.", "confidence": 0.0})
            node_rel.append((k, 0, 1))
            continue
        hits = 0
        assert ans is not None  # a node with sentences gave items, so the judge was asked
        for j, s in enumerate(sents, start=1):
            v = ans.verdicts[f"n{k}.s{j}"]
            yes = v["verdict"] == "yes"
            hits += yes
            flags.append(yes)
            votes.append(v.get("votes"))
            verdicts.append({"rank": k, "id": f"n{k}.s{j}", "statement": s, "verdict": v["verdict"],
                             "reason": v.get("reason", ""), "confidence": v.get("confidence"), **_carried(v)})
        node_rel.append((k, hits, len(sents)))
    score = formula(flags)
    empty_nodes = [k for k, h, _ in node_rel if h == 0]
    reason = f"{sum(flags)} of {len(flags)} sentences of the retrieval are relevant to the input."
    full = [k for k, h, n in node_rel if h == n]
    if full:
        reason += f" Fully relevant nodes: {_ranks(full)}."
    if empty_nodes:
        first = next((v for v in verdicts if v["rank"] == empty_nodes[0]), None)
        reason += f" Nodes with nothing relevant: {_ranks(empty_nodes)}"
        reason += f" (rank {empty_nodes[0]}: {_gist(first['reason'])})." if first and first["reason"] else "."
    return Outcome(score, verdicts, reason, usage=ans.usage if ans else None,
                   details={"node_relevance": [{"rank": k, "relevant": h, "sentences": n} for k, h, n in node_rel]},
                   judged=ans is not None, repeat_scores=_repeat_scores(flags, votes, formula))


async def answer_relevance(client: JudgeClient, *, metric: str, input: str, answer: str,
                           history: list[dict[str, str]] | None = None, formula: Formula = fraction) -> Outcome:
    """Answer relevancy: does each sentence of ``answer`` address ``input``? Score is relevant / all statements.

    One request of the verdict family ``answer_relevance``: task ``sentence_relevance`` on the wire, with the answer's
    sentences as items (ids ``s1``.., no parent node); the embedded judge answers it with its statement-vs-question
    relevance."""
    statements = split_sentences(answer)
    if not statements:
        return no_statements("actual_output", "answer relevancy")
    items = [Item(id=f"s{j}", text=s) for j, s in enumerate(statements, start=1)]
    req = JudgeRequest(task="sentence_relevance", family="answer_relevance", metric=metric, input=input,
                       history=history or [], reference=answer, reference_kind="actual_output", items=items)
    ans = await client.ask(req, client.template.generate_verdicts)
    verdicts: list[dict[str, Any]] = []
    flags: list[bool] = []
    votes: list[list[str] | None] = []
    for j, s in enumerate(statements, start=1):
        v = ans.verdicts[f"s{j}"]
        flags.append(v["verdict"] == "yes")
        votes.append(v.get("votes"))
        verdicts.append({"statement": s, "id": f"s{j}", "verdict": v["verdict"], "reason": v.get("reason", ""),
                         "confidence": v.get("confidence"), **_carried(v)})
    irrelevant = [v for v in verdicts if v["verdict"] != "yes"]
    reason = f"{len(statements) - len(irrelevant)} of {len(statements)} statements of the actual_output address " \
             "the input."
    if irrelevant:
        shown = "; ".join(f"'{_short(v['statement'], 80)}'" for v in irrelevant[:3])
        reason += f" Off the question: {shown}" + (f" and {len(irrelevant) - 3} more" if len(irrelevant) > 3 else "")
        reason += "."
        if irrelevant[0]["reason"]:
            why = _gist(irrelevant[0]["reason"])
            reason += f" Why the first is not: {why}" + ("" if why.endswith("\u2026") else ".")
    return Outcome(formula(flags), verdicts, reason, usage=ans.usage,
                   details={"irrelevant_statements": [v["statement"] for v in irrelevant], "statements": statements},
                   repeat_scores=_repeat_scores(flags, votes, formula))

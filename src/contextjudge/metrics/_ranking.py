"""The judge-free ranking metrics: hit rate, MRR, precision, recall, MAP and NDCG at k, from what the user says should
have been retrieved. No judge call, ever.

What should have been retrieved comes from the test case: ``expected_context_ids`` (chunk ids or source document
ids; a dict gives graded relevance) matched against each node's ``id`` and its metadata's source document id
(``provenance.SOURCE_DOC_KEY``, else LangChain's ``source``); else the expected texts in ``context`` (DeepEval's
ideal context, Ragas' ``reference_contexts``) matched against each node's text, exactly (after collapsing
whitespace and case) or, with ``similarity_threshold``, when difflib's ``SequenceMatcher`` ratio reaches it.

Each expected item is found once: a later node matching only items already found (the same chunk twice, a second
chunk of a relevant document) counts as not relevant at its rank, so a repeated chunk never inflates a score. A node
may find several expected items (a chunk holding two expected passages); it is then one relevant node, with the
highest grade among them.
The formulas are in ``_formulas.py``, each with its hand-computed examples.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from .._result import MetricResult
from ..cases.provenance import source_of
from ..cases.testcase import LLMTestCase, RetrievedNode
from ..errors import ConfigurationError, InvalidTestCaseError, MissingTestCaseParamsError
from ._base import BaseMetric, Outcome
from ._formulas import (
    average_precision,
    hit_rate,
    ndcg,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    weighted_cumulative_precision,
)

__all__ = ["HitRateMetric", "MAPMetric", "MRRMetric", "NDCGMetric", "PrecisionAtKMetric", "RankedPrecisionMetric",
           "RankingMetric", "RecallAtKMetric", "ranked_relevance"]

NO_JUDGE = "no-judge"  # the judge identity a ranking result records (trend compares identities)


class _NoJudge:
    identity = NO_JUDGE
    name = None


def _norm(text: str) -> str:
    return " ".join((text or "").lower().split())


def _node_keys(node: RetrievedNode) -> list[str]:
    keys = [node.id] if node.id else []
    doc, _ = source_of(node.metadata)
    if doc and doc not in keys:
        keys.append(doc)
    return keys


def ranked_relevance(tc: LLMTestCase, similarity_threshold: float | None = None,
                     ) -> tuple[list[float], list[float], str, list[list[str]]]:
    """(the relevance grade of each retrieved node in rank order, the grades of every expected item, how they were
    matched ("ids" or "texts"), and per node the expected items it found).

    Each expected item is credited to the first node that matches it; a later match of the same item is a 0."""
    nodes = tc.retrieval_context or []
    found: set[str] = set()
    grades: list[float] = []
    hits: list[list[str]] = []
    if tc.expected_context_ids is not None:
        expected = (dict(tc.expected_context_ids) if isinstance(tc.expected_context_ids, dict)
                    else dict.fromkeys(tc.expected_context_ids, 1.0))
        for node in nodes:
            new = [k for k in _node_keys(node) if k in expected and k not in found and expected[k] > 0]
            found.update(new)
            grades.append(max((expected[k] for k in new), default=0.0))
            hits.append(new)
        return grades, [g for g in expected.values() if g > 0], "ids", hits
    texts = list(dict.fromkeys(_norm(t) for t in (tc.context or []) if _norm(t)))
    wanted = set(texts)
    for node in nodes:
        text = _norm(node.text)
        if similarity_threshold is None:  # exact: one look-up per node
            new = [text] if text in wanted and text not in found else []
        else:  # a ratio per (expected text, node) pair
            new = [t for t in texts if t not in found and difflib.SequenceMatcher(
                None, t, text, autojunk=False).ratio() >= similarity_threshold]
        found.update(new)
        grades.append(1.0 if new else 0.0)
        hits.append(new)
    return grades, [1.0] * len(texts), "texts", hits


class RankingMetric(BaseMetric):
    """A judge-free ranking metric: no ``model``, no judge call, the same result, store and report as the others.

    ``k``: the cut-off (None: the whole retrieval). ``similarity_threshold``: match expected texts by
    ``difflib.SequenceMatcher`` ratio >= this (0-1) instead of exactly. ``model`` is accepted and ignored, so
    ``metrics.from_keys`` and the CLI can build every metric the same way.
    """

    needs_judge: ClassVar[bool] = False
    required_params = ("input", "retrieval_context")
    short: ClassVar[str] = ""
    """The name before a cut-off ("Precision" of "Precision@5"); empty: the metric's ``name``."""

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 strict_mode: bool = False, async_mode: bool = True, verbose_mode: bool = False,
                 evaluation_template: Any = None, *, k: int | None = None,
                 similarity_threshold: float | None = None, **_: Any) -> None:
        super().__init__(threshold=threshold, model=None, include_reason=include_reason, strict_mode=strict_mode,
                         async_mode=async_mode, verbose_mode=verbose_mode)
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ConfigurationError(f"{self.name}: k must be a whole number >= 1 (or None for the whole "
                                     f"retrieval), got {k!r}.")
        if similarity_threshold is not None and not 0.0 < float(similarity_threshold) <= 1.0:
            raise ConfigurationError(f"{self.name}: similarity_threshold must be in (0, 1], got "
                                     f"{similarity_threshold!r}.")
        self.k = k
        self.similarity_threshold = None if similarity_threshold is None else float(similarity_threshold)
        if k is not None:
            self.name = f"{self.short or type(self).name}@{k}"  # type: ignore[misc]  # per instance: its results' name

    @property
    def model(self) -> None:
        return None

    @property
    def evaluation_model(self) -> None:  # type: ignore[override]
        return None

    def check(self, test_case: Any) -> None:
        super().check(test_case)
        ids = test_case.expected_context_ids
        if ids is None and not test_case.context:
            raise MissingTestCaseParamsError(self.name, ["expected_context_ids"])
        if ids is not None and not ids:
            raise InvalidTestCaseError(
                f"{self.name}: expected_context_ids is empty, so there is nothing the retriever should have found "
                f"and {self.name} is undefined. List the ids that should come back, or leave this case out of the "
                "ranking metrics.", field="expected_context_ids")
        if isinstance(ids, dict) and not any(g > 0 for g in ids.values()):
            raise InvalidTestCaseError(
                f"{self.name}: every id in expected_context_ids has relevance grade 0 (not relevant: "
                f"{_listed(ids)}), so there is nothing the retriever should have found and {self.name} is undefined. "
                "Give the ids that should come back a grade > 0 (e.g. {'doc-1': 1}), or leave this case out of the "
                "ranking metrics.", field="expected_context_ids")

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _run(self, test_case: Any) -> MetricResult:
        self.check(test_case)
        grades, expected, how, hits = ranked_relevance(test_case, self.similarity_threshold)
        k = self.k or max(len(grades), 1)
        score = self.formula(grades, expected, k)
        top = grades[:k]
        relevant = [r for r, g in enumerate(top, 1) if g > 0]
        where = f"top {k}" if self.k else "the retrieval"
        if not grades:
            reason = f"No retrieval context: nothing was retrieved, so {self.name} is 0."
        elif not relevant:
            reason = (f"None of the {len(expected)} expected {how[:-1]}s is in {where} ({len(top)} nodes), so "
                      f"{self.name} is 0.")
        else:
            got = len({x for h in hits[:k] for x in h})
            reason = (f"{self.name} {score:.3f}: {got} of {len(expected)} expected {how[:-1]}s found in {where}, at "
                      f"rank{'s' if len(relevant) > 1 else ''} {', '.join(map(str, relevant))}.")
            repeated = _repeated_ranks(test_case, k)
            dup = [r for r, h in enumerate(hits[:k], 1) if not h and grades[r - 1] == 0 and r in repeated]
            if dup:
                reason += f" Rank{'s' if len(dup) > 1 else ''} {', '.join(map(str, dup))} repeat{'' if len(dup) > 1 else 's'} an item already found (not counted)."
        verdicts = [{"rank": r, "verdict": "yes" if g > 0 else "no", "grade": g, "matched": h}
                    for r, (g, h) in enumerate(zip(grades, hits, strict=True), 1)]
        outcome = Outcome(score, verdicts, reason, judged=False,
                          details={"k": self.k, "matched_by": how, "relevant_ranks": relevant,
                                   "expected": len(expected)})
        return await self._finish(outcome, _NoJudge())  # type: ignore[arg-type]


def _repeated_ranks(tc: LLMTestCase, upto: int) -> set[int]:
    """The ranks (1-based, up to ``upto``) whose node matches something (an id, a source document id or its text) an
    earlier node already matched: one pass over the nodes."""
    seen: set[str] = set()
    out: set[int] = set()
    for r, node in enumerate((tc.retrieval_context or [])[:upto], 1):
        keys = {*_node_keys(node), _norm(node.text)}
        if keys & seen:
            out.add(r)
        seen |= keys
    return out


def _listed(ids: dict[str, float], most: int = 5) -> str:
    names = list(ids)
    return ", ".join(repr(n) for n in names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


class HitRateMetric(RankingMetric):
    """1 when any expected item is in the top k, else 0."""

    name = "Hit Rate"
    key = "hit_rate"
    aliases = ("hit", "hitrate")

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return hit_rate(grades, k)


class MRRMetric(RankingMetric):
    """1 / the rank of the first expected item in the top k (0 when none); its mean over cases is the MRR."""

    name = "MRR"
    key = "mrr"
    aliases = ("mean_reciprocal_rank",)

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return reciprocal_rank(grades, k)


class PrecisionAtKMetric(RankingMetric):
    """Relevant nodes in the top k / the nodes retrieved there (at most k)."""

    name = "Precision@K"
    short = "Precision"
    key = "precision_at_k"
    aliases = ("precision@k",)

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return precision_at_k(grades, k)


class RecallAtKMetric(RankingMetric):
    """Expected items found in the top k / all expected items."""

    name = "Recall@K"
    short = "Recall"
    key = "recall_at_k"
    aliases = ("recall@k",)

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return recall_at_k(grades, len(expected), k)


class MAPMetric(RankingMetric):
    """Average precision at k (precision at each relevant rank, over all expected items); its mean over cases is
    the MAP."""

    name = "MAP"
    key = "map"

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return average_precision(grades, len(expected), k)


class NDCGMetric(RankingMetric):
    """Normalised discounted cumulative gain at k, with the graded relevance when given (linear gain)."""

    name = "NDCG"
    key = "ndcg"
    aliases = ("ndcg@k",)

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return ndcg(grades, expected, k)


class RankedPrecisionMetric(RankingMetric):
    """Contextual precision's formula (weighted cumulative precision: the precision at each relevant rank, averaged
    over the relevant nodes retrieved) with relevance from labels instead of a judge. What Ragas' non-LLM and
    ID-based context precision faces score with; not a ``from_keys`` key (MAP is the IR form)."""

    name = "Ranked Precision"
    key = "ranked_precision"

    def formula(self, grades: list[float], expected: list[float], k: int) -> float:
        return weighted_cumulative_precision([g > 0 for g in grades[:k]])

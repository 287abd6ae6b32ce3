"""The embedded judge's verdicts: a cross-encoder reads the question (or statement) and each text together.

Per item, one probability that the answer is yes, from the head of its task (``_encoder.TASKS``):
- node_usefulness without a reference, and sentence_relevance: "relevance", the question alone (for a later turn
  of a conversation, the previous user turn and the question);
- node_usefulness with a reference (the expected output, the actual output, or an expected outcome): "answer", the
  question followed by ``Answer:`` and the reference;
- statement_support: "support", the statement; a statement is then also held to its numbers: the probability
  shrinks with the share of them the node lacks (``numbers``), a rule, not the model. Names are the model's to read:
  "the nation's capital" supports "the capital of Australia" in a text about Australia, which no word rule sees.
A node longer than one window is read in overlapping windows; its verdict is its best window's, and the reason
quotes that window. A verdict depends only on its own item and the question: never on the other nodes of the
request, their number or their order. The verdict is yes at probability >= 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..._text import shorten, split_sentences
from ..protocol import JudgeRequest
from ._cache import BatchCache
from ._encoder import TASKS, CrossEncoderModel, Window
from ._lexical import content_tokens, specifics, specifics_in, token_recall

__all__ = ["Scorer", "approx_tokens"]

SUPPORT_CANDIDATES = 4  # nodes read per statement: the ones sharing most of its words (all when there are fewer)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


def numbers(text: str) -> frozenset[str]:
    """The numbers a statement asserts (digits, or number words up to twenty, as digits)."""
    return frozenset(x for x in specifics(text) if x[:1].isdigit())


def _listed(words: list[str], n: int = 4) -> str:
    shown = [f"'{w}'" for w in words[:n]]
    more = f" and {len(words) - n} more" if len(words) > n else ""
    return (", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]) + more


def _round(x: float) -> float:
    # Rounded so that last-bit differences in the maths (batch shapes, BLAS paths) never change a cached verdict.
    return float(round(float(x), 4))


def _closest_sentence(window: str, words: frozenset[str]) -> str:
    """The sentence of a window that shares most words with the query (the first on a tie): what a reason quotes."""
    sents = split_sentences(window) or [window]
    return max(sents, key=lambda s: len(content_tokens(s) & words))


@dataclass(frozen=True)
class Read:
    """A text as the model read it against one query: the probability of its best window, and the sentence of that
    window closest to the query (what the reason quotes)."""

    prob: float
    quote: str
    windows: int


@dataclass
class Scorer:
    model: CrossEncoderModel
    cache: BatchCache  # (query ids, window ids) -> logits of every task

    def __post_init__(self) -> None:
        self._windows = lru_cache(maxsize=20_000)(self.model.windows)
        self._query = lru_cache(maxsize=20_000)(self.model.query_ids)

    # ------------------------------------------------------------------------------------------- reading
    def read(self, task: str, query: str, texts: list[str]) -> list[Read]:
        """Each text's best window for ``query`` under the ``task`` head."""
        head = TASKS.index(task)
        q = self._query(query)
        wins: list[list[Window]] = [self._windows(t, len(q)) for t in texts]
        logits = self.cache.get_many([(q, w.ids) for ws in wins for w in ws])
        words = content_tokens(query)
        out = []
        for t, ws in zip(texts, wins):
            scores = [float(logits[(q, w.ids)][head]) for w in ws]
            best = int(np.argmax(scores))
            out.append(Read(_round(_sigmoid(np.array(scores[best]))),
                            _closest_sentence(t[ws[best].start:ws[best].end], words), len(ws)))
        return out

    @staticmethod
    def is_turn(req: JudgeRequest) -> bool:
        """Whether the question is a later turn of a conversation (``query_text`` then joins two user turns)."""
        return any(h.get("role") == "user" for h in req.history)

    @staticmethod
    def query_text(req: JudgeRequest) -> str:
        """The question, preceded by the previous user turn when there is a conversation (resolves "and its price?")."""
        prev = [h.get("content", "") for h in req.history if h.get("role") == "user"]
        return f"{prev[-1]} {req.input}" if prev else req.input

    # ------------------------------------------------------------------------------------------- tasks
    def answer(self, req: JudgeRequest) -> dict[str, Any]:
        if req.task == "node_usefulness":
            return {"verdicts": self._node_usefulness(req)}
        if req.task == "sentence_relevance":
            return {"verdicts": self._sentence_relevance(req)}
        if req.task == "statement_support":
            return {"verdicts": self._statement_support(req)}
        if req.task == "rubric_recall":
            return self._rubric(req)
        raise ValueError(f"unknown task {req.task!r}")

    def _node_usefulness(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        q = self.query_text(req)
        if req.reference:
            reads = self.read("answer", f"{q} Answer: {req.reference}", [it.text for it in req.items])
        else:
            reads = self.read("relevance", q, [it.text for it in req.items])
        target = {"actual_output": "the actual output", "expected_output": "the expected output"}.get(
            req.reference_kind or "", "the expected outcome") if req.reference else "the input"
        qtok = content_tokens(q)
        out = []
        for it, r in zip(req.items, reads):
            yes = r.prob >= 0.5
            if req.reference:
                what = f"holds what {target} says" if yes else f"does not hold what {target} says"
            else:
                what = "answers the question" if yes else "does not answer the question"
            where = f"its best passage (of {r.windows} read)" if r.windows > 1 else "it"
            shared = sorted(qtok & content_tokens(it.text))
            reason = (f"{'Useful' if yes else 'Not useful'} for {target}: the judge reads that {where} {what}: "
                      f"'{shorten(r.quote, 160)}'; it shares {len(shared)} of the question's {len(qtok)} content words"
                      + (f" ({', '.join(shared[:5])})" if shared else "") + f" (confidence {r.prob:.2f}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": r.prob})
        return out

    def _sentence_relevance(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        q = self.query_text(req)
        reads = self.read("relevance", q, [it.text for it in req.items])
        qtok = content_tokens(q)
        out = []
        for it, r in zip(req.items, reads):
            yes = r.prob >= 0.5
            shared = sorted(qtok & content_tokens(it.text))
            reason = (f"{'Relevant' if yes else 'Not relevant'} to the input: the judge reads it as "
                      f"{'bearing' if yes else 'not bearing'} on the question; it shares {len(shared)} of the "
                      f"question's {len(qtok)} content words" + (f" ({', '.join(shared[:6])})" if shared else "")
                      + f" (confidence {r.prob:.2f}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": r.prob})
        return out

    def support(self, statements: list[str], nodes: list[str]) -> tuple[np.ndarray, list[list[Read | None]]]:
        """(probability matrix (statements, nodes), the reads): each statement against the nodes sharing most of its
        words, scaled by the share of its numbers and names the node lacks. Nodes not read get 0."""
        conf = np.zeros((len(statements), len(nodes)))
        reads: list[list[Read | None]] = []
        ntok = [content_tokens(n) for n in nodes]
        for i, st in enumerate(statements):
            stok = content_tokens(st)
            rec = [token_recall(stok, t) for t in ntok]
            cand = sorted(range(len(nodes)), key=lambda j: (-rec[j], j))[:SUPPORT_CANDIDATES]
            got = self.read("support", st, [nodes[j] for j in cand])
            row: list[Read | None] = [None] * len(nodes)
            spec = numbers(st)
            for j, r in zip(cand, got):
                miss = len(specifics_in(spec, nodes[j])[1]) / len(spec) if spec else 0.0
                conf[i, j] = _round(r.prob * (1.0 - miss))
                row[j] = r
            reads.append(row)
        return conf, reads

    def _statement_support(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        if not req.context:
            return [{"id": it.id, "verdict": "no", "reason": "There is no context to support it.", "confidence": 0.0,
                     "node_ids": []} for it in req.items]
        conf, reads = self.support([it.text for it in req.items], [c.text for c in req.context])
        out = []
        for i, it in enumerate(req.items):
            j = int(np.argmax(conf[i]))
            c = float(conf[i, j])
            yes = c >= 0.5
            ids = [req.context[k].id for k in range(len(req.context)) if conf[i, k] >= 0.5] if yes else []
            best = req.context[j]
            r = reads[i][j]
            missing = sorted(specifics_in(numbers(it.text), best.text)[1])
            lacks = f"its closest node, {best.id}, does not mention {_listed(missing)}; " if missing and not yes else ""
            quote = shorten(r.quote, 160) if r else ""
            reason = (f"{'Supported' if yes else 'Not supported'}: {lacks}the judge reads "
                      f"{'that node' if lacks else f'its closest node, {best.id},'} as "
                      f"{'stating' if yes else 'not stating'} it: '{quote}' (confidence {c:.2f}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c,
                        "node_ids": ids})
        return out

    def _rubric(self, req: JudgeRequest) -> dict[str, Any]:
        # How much of the reference the answer covers: the mean support of the reference's sentences by the answer.
        statements = split_sentences(req.reference or "")
        answer = req.answer or ""
        if not statements or not answer.strip():
            return {"score": 0.0, "reason": "There is no expected_output or no actual_output to compare."}
        conf, _ = self.support(statements, [answer])
        score = _round(float(np.mean(conf[:, 0])))
        covered = int(np.sum(conf[:, 0] >= 0.5))
        return {"score": score, "reason": f"The actual_output covers {covered} of the expected_output's "
                f"{len(statements)} sentences (mean support {score:.2f})."}


def approx_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))

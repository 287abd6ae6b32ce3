"""The embedded judge's evidence and its calibrated combination: from a JudgeRequest to verdicts with confidences.

Evidence per item (all deterministic):
- semantic: cosine between e5 "query:" vectors (the question, or the question with the reference) and the "passage:"
  vector of the node (its first ``embed_chars`` characters; see LocalJudge for why it is truncated);
- lexical: the share of the question's (or statement's, or reference's) content words found in the text, and whether
  a short reference answer occurs in it verbatim.
A logistic model per task turns the evidence into the confidence that the answer is yes; the verdict is yes at
confidence >= 0.5. The weights are fitted on the development data (see CALIBRATION below).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._text import shorten, split_sentences
from .._protocol import Item, JudgeRequest
from ._cross import CrossEncoder
from ._embeddings import EmbeddingCache
from ._lexical import answer_occurs, content_tokens, lead_phrase, lead_tokens, specifics, specifics_in, token_recall

__all__ = ["CALIBRATION", "CALIBRATION_VERSION", "Scorer"]

# Logistic weights, feature order as in the *_FEATURES tuples. Fitted by benchmarks/calibrate_local.py on the
# development files of ../shared/data only (HotpotQA first 200 questions, TREC DL all 68, ClapNQ all 143, MTRAG first
# 150 turns), embed_chars=256: L2-regularised (1e-3) logistic regression by Newton's method, each data set weighted
# equally except TREC DL, which counts 3 times in the no-reference model (see SET_WEIGHT in that script); gold labels
# as described there. Every feature is of one node and the question (and reference) alone: a node's verdict never
# depends on the other nodes of its request, nor on their number or order (issue 14). Few, simple features on
# purpose: a held-out half checks these figures.
#   python benchmarks/calibrate_local.py --data-dir ../shared/data --rows hotpotqa=200 mtrag=150 --trec-weight 3
CALIBRATION_VERSION = "2026-11-24.1"
CALIBRATION: dict[str, list[float]] = {
    # node_usefulness with a reference: bias, cos(question), cos(question + reference), short answer occurs,
    # reference word recall, question word recall, and the share of the node's lead phrase (its subject: "Harvey
    # Pekar (1939-2010) was ...") that the question names.
    # A short reference (a factoid answer, <= SHORT_REFERENCE_WORDS words) and a long one (a written answer) differ:
    # only a short one can be looked up verbatim, so each has its own weights.
    # HotpotQA. The bias includes a decision offset of +0.847 (fitted bias -31.292): yes at a fitted probability
    # >= 0.30 rather than 0.5, the threshold on a 0.05 grid whose verdicts give ContextualPrecision scores closest to
    # the gold ones (missing one of two needed nodes costs a precision score more than a false yes).
    "node_short": [-30.445, -15.904, 49.765, 2.659, 0.004, 0.434, 1.777],
    "node_long": [-61.026, 7.982, 57.022, 0.000, 18.003, 7.225, 3.578],  # ClapNQ, MTRAG
    # node_usefulness without a reference, and sentence_relevance: bias, cos(question), question word recall (of the
    # sentence, for sentence_relevance), and for a later turn of a conversation (the query then joins two user
    # turns) a flag and its products with the two. All four data sets.
    "node_noref": [-20.846, 23.390, -0.106, -17.992, 20.191, 11.507],
    # statement_support: bias, cos(statement, node), statement word recall in node. ClapNQ, MTRAG. The confidence is
    # then scaled by the share of the statement's numbers and names the node holds (see Scorer._support_conf).
    "support": [-35.653, 43.293, 4.901],
    # sentence_relevance of the app's own answer's statements (answer relevancy): bias, cos(question, statement),
    # question word recall. HAND-SET, not fitted (issue 38): e5 puts an on-topic answer statement at cos ~0.78-0.89
    # to its question and small talk or another topic at ~0.70-0.80, so the line sits at 0.775 with the question's
    # words as the tie-breaker. `python benchmarks/judge_agreement.py` measures it; refit with the other weights.
    "answer_relevance": [-46.5, 60.0, 6.0],
}
# The stacked judge (a cross-encoder reads the pair: _cross.py): the same features plus the cross-encoder's logits,
# in one logistic model per task, fitted by benchmarks/calibrate_local.py --cross the same way (CROSS_*_FEATURES).
CROSS_CALIBRATION: dict[str, list[float]] = {
    # python benchmarks/calibrate_local.py --cross --rows hotpotqa=40 clapnq=40 mtrag=40 (TREC DL: all 68 rows, counted
    # twice); node_short's bias includes the decision offset +0.405 (as node_short's above)
    "node_short": [-27.199, 3.787, 24.709, 2.765, -0.147, 1.527, 1.796, 2.107, -1.919],
    "node_long": [-86.438, 40.789, 54.931, 0.000, 18.683, 5.564, 4.752, 0.306, -0.439],
    "node_noref": [-18.421, 20.766, -0.083, -34.106, 37.892, 15.198, 0.382, -0.741],
    "sentence": [-24.274, 0.189, 0.112, 27.709, 2.390, 1.475],
    "support": [-39.844, 48.326, 4.540, -0.156],
}
CROSS_NODE_REF_FEATURES = ("bias", "cos_q", "cos_qr", "answer_occurs", "ref_recall", "q_recall", "lead_q",
                           "x_answer", "x_relevance")
CROSS_NODE_NOREF_FEATURES = ("bias", "cos_q", "q_recall", "turn", "turn_cos_q", "turn_q_recall", "x_relevance",
                             "turn_x_relevance")
CROSS_SENTENCE_FEATURES = ("bias", "x_sentence", "x_relevance_of_node", "cos_q_of_node", "turn", "turn_x_sentence")
CROSS_SUPPORT_FEATURES = ("bias", "cos_s", "s_recall", "x_support")
NODE_REF_FEATURES = ("bias", "cos_q", "cos_qr", "answer_occurs", "ref_recall", "q_recall", "lead_q")
NODE_NOREF_FEATURES = ("bias", "cos_q", "q_recall", "turn", "turn_cos_q", "turn_q_recall")
SHORT_REFERENCE_WORDS = 10
SUPPORT_FEATURES = ("bias", "cos_s", "s_recall")


def node_model(reference: str | None) -> str:
    """Which weights judge a node: no reference, a short (factoid) reference, or a long one."""
    if not reference:
        return "node_noref"
    return "node_short" if len(reference.split()) <= SHORT_REFERENCE_WORDS else "node_long"


def noref_rows(cos_q: np.ndarray, q_rec: np.ndarray, turn: bool) -> np.ndarray:
    """Feature rows of NODE_NOREF_FEATURES. A later turn's query joins two user turns, so its similarities and word
    overlaps run on another scale than a lone question's: the turn flag and its products let the model say so."""
    t = 1.0 if turn else 0.0
    return np.column_stack([np.ones(len(cos_q)), cos_q, q_rec, np.full(len(cos_q), t), t * cos_q, t * q_rec])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


def _weight(specific: frozenset[str]) -> float:
    return float(sum(2.0 if x[:1].isdigit() else 1.0 for x in specific))


def _listed(words: list[str], n: int = 4) -> str:
    shown = [f"'{w}'" for w in words[:n]]
    more = f" and {len(words) - n} more" if len(words) > n else ""
    return (", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0]) + more


def _short(text: str, n: int = 80) -> str:
    return shorten(text, n)


def _round(x: float) -> float:
    # Rounded so that last-bit differences in vector maths never change a cached or compared verdict.
    return float(round(float(x), 4))


@dataclass
class Scorer:
    cache: EmbeddingCache
    embed_chars: int = 256
    cross: CrossEncoder | None = None  # the stacked judge when set (CROSS_CALIBRATION), the bi-encoder's alone when not
    weights: dict[str, list[float]] | None = None  # overrides the calibration (benchmarks fit and compare with it)
    _xcache: OrderedDict[tuple[str, str, str], float] = field(default_factory=OrderedDict)
    _xlock: threading.Lock = field(default_factory=threading.Lock)

    def w(self, model: str) -> np.ndarray:
        table = self.weights or (CROSS_CALIBRATION if self.cross is not None else CALIBRATION)
        return np.array(table[model])

    def cross_logits(self, task: str, queries: list[str], texts: list[str]) -> np.ndarray:
        """The cross-encoder's ``task`` logit of each (query, text) pair, each pair read once per process (LRU)."""
        assert self.cross is not None
        keys = [(task, q, t) for q, t in zip(queries, texts, strict=True)]
        with self._xlock:
            got = {k: self._xcache[k] for k in keys if k in self._xcache}
        todo = [k for k in dict.fromkeys(keys) if k not in got]
        if todo:
            vals = self.cross.logits(task, [k[1] for k in todo], [k[2] for k in todo])
            with self._xlock:
                for k, v in zip(todo, vals.tolist(), strict=True):
                    got[k] = self._xcache[k] = float(v)
                while len(self._xcache) > 200_000:
                    self._xcache.popitem(last=False)
        return np.array([got[k] for k in keys], dtype=np.float64)

    # ------------------------------------------------------------------------------------------- text units
    def embed_text(self, text: str) -> str:
        """The part of a node that is embedded: its first ``embed_chars`` characters, cut at a word boundary."""
        text = " ".join(text.split())
        if self.embed_chars and len(text) > self.embed_chars:
            cut = text.rfind(" ", 0, self.embed_chars)
            text = text[: cut if cut > self.embed_chars // 2 else self.embed_chars]
        return text

    @staticmethod
    def is_turn(req: JudgeRequest) -> bool:
        """Whether the question is a later turn of a conversation (``query_text`` then joins two user turns)."""
        return any(h.get("role") == "user" for h in req.history)

    @staticmethod
    def query_text(req: JudgeRequest) -> str:
        """The question, preceded by the previous user turn when there is a conversation (resolves "and its price?")."""
        prev = [h.get("content", "") for h in req.history if h.get("role") == "user"]
        return f"{prev[-1]} {req.input}" if prev else req.input

    def _vectors(self, queries: list[str], passages: list[str],
                 ahead: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Unit vectors of ``queries`` and ``passages`` (each cut by ``embed_text``), embedded in one go so queries and
        passages share batches; ``ahead`` are queries a later request will need, embedded in the same batch."""
        qkeys = [("query", q) for q in queries]
        pkeys = [("passage", self.embed_text(t)) for t in passages]
        found = self.cache.ensure(qkeys + pkeys + [("query", q) for q in ahead or []])

        def stack(keys: list[tuple[str, str]]) -> np.ndarray:
            return np.stack([found[k] for k in keys]) if keys else np.zeros((0, 1), dtype=np.float32)

        return stack(qkeys), stack(pkeys)

    # ------------------------------------------------------------------------------------------- features
    def node_features(self, req: JudgeRequest, texts: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
        """Feature rows for ``texts`` judged against the request's question (and reference when there is one)."""
        q = self.query_text(req)
        queries = [q] + ([f"{q} {req.reference}"] if req.reference else [])
        # The expected output's sentences are what ContextualRecall asks about next (statement_support): embedding
        # them in this batch saves the model a round for a few short texts.
        ahead = split_sentences(req.reference) if req.reference and req.reference_kind == "expected_output" else []
        qv, pv = self._vectors(queries, texts, ahead)
        cos_q = pv @ qv[0]
        qtok = content_tokens(q)
        ttok = [content_tokens(t) for t in texts]
        q_rec = np.array([token_recall(qtok, t) for t in ttok])
        info: dict[str, Any] = {"cos_q": cos_q, "q_recall": q_rec, "qtok": qtok}
        xrel = self.cross_logits("relevance", [q] * len(texts), texts) if self.cross is not None else None
        if xrel is not None:
            info["x_relevance"] = xrel
        if not req.reference:
            rows = noref_rows(cos_q, q_rec, self.is_turn(req))
            if xrel is not None:
                t = 1.0 if self.is_turn(req) else 0.0
                rows = np.column_stack([rows, xrel, t * xrel])
            return rows, info
        cos_qr = pv @ qv[1]
        rtok = content_tokens(req.reference)
        occ = np.array([1.0 if answer_occurs(req.reference, t) else 0.0 for t in texts])
        r_rec = np.array([token_recall(rtok, t) for t in ttok])
        leads = [lead_tokens(t) for t in texts]
        lead_q = np.array([token_recall(lead, qtok) for lead in leads])
        info.update(cos_qr=cos_qr, answer_occurs=occ, ref_recall=r_rec, rtok=rtok, lead_q=lead_q)
        rows = np.column_stack([np.ones(len(texts)), cos_q, cos_qr, occ, r_rec, q_rec, lead_q])
        if xrel is not None:
            xans = self.cross_logits("answer", [f"{q} Answer: {req.reference}"] * len(texts), texts)
            info["x_answer"] = xans
            rows = np.column_stack([rows, xans, xrel])
        return rows, info

    def support_features(self, statements: list[str], nodes: list[str]
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(cos, word recall, share of the statement's specifics missing, the cross-encoder's support logit or None)
        matrices of shape (statements, nodes).

        Specifics are a statement's numbers and names (``_lexical.specifics``; a number counts twice): a node on the
        statement's topic that lacks them does not support it. A statement without any misses nothing.
        """
        sv, pv = self._vectors(statements, nodes)
        cos = sv @ pv.T
        ntok = [content_tokens(n) for n in nodes]
        rec = np.array([[token_recall(content_tokens(s), t) for t in ntok] for s in statements]).reshape(cos.shape)
        miss = np.zeros(cos.shape)
        for i, st in enumerate(statements):
            spec = specifics(st)
            if spec:
                for j, n in enumerate(nodes):
                    lacking = specifics_in(spec, n)[1]
                    miss[i, j] = _weight(lacking) / _weight(spec)
        xs = None
        if self.cross is not None:
            flat = self.cross_logits("support", [st for st in statements for _ in nodes], list(nodes) * len(statements))
            xs = flat.reshape(cos.shape)
        return cos, rec, miss, xs

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
        texts = [it.text for it in req.items]
        x, info = self.node_features(req, texts)
        conf = _sigmoid(x @ self.w(node_model(req.reference)))
        target = {"actual_output": "the actual output", "expected_output": "the expected output"}.get(
            req.reference_kind or "", "the expected outcome") if req.reference else "the input"
        field = {"actual_output": "actual_output", "expected_output": "expected_output"}.get(
            req.reference_kind or "", "expected_outcome")
        out = []
        for i, it in enumerate(req.items):
            c = _round(conf[i])
            yes = c >= 0.5
            # plain words first (what the node is about, what of the question or answer it holds), figures after
            why = []
            if req.reference and info["lead_q"][i] >= 0.5:
                why.append(f"it is about '{_short(lead_phrase(it.text), 40)}', which the question names")
            if req.reference and info["answer_occurs"][i]:
                why.append(f"the answer '{_short(req.reference, 40)}' occurs in it")
            shared = sorted(info["qtok"] & content_tokens(it.text))
            why.append(f"it shares {len(shared)} of the question's {len(info['qtok'])} content words"
                       + (f" ({', '.join(shared[:5])})" if shared else ""))
            figures = [f"confidence {c:.2f}", f"similarity to the question {info['cos_q'][i]:.2f}"]
            if "x_answer" in info:
                figures.append(f"read together with the question and {field}: {_sigmoid(info['x_answer'][i]):.2f}")
            elif "x_relevance" in info:
                figures.append(f"read together with the question: {_sigmoid(info['x_relevance'][i]):.2f}")
            if req.reference:
                figures.append(f"to question + {field} {info['cos_qr'][i]:.2f}")
                if not info["answer_occurs"][i]:
                    figures.append(f"{info['ref_recall'][i]:.0%} of the {field}'s words occur")
            best = self._best_sentence(it.text, info["qtok"] | info.get("rtok", frozenset()))
            reason = (f"{'Useful' if yes else 'Not useful'} for {target}: " + "; ".join(why)
                      + (f". Best-matching sentence: '{_short(best)}'" if best else "")
                      + " (" + ", ".join(figures) + ").")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c})
        return out

    @staticmethod
    def _best_sentence(text: str, words: frozenset[str]) -> str:
        best, score = "", -1.0
        for s in split_sentences(text)[:50]:
            sc = len(content_tokens(s) & words)
            if sc > score:
                best, score = s, sc
        return best

    def _answer_relevance(self, req: JudgeRequest) -> list[dict[str, Any]]:
        """Each statement of the app's answer against the question (answer relevancy): its own similarity and word
        overlap; a statement with no words of substance ("I don't know.", "Thanks for asking!") is filler."""
        q = self.query_text(req)
        texts = [it.text for it in req.items]
        qvs, pv = self._vectors([q], texts)
        cos = pv @ qvs[0]
        qtok = content_tokens(q)
        rec = np.array([token_recall(qtok, content_tokens(t)) for t in texts])
        w = CALIBRATION["answer_relevance"]
        conf = _sigmoid(w[0] + w[1] * cos + w[2] * rec)
        out = []
        for i, it in enumerate(req.items):
            words = content_tokens(it.text)
            filler = len(words) <= 2 and rec[i] == 0 and not specifics(it.text)
            c = _round(conf[i] * (0.2 if filler else 1.0))
            yes = c >= 0.5
            shared = sorted(qtok & words)
            why = ("it is filler with no answer in it" if filler else
                   f"it shares {len(shared)} of the question's {len(qtok)} content words"
                   + (f" ({', '.join(shared[:6])})" if shared else ""))
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "confidence": c,
                        "reason": f"{'Addresses' if yes else 'Does not address'} the question: {why} (confidence "
                                  f"{c:.2f}, similarity to the question {cos[i]:.2f})."})
        return out

    def _sentence_relevance(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        if req.reference_kind == "actual_output" and not any(it.parent for it in req.items):
            return self._answer_relevance(req)
        # Each sentence is judged with its node's similarity (one vector per node, shared with the node verdicts of
        # the other metrics through the cache) and its own overlap with the question's words.
        parents: dict[str, list[Item]] = {}
        for it in req.items:
            parents.setdefault(it.parent or it.id, []).append(it)
        pids = list(parents)
        node_texts = [" ".join(s.text for s in parents[p]) for p in pids]
        q = self.query_text(req)
        qvs, pv = self._vectors([q], node_texts)
        qv = qvs[0]
        cos = pv @ qv
        cos_by_parent = dict(zip(pids, cos.tolist(), strict=True))
        qtok = content_tokens(q)
        if self.cross is not None:
            # the sentence read with the question, beside its node read with it (a sentence whose node answers the
            # question is more likely to be the part that does)
            xs = self.cross_logits("sentence", [q] * len(req.items), [it.text for it in req.items])
            xr = dict(zip(pids, self.cross_logits("relevance", [q] * len(pids), node_texts).tolist(), strict=True))
            t = 1.0 if self.is_turn(req) else 0.0
            x = np.column_stack([np.ones(len(xs)), xs, [xr[it.parent or it.id] for it in req.items],
                                 [cos_by_parent[it.parent or it.id] for it in req.items], np.full(len(xs), t), t * xs])
            confs = _sigmoid(x @ self.w("sentence"))
        else:
            x = noref_rows(np.array([cos_by_parent[it.parent or it.id] for it in req.items]),
                           np.array([token_recall(qtok, content_tokens(it.text)) for it in req.items]),
                           self.is_turn(req))
            confs = _sigmoid(x @ self.w("node_noref"))
        out = []
        for i, it in enumerate(req.items):
            cos = cos_by_parent[it.parent or it.id]
            c = _round(confs[i])
            yes = c >= 0.5
            shared = sorted(qtok & content_tokens(it.text))
            read = f", read together with the question {_sigmoid(x[i, 1]):.2f}" if self.cross is not None else ""
            reason = (f"{'Relevant' if yes else 'Not relevant'} to the input: it shares {len(shared)} of the "
                      f"question's {len(qtok)} content words" + (f" ({', '.join(shared[:6])})" if shared else "")
                      + f" (confidence {c:.2f}, similarity to the question {cos:.2f}{read}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c})
        return out

    def _support_conf(self, statements: list[str], nodes: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cos, rec, miss, xs = self.support_features(statements, nodes)
        w = self.w("support")
        # The similarity and the shared words say the node is on the statement's topic; what it asserts (its numbers
        # and names) must be there too, so the confidence shrinks with the share of them the node lacks.
        z = w[0] + w[1] * cos + w[2] * rec + (w[3] * xs if xs is not None else 0.0)
        conf = _sigmoid(z) * (1.0 - miss)
        return conf, cos, rec

    def _statement_support(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        if not req.context:
            return [{"id": it.id, "verdict": "no", "reason": "There is no context to support it.", "confidence": 0.0,
                     "node_ids": []} for it in req.items]
        conf, cos, rec = self._support_conf([it.text for it in req.items], [c.text for c in req.context])
        out = []
        for i, it in enumerate(req.items):
            j = int(np.argmax(conf[i]))
            c = _round(conf[i, j])
            yes = c >= 0.5
            ids = [req.context[k].id for k in range(len(req.context)) if conf[i, k] >= 0.5] if yes else []
            best = req.context[j]
            missing = sorted(specifics_in(specifics(it.text), best.text)[1])
            lacks = (f"its closest node, {best.id}, does not mention {_listed(missing)}; " if missing and not yes
                     else "")
            reason = (f"{'Supported' if yes else 'Not supported'}: {lacks}{rec[i, j]:.0%} of the statement's words "
                      f"occur in {'that node' if lacks else f'its closest node, {best.id}'}, whose closest sentence is "
                      f"'{_short(self._best_sentence(best.text, content_tokens(it.text)))}' "
                      f"(confidence {c:.2f}, similarity {cos[i, j]:.2f}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c,
                        "node_ids": ids})
        return out

    def _rubric(self, req: JudgeRequest) -> dict[str, Any]:
        # How much of the reference the answer covers: the mean support of the reference's sentences by the answer.
        statements = split_sentences(req.reference or "")
        answer = req.answer or ""
        if not statements or not answer.strip():
            return {"score": 0.0, "reason": "There is no expected_output or no actual_output to compare."}
        conf, cos, rec = self._support_conf(statements, [answer])
        score = _round(float(np.mean(conf[:, 0])))
        covered = int(np.sum(conf[:, 0] >= 0.5))
        return {"score": score, "reason": f"The actual_output covers {covered} of the expected_output's {len(statements)} "
                f"sentences (mean word recall {float(np.mean(rec)):.0%}, mean similarity {float(np.mean(cos)):.2f})."}


def approx_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))

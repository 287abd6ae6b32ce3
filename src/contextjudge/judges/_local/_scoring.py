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
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._text import shorten, split_sentences
from ...errors import ConfigurationError
from .._protocol import Item, JudgeRequest
from ._cross import TASKS, CrossEncoder
from ._embeddings import EmbeddingCache
from ._lexical import (
    answer_occurs,
    content_tokens,
    is_number,
    lead_phrase,
    lead_tokens,
    name_changed,
    negated_near,
    range_denied,
    specifics,
    specifics_in,
    token_recall,
    without_cues,
)

if TYPE_CHECKING:  # pragma: no cover - the registry asks this module whether it answers a family
    from .._families import VerdictFamily

__all__ = ["CALIBRATION", "CALIBRATION_VERSION", "Scorer", "unanswered"]

# Logistic weights, feature order as in the *_FEATURES tuples. Fitted by benchmarks/calibrate_local.py on the
# development files of ../shared/data only (HotpotQA first 200 questions, TREC DL all 68, ClapNQ all 143, MTRAG first
# 150 turns), embed_chars=256: L2-regularised (1e-3) logistic regression by Newton's method, each data set weighted
# equally except TREC DL, which counts 3 times in the no-reference model (see SET_WEIGHT in that script); gold labels
# as described there. Every feature is of one node and the question (and reference) alone: a node's verdict never
# depends on the other nodes of its request, nor on their number or order (issue 14). Few, simple features on
# purpose: a held-out half checks these figures.
#   python benchmarks/calibrate_local.py --data-dir ../shared/data --rows hotpotqa=200 mtrag=150 --trec-weight 3
CALIBRATION_VERSION = "2026-12-06.2"  # .1: the support forms and the negation rule of 2026-12-06 (issue 47); .2: the
# cross-encoder's help-desk stage and the stacked weights refitted for it (the stacked judge's verdicts moved)
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
    # python benchmarks/calibrate_local.py --data-dir DATA --cross --rows hotpotqa=100 clapnq=80 mtrag=80 --pairs
    #   training/out/pairs.jsonl.gz (TREC DL: all 68 rows, counted twice; 600 held-back training pairs a task, the first
    #   half of the held-back groups). Fitted on the pairs above GATE only. A node judged with a reference (node_short,
    #   node_long) keeps the bi-encoder's weights: read with the reference the cross-encoder added nothing on the
    #   development data (docs/judges.md, the ablation), so it is not run for them.
    # Refitted 2026-12-06 for the help-desk stage's weights (training/rebuild.sh's second stage), the same command with
    #   --cross (the shipped file) --write-stacked FILE; docs/judges.md, "The cross-encoder's help-desk stage".
    "node_noref": [-11.129, 12.687, 0.107, -17.915, 20.882, 11.268, 0.399, 0.491],
    "sentence": [-12.974, 15.305, -0.210, -18.405, 23.879, 12.003, 0.254, 0.271, 1.093],
    "support": [1.417, -3.056, 3.934, 0.785, -2.887],
}
CROSS_NODE_REF_FEATURES = ("bias", "cos_q", "cos_qr", "answer_occurs", "ref_recall", "q_recall", "lead_q",
                           "x_answer", "x_relevance")
CROSS_NODE_NOREF_FEATURES = ("bias", "cos_q", "q_recall", "turn", "turn_cos_q", "turn_q_recall", "x_relevance",
                             "turn_x_relevance")
# sentence_relevance: the bi-encoder's row of the sentence (NODE_NOREF_FEATURES: its node's similarity, its own word
# recall), then the sentence read with the question, its node read with it, and the turn's product
CROSS_SENTENCE_FEATURES = ("bias", "cos_q_of_node", "q_recall", "turn", "turn_cos_q", "turn_q_recall", "x_sentence",
                           "x_relevance_of_node", "turn_x_sentence")
# statement_support: the bi-encoder's, the cross-encoder's logit, and whether the node's closest sentence says "not"
# about what the statement states or the other way round (Evidence.negation_flipped, the rule's own test)
CROSS_SUPPORT_FEATURES = ("bias", "cos_s", "s_recall", "x_support", "negation_differs")
# The cross-encoder reads only what the bi-encoder does not rule out: a pair whose bi-encoder confidence (CALIBRATION)
# is above GATE is judged by the stacked model (fitted on those pairs), one below keeps it. Below it the bi-encoder
# agrees with the gold labels nearly always (benchmarks/calibrate_local.py --cross prints the share and the
# accuracy), and most of a request's nodes and sentences are there, which saves most of the cross-encoder's time.
# There is no upper bound: a bi-encoder's confident yes is where a same-topic node that does not answer, or a
# statement with one word negated, is found.
GATE = 0.02
# The cascade (model="local-cascade", LocalJudge(cross_encoder="unsure")): the cross-encoder reads only the pairs whose
# bi-encoder confidence lies inside CASCADE_BAND, where the bi-encoder is unsure; below it and above it the bi-encoder's
# verdict stands, unread. Chosen on development rows the stacked weights were fitted on (HotpotQA's first 200, the
# judge check), never on the held-out half: `python benchmarks/cascade_band.py --data-dir DATA` prints, per band, the
# share of pairs read and the verdicts that differ from the stacked judge's.
CASCADE_BAND = (0.3, 0.99)
# statement_support: what a node must at least lack (support_features) when it does not mention one of the statement's
# numbers, and when it says the opposite (its closest sentence holds NEGATION_RECALL of the statement's words and only
# one of the two is negated). Set from the open NLI sets' rates (benchmarks/support_rules.py), not fitted.
NUMBER_MISSING = 0.8
NEGATION_RECALL = 0.66  # two of three words: TaxiNLI 485 pairs, 16.3% entailed (0.8: 295, 16.9%)
NEGATION_PREFILTER = 0.5  # below this share of the statement's words in the whole node, the rule is not asked
NEGATION_FLIPPED = 0.8
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


def gated(conf: np.ndarray, band: tuple[float, float] | None = None) -> np.ndarray:
    """Indices of the bi-encoder confidences above GATE (the stacked judge), or strictly inside ``band`` (the
    cascade): the pairs the cross-encoder reads."""
    if band is None:
        return np.flatnonzero(conf > GATE)
    return np.flatnonzero((conf > band[0]) & (conf < band[1]))


@lru_cache(maxsize=100_000)
def _negation_flipped(statement: str, node: str, words: frozenset[str]) -> bool:
    best = Evidence._best_sentence(node, words)
    bwords = content_tokens(best)
    # the statement's own "cannot" / "never" is what may differ, not a word the sentence must hold
    return (token_recall(without_cues(words), bwords) >= NEGATION_RECALL
            and negated_near(statement, bwords) != negated_near(best, words))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


def _weight(specific: frozenset[str]) -> float:
    return float(sum(2.0 if is_number(x) else 1.0 for x in specific))


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
class Evidence:
    """What the judge knows of a text and its question, reference or statement: the bi-encoder's feature rows, the
    cross-encoder's logits (each pair read once per process) and the stacked models' rows (Scorer judges with them)."""

    cache: EmbeddingCache
    embed_chars: int = 256
    cross: CrossEncoder | None = None  # the stacked judge when set (CROSS_CALIBRATION), the bi-encoder's alone when not
    weights: dict[str, list[float]] | None = None  # overrides the calibration (benchmarks fit and compare with it)
    band: tuple[float, float] | None = None  # the cascade's (CASCADE_BAND): read only inside it; None reads above GATE
    _xcache: OrderedDict[tuple[str, str, str], float] = field(default_factory=OrderedDict)
    _xlock: threading.Lock = field(default_factory=threading.Lock)

    def w(self, model: str) -> np.ndarray:
        table = self.weights or (CROSS_CALIBRATION if self.cross is not None else CALIBRATION)
        return np.array(table[model])

    def bi_weights(self, model: str) -> np.ndarray:
        """The bi-encoder's weights: the verdict's without the cross-encoder (``w``), and with it CALIBRATION's
        always, which decide what the cross-encoder reads (``gated``)."""
        return self.w(model) if self.cross is None else np.array(CALIBRATION[model])

    def gate(self, conf: np.ndarray) -> np.ndarray:
        """Indices of the bi-encoder confidences ``conf`` whose pairs the cross-encoder reads (``gated``)."""
        return gated(conf, self.band)

    def bi_conf(self, model: str, rows: np.ndarray) -> np.ndarray:
        """The bi-encoder's confidence of each row of ``model``'s features."""
        return _sigmoid(rows @ self.bi_weights(model))

    def support_bi_conf(self, cos: np.ndarray, rec: np.ndarray, miss: np.ndarray) -> np.ndarray:
        """The bi-encoder's confidence of statement support (``support_features``' matrices): the similarity and the
        shared words say the node is on the statement's topic; what it asserts (its numbers and names) must be there
        too, so the confidence shrinks with the share of them the node lacks."""
        w = self.bi_weights("support")
        return _sigmoid(w[0] + w[1] * cos + w[2] * rec) * (1.0 - miss)

    def cross_logits(self, task: str, queries: list[str], texts: list[str]) -> np.ndarray:
        """The cross-encoder's ``task`` logit of each (query, text) pair, each pair read once per process (LRU): one
        reading gives every head's logit, and all of them are kept, so another task's read of the same pair is free."""
        assert self.cross is not None
        keys = [(task, q, t) for q, t in zip(queries, texts, strict=True)]
        with self._xlock:
            got = {k: self._xcache[k] for k in keys if k in self._xcache}
        todo = [k for k in dict.fromkeys(keys) if k not in got]
        if todo:
            vals = self.cross.logits_all([k[1] for k in todo], [k[2] for k in todo])
            with self._xlock:
                for k, row in zip(todo, vals.tolist(), strict=True):
                    for name, v in zip(TASKS, row, strict=True):
                        self._xcache[(name, k[1], k[2])] = float(v)
                    got[k] = self._xcache[k]
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
        if not req.reference:
            return noref_rows(cos_q, q_rec, self.is_turn(req)), info
        cos_qr = pv @ qv[1]
        rtok = content_tokens(req.reference)
        occ = np.array([1.0 if answer_occurs(req.reference, t) else 0.0 for t in texts])
        r_rec = np.array([token_recall(rtok, t) for t in ttok])
        leads = [lead_tokens(t) for t in texts]
        lead_q = np.array([token_recall(lead, qtok) for lead in leads])
        info.update(cos_qr=cos_qr, answer_occurs=occ, ref_recall=r_rec, rtok=rtok, lead_q=lead_q)
        return np.column_stack([np.ones(len(texts)), cos_q, cos_qr, occ, r_rec, q_rec, lead_q]), info

    def node_cross_rows(self, req: JudgeRequest, texts: list[str], rows: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """The stacked model's rows (CROSS_NODE_*_FEATURES) of ``texts``: their bi-encoder ``rows`` and the
        cross-encoder's logits of each text read with the question (and with the reference when there is one)."""
        q = self.query_text(req)
        xrel = self.cross_logits("relevance", [q] * len(texts), texts)
        if not req.reference:
            t = 1.0 if self.is_turn(req) else 0.0
            return np.column_stack([rows, xrel, t * xrel]), {"x_relevance": xrel}
        xans = self.cross_logits("answer", [f"{q} Answer: {req.reference}"] * len(texts), texts)
        return np.column_stack([rows, xans, xrel]), {"x_relevance": xrel, "x_answer": xans}

    def support_features(self, statements: list[str], nodes: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cos, word recall, how much the node lacks) matrices of shape (statements, nodes); the confidence of support
        is scaled by one minus the third (``support_bi_conf``, and the stacked model's in ``Scorer._support_conf``).

        What a node lacks: the share of the statement's specifics it does not mention (``_lexical.specifics``: numbers
        and names, a number counting twice; an acronym stands for its name, a number inside a range the node states,
        or outside it where the statement denies it, is there: ``specifics_in``), at least NUMBER_MISSING when one of
        them is a number or the node gives one of its names with one word changed (``name_changed``: "Graduate School"
        for "Business School"), and raised further
        when the node's closest sentence holds NEGATION_RECALL of the statement's words but one of the two says "not" about
        them and the other does not (``negation_flipped``). Of TaxiNLI's human-labelled pairs, 11% of those whose hypothesis has a number
        the premise lacks are entailed, 20% of those with a name changed and 16% of those with two thirds of the words
        shared and the negation flipped (`python benchmarks/support_rules.py`); the topic match the similarity sees
        proves none of them.
        """
        sv, pv = self._vectors(statements, nodes)
        cos = sv @ pv.T
        ntok = [content_tokens(n) for n in nodes]
        stok = [content_tokens(s) for s in statements]
        rec = np.array([[token_recall(s, t) for t in ntok] for s in stok]).reshape(cos.shape)
        miss = np.zeros(cos.shape)
        for i, st in enumerate(statements):
            spec = specifics(st)
            for j, n in enumerate(nodes):
                if spec:
                    lacking = specifics_in(spec, n, st)[1]
                    miss[i, j] = _weight(lacking) / _weight(spec)
                    if any(is_number(x) for x in lacking) or lacking and name_changed(st, n):
                        miss[i, j] = max(miss[i, j], NUMBER_MISSING)
                if rec[i, j] >= NEGATION_PREFILTER and self.negation_flipped(st, n, stok[i]):
                    miss[i, j] = 1.0 - (1.0 - miss[i, j]) * (1.0 - NEGATION_FLIPPED)
        return cos, rec, miss

    @staticmethod
    def negation_flipped(statement: str, node: str, words: frozenset[str]) -> bool:
        """Whether the node's closest sentence to ``statement`` (whose content ``words`` are given) holds at least
        NEGATION_RECALL of them, and one of the two says "not" about what the other states and the other does not.
        Kept per process: the rule (support_features) and the stacked model's feature (support_cross_rows) ask it of
        the same cells."""
        return _negation_flipped(statement, node, words)

    def support_cross_rows(self, statements: list[str], nodes: list[str], flat: np.ndarray,
                           cos: np.ndarray, rec: np.ndarray) -> np.ndarray:
        """CROSS_SUPPORT_FEATURES of the (statement, node) cells ``flat`` (indices into the raveled matrices)."""
        cells = [(int(k) // len(nodes), int(k) % len(nodes)) for k in flat]
        xs = self.cross_logits("support", [statements[i] for i, _ in cells], [nodes[j] for _, j in cells])
        neg = [1.0 if self.negation_flipped(statements[i], nodes[j], content_tokens(statements[i])) else 0.0
               for i, j in cells]
        ii, jj = np.array([c[0] for c in cells]), np.array([c[1] for c in cells])
        return np.column_stack([np.ones(len(cells)), cos[ii, jj], rec[ii, jj], xs, neg])

    @staticmethod
    def _best_sentence(text: str, words: frozenset[str]) -> str:
        best, score = "", -1.0
        for s in split_sentences(text)[:50]:
            sc = len(content_tokens(s) & words)
            if sc > score:
                best, score = s, sc
        return best

    def sentence_rows(self, req: JudgeRequest) -> tuple[np.ndarray, list[str]]:
        """The bi-encoder's rows (NODE_NOREF_FEATURES) of the request's sentences: each sentence with its node's
        similarity (one vector per node, shared with the node verdicts of the other metrics through the cache) and
        its own overlap with the question's words; and each sentence's node text."""
        parents: dict[str, list[Item]] = {}
        for it in req.items:
            parents.setdefault(it.parent or it.id, []).append(it)
        pids = list(parents)
        node_of = {p: " ".join(s.text for s in parents[p]) for p in pids}
        q = self.query_text(req)
        qvs, pv = self._vectors([q], [node_of[p] for p in pids])
        cos_by_parent = dict(zip(pids, (pv @ qvs[0]).tolist(), strict=True))
        qtok = content_tokens(q)
        rows = noref_rows(np.array([cos_by_parent[it.parent or it.id] for it in req.items]),
                          np.array([token_recall(qtok, content_tokens(it.text)) for it in req.items]),
                          self.is_turn(req))
        return rows, [node_of[it.parent or it.id] for it in req.items]

    def sentence_cross_rows(self, req: JudgeRequest, idx: np.ndarray, rows: np.ndarray,
                            nodes: list[str]) -> np.ndarray:
        """CROSS_SENTENCE_FEATURES of the sentences ``idx``: their bi-encoder rows, each read with the question, and
        its node read with the question (a sentence whose node answers the question is likelier the part that does)."""
        q = self.query_text(req)
        xs = self.cross_logits("sentence", [q] * len(idx), [req.items[i].text for i in idx])
        xr = self.cross_logits("relevance", [q] * len(idx), [nodes[i] for i in idx])
        t = 1.0 if self.is_turn(req) else 0.0
        return np.column_stack([rows[idx], xs, xr, t * xs])


@dataclass
class Scorer(Evidence):
    """From a JudgeRequest to verdicts: the bi-encoder's calibrated confidence of each item, and with the cross-encoder
    the stacked model's for the items above GATE (CROSS_CALIBRATION), with the reasons that quote the evidence."""

    # ------------------------------------------------------------------------------------------- tasks
    def node_conf(self, req: JudgeRequest, texts: list[str]) -> tuple[np.ndarray, dict[str, Any]]:
        """Each text's confidence that it is useful, and the evidence (``info``) the reasons quote. With the
        cross-encoder, the texts the bi-encoder is unsure of (``gated``) are read with the question and judged by the
        stacked model; the rest keep the bi-encoder's confidence."""
        x, info = self.node_features(req, texts)
        model = node_model(req.reference)
        conf = self.bi_conf(model, x)
        if self.cross is None or req.reference:
            return conf, info
        idx = self.gate(conf)
        info["x_relevance"] = np.full(len(texts), np.nan)
        if len(idx):
            rows, extra = self.node_cross_rows(req, [texts[i] for i in idx], x[idx])
            conf[idx] = _sigmoid(rows @ self.w(model))
            for key, v in extra.items():
                info[key][idx] = v
        return conf, info

    def answer(self, req: JudgeRequest) -> dict[str, Any]:
        """The answer to ``req``: its verdict family's method (``_<family name>``), its verdicts or its score."""
        fam = req.verdict_family
        method = getattr(self, f"_{fam.name}", None)
        if method is None:
            raise ConfigurationError(unanswered([fam])[0])
        got = method(req)
        return {"verdicts": got} if fam.per_item else got

    def _node_usefulness(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        texts = [it.text for it in req.items]
        conf, info = self.node_conf(req, texts)
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
            if "x_answer" in info and not np.isnan(info["x_answer"][i]):
                figures.append(f"read together with the question and {field}: {_sigmoid(info['x_answer'][i]):.2f}")
            elif "x_relevance" in info and not np.isnan(info["x_relevance"][i]):
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

    def _answer_relevance(self, req: JudgeRequest) -> list[dict[str, Any]]:
        """Each statement of the app's answer against the question (answer relevancy): its own similarity and word
        overlap; a statement with no words of substance ("I don't know.", "Thanks for asking!") is filler."""
        if not req.items:
            return []
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

    def sentence_conf(self, req: JudgeRequest) -> tuple[np.ndarray, list[float], np.ndarray]:
        """Each sentence's confidence that it is relevant, its node's similarity, and its cross-encoder logit (NaN
        where the bi-encoder was sure enough: ``gated``)."""
        rows, nodes = self.sentence_rows(req)
        cos = rows[:, 1].tolist()
        xs = np.full(len(rows), np.nan)
        conf = self.bi_conf("node_noref", rows)
        if self.cross is None:
            return conf, cos, xs
        idx = self.gate(conf)
        if len(idx):
            x = self.sentence_cross_rows(req, idx, rows, nodes)
            conf[idx] = _sigmoid(x @ self.w("sentence"))
            xs[idx] = x[:, 6]
        return conf, cos, xs

    def _sentence_relevance(self, req: JudgeRequest) -> list[dict[str, Any]]:
        if not req.items:
            return []
        confs, cos_of, xs = self.sentence_conf(req)
        qtok = content_tokens(self.query_text(req))
        out = []
        for i, it in enumerate(req.items):
            cos = cos_of[i]
            c = _round(confs[i])
            yes = c >= 0.5
            shared = sorted(qtok & content_tokens(it.text))
            read = f", read together with the question {_sigmoid(xs[i]):.2f}" if not np.isnan(xs[i]) else ""
            reason = (f"{'Relevant' if yes else 'Not relevant'} to the input: it shares {len(shared)} of the "
                      f"question's {len(qtok)} content words" + (f" ({', '.join(shared[:6])})" if shared else "")
                      + f" (confidence {c:.2f}, similarity to the question {cos:.2f}{read}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c})
        return out

    def _support_conf(self, statements: list[str], nodes: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cos, rec, miss = self.support_features(statements, nodes)
        conf = self.support_bi_conf(cos, rec, miss)
        if self.cross is None:
            return conf, cos, rec
        flat = self.gate(conf.ravel())
        # a statement that denies a number outside the range its node states ("does not run on Android 9" against
        # "Android 10 or later") says "not" where the node does not, and means what the node means: the
        # cross-encoder reads the "not" as a contradiction, so the rule's reading (the bi-encoder's) stands there
        flat = np.array([k for k in flat if not range_denied(statements[int(k) // len(nodes)],
                                                             nodes[int(k) % len(nodes)])], dtype=int)
        if len(flat):
            z = self.support_cross_rows(statements, nodes, flat, cos, rec) @ self.w("support")
            conf.ravel()[flat] = _sigmoid(z) * (1.0 - miss.ravel()[flat])
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
            words = content_tokens(it.text)
            sentence = self._best_sentence(best.text, words)
            missing = sorted(specifics_in(specifics(it.text), best.text, it.text)[1])
            lacks = (f"its closest node, {best.id}, does not mention {_listed(missing)}; " if missing and not yes
                     else "")
            if not yes and not lacks and rec[i, j] >= NEGATION_PREFILTER and self.negation_flipped(
                    it.text, best.text, words):
                # the direction, tested as the rule tests it: against the closest sentence's words
                says = "says 'not' where the statement does not" if not negated_near(
                    it.text, content_tokens(sentence)) else "does not say 'not' where the statement does"
                lacks = f"its closest node, {best.id}, {says}; "
            reason = (f"{'Supported' if yes else 'Not supported'}: {lacks}{rec[i, j]:.0%} of the statement's words "
                      f"occur in {'that node' if lacks else f'its closest node, {best.id}'}, whose closest sentence is "
                      f"'{_short(sentence)}' "
                      f"(confidence {c:.2f}, similarity {cos[i, j]:.2f}).")
            out.append({"id": it.id, "verdict": "yes" if yes else "no", "reason": reason, "confidence": c,
                        "node_ids": ids})
        return out

    def _rubric_recall(self, req: JudgeRequest) -> dict[str, Any]:
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


def unanswered(fams: Sequence[VerdictFamily]) -> list[str]:
    """What is wrong with each of ``fams`` the embedded judge has no method for (``Scorer._<name>``), one message
    each naming the family; empty when it answers them all."""
    return [f"The embedded judge cannot answer the verdict family {f.name!r}: it has no method Scorer._{f.name} "
            "(contextjudge/judges/_local/_scoring.py). A new family needs one, beside its VerdictFamily entry."
            for f in fams if not callable(getattr(Scorer, f"_{f.name}", None))]


def approx_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))

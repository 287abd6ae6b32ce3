"""Agreement of the embedded judge (model="local") with gold relevance labels, through the core metrics.

    python benchmarks/agreement.py --data-dir ../shared/data [--limit N] [--sizes 1 2 3 full]

Runs contextjudge's metrics with one LocalJudge over the four development files and prints, as its last line, one
JSON object:
- hotpotqa: ContextualPrecisionMetric's node verdicts against the gold ``relevant`` label (ROC AUC of the
  confidence, accuracy of yes/no), and its score against the same formula on the gold labels (Spearman, MAE).
  ContextUtilizationMetric (actual_output = the gold answer), ContextualRecallMetric and ContextualRelevancyMetric
  run too: ``nodes_per_second`` is the HotpotQA nodes divided by the wall time of all four metrics.
- trec_dl: no reference answer, so ContextualRelevancyMetric; a node's confidence is the highest confidence of its
  sentences. ROC AUC against grade >= 2, Spearman against the 0-3 grade.
- clapnq: mean ContextualRecallMetric with all four passages (gold present) and with the three negatives only.
- mtrag: TurnContextualRelevancyMetric on the conversation (turns, then an assistant turn holding the passages);
  node confidence = highest sentence confidence; ROC AUC against the human-marked passages.

Node verdicts by request size (a verdict should not depend on the node's neighbours): after each of hotpotqa,
trec_dl and mtrag, the same metric as above (ContextualPrecisionMetric, ContextualRelevancyMetric,
TurnContextualRelevancyMetric) judges the same nodes again in requests of k nodes: each row's nodes cut into
consecutive chunks of k (the last chunk may be shorter; size 1 = each node alone, "full" = the whole request as
above), each chunk its own test case. For the relevancy metrics a node is yes when any of its sentences is. Per
size, flat keys appended after the keys above (which keep their names and order):
- "<set>.size1.auc", "<set>.size1.acc", ..., "<set>.full.auc", "<set>.full.acc": node ROC AUC and accuracy against
  the same gold labels (the full figures equal the set's node_auc and, for hotpotqa, node_accuracy);
- "<set>.flip.size1": the share of nodes whose yes/no differs from the full request's, "<set>.flip_to_yes.size1"
  the share that is no in the full request and yes in the small one;
- "<set>.sentence_flip.size1" (trec_dl, mtrag): the share of sentences whose verdict differs from the full request's;
- "<set>.by_size.nodes", ".sentences", ".seconds": what was judged, and the wall time of all its size runs.
The same figures are printed as a table just before the JSON line. ``--sizes`` chooses the sizes (a number of
nodes, or full); ``--sizes`` alone skips these runs (for example with ``--sets hotpotqa`` to measure speed).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, evaluate  # noqa: E402
from contextjudge.judges._local import LocalJudge  # noqa: E402
from contextjudge.metrics import (  # noqa: E402
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    TurnContextualRelevancyMetric,
    weighted_cumulative_precision,
)

FILES = {"hotpotqa": "hotpotqa_dev.jsonl", "trec_dl": "trec_dl_dev.jsonl", "clapnq": "clapnq_dev.jsonl",
         "mtrag": "mtrag_dev.jsonl"}


def load(data_dir: str | Path, name: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with open(Path(data_dir) / FILES[name], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if limit and len(rows) >= limit:
                    break
    return rows


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def roc_auc(scores: Any, labels: Any) -> float:
    """ROC AUC (the Mann-Whitney U statistic, ties counted half)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return float("nan")
    r = _ranks(s)
    return float((r[y].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def spearman(a: Any, b: Any) -> float:
    """Spearman's rank correlation (Pearson on average ranks)."""
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


class DiskCachedEmbeddings(Embeddings):
    """Wraps an Embeddings with a pickle file of vectors, so repeated calibration runs do not re-embed (scratch use)."""

    def __init__(self, inner: Embeddings, path: str) -> None:
        self.inner, self.path = inner, path
        self.model_name = getattr(inner, "model_name", type(inner).__name__)
        self.d: dict[tuple[str, str], list[float]] = {}
        if os.path.exists(path):
            with open(path, "rb") as f:
                self.d = pickle.load(f)

    def _get(self, texts: list[str], kind: str) -> list[list[float]]:
        miss = [t for t in dict.fromkeys(texts) if (kind, t) not in self.d]
        if miss:
            vecs = self.inner.embed_documents(miss) if kind == "p" else (
                self.inner.embed_queries(miss) if hasattr(self.inner, "embed_queries")
                else [self.inner.embed_query(t) for t in miss])
            for t, v in zip(miss, vecs, strict=True):
                self.d[(kind, t)] = v
        return [self.d[(kind, t)] for t in texts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._get(texts, "p")

    def embed_query(self, text: str) -> list[float]:
        return self._get([text], "q")[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._get(texts, "q")

    def save(self) -> None:
        with open(self.path + ".tmp", "wb") as f:
            pickle.dump(self.d, f)
        os.replace(self.path + ".tmp", self.path)


TARGETS = {"hotpotqa.node_auc": 0.95, "hotpotqa.precision_spearman": 0.75, "trec_dl.node_auc": 0.75,
           "clapnq.gap": 0.5, "nodes_per_second": 30.0}


# Node confidences and gold labels per set, kept for --dump (training/calibrate_heads.py fits a scaling of the
# cross-encoder experiment's confidences on them).
DUMP: dict[str, dict[str, list[Any]]] = {}


def _run(cases: list[Any], metrics: list[Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    res = evaluate(cases, metrics, show_progress=False, raise_exceptions=True)
    return res, time.perf_counter() - t0


def _node_conf_from_sentences(verdicts: list[dict[str, Any]], n_nodes: int) -> list[float]:
    """A node's confidence for the relevancy metrics: the highest confidence among its sentences."""
    best = [0.0] * n_nodes
    for v in verdicts:
        k = int(v["rank"]) - 1
        if 0 <= k < n_nodes:
            best[k] = max(best[k], float(v.get("confidence") or 0.0))
    return best


def hotpotqa_case(r: dict[str, Any], passages: list[dict[str, Any]]) -> LLMTestCase:
    return LLMTestCase(input=r["question"], actual_output=r["reference_answer"], expected_output=r["reference_answer"],
                       retrieval_context=[p["text"] for p in passages])


def question_case(r: dict[str, Any], passages: list[dict[str, Any]]) -> LLMTestCase:
    """The question and the passages, no reference (TREC DL has none)."""
    return LLMTestCase(input=r["question"], retrieval_context=[p["text"] for p in passages])


def mtrag_case(r: dict[str, Any], passages: list[dict[str, Any]]) -> ConversationalTestCase:
    """The turns, then an assistant turn holding the passages."""
    turns = [Turn(role=t["role"], content=t["content"]) for t in r["turns"]]
    turns.append(Turn(role="assistant", content=r["reference_answer"] or "",
                      retrieval_context=[p["text"] for p in passages]))
    return ConversationalTestCase(turns=turns)


def hotpotqa(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    cases = [hotpotqa_case(r, r["passages"]) for r in rows]
    metrics = [ContextualPrecisionMetric(model=judge), ContextUtilizationMetric(model=judge),
               ContextualRecallMetric(model=judge), ContextualRelevancyMetric(model=judge)]
    res, secs = _run(cases, metrics)
    conf, yes, gold, scores, gold_scores = [], [], [], [], []
    for r, tr in zip(rows, res.test_results, strict=True):
        m = tr.metric(metrics[0].name)
        labels = [bool(p["relevant"]) for p in r["passages"]]
        for v in m.verdicts:
            conf.append(float(v["confidence"]))
            yes.append(v["verdict"] == "yes")
            gold.append(labels[v["rank"] - 1])
        scores.append(m.score)
        gold_scores.append(weighted_cumulative_precision(labels))
    n_nodes = sum(len(r["passages"]) for r in rows)
    yes_a, gold_a = np.array(yes), np.array(gold)
    DUMP["hotpotqa"] = {"conf": conf, "labels": [bool(g) for g in gold]}
    return {"node_auc": round(roc_auc(conf, gold), 4), "node_accuracy": round(float(np.mean(yes_a == gold_a)), 4),
            "precision_spearman": round(spearman(scores, gold_scores), 4),
            "precision_mae": round(float(np.mean(np.abs(np.array(scores) - np.array(gold_scores)))), 4),
            "node_recall_of_gold": round(float(yes_a[gold_a].mean()), 4),
            "node_false_positive_rate": round(float(yes_a[~gold_a].mean()), 4),
            "mean_recall": round(float(res.mean(metrics[2].name)), 4),
            "mean_relevancy": round(float(res.mean(metrics[3].name)), 4),
            "cases": len(rows), "nodes": n_nodes, "seconds": round(secs, 1)}


def demo_distractors(judge: LocalJudge) -> dict[str, Any]:
    """Same-corpus distractors (issue 14): the demo corpus' 15 golden questions, each with its relevant documents and
    every other document of the same category (same company, same topic family, not what the question asks),
    judged by ContextualPrecisionMetric with the expected output as reference, and by ContextualRelevancyMetric
    without one. A measurement only: nothing is fitted on this corpus."""
    from importlib.resources import files  # noqa: PLC0415

    root = files("contextjudge") / "data/demo_corpus"
    docs = json.loads((root / "docs.json").read_text("utf-8"))["documents"]
    goldens = json.loads((root / "goldens.json").read_text("utf-8"))["goldens"]
    by_id = {d["id"]: d for d in docs}
    cases, labels = [], []
    for g in goldens:
        cats = {by_id[i]["category"] for i in g["relevant_ids"]}
        ids = list(g["relevant_ids"]) + [d["id"] for d in docs if d["category"] in cats
                                         and d["id"] not in g["relevant_ids"]]
        cases.append(LLMTestCase(input=g["input"], actual_output=g["expected_output"],
                                 expected_output=g["expected_output"],
                                 retrieval_context=[by_id[i]["text"] for i in ids]))
        labels.append([i in g["relevant_ids"] for i in ids])
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRelevancyMetric(model=judge)]
    res, _ = _run(cases, metrics)
    out: dict[str, Any] = {"questions": len(goldens), "distractors": sum(len(lab) - sum(lab) for lab in labels)}
    for key, metric in (("reference", metrics[0]), ("no_reference", metrics[1])):
        yes, gold = [], []
        for lab, tr in zip(labels, res.test_results, strict=True):
            m = tr.metric(metric.name)
            if key == "reference":
                got = {v["rank"] - 1: v["verdict"] == "yes" for v in m.verdicts}
            else:
                conf = _node_conf_from_sentences(m.verdicts, len(lab))
                got = dict(enumerate(c >= 0.5 for c in conf))
            yes += [got[k] for k in range(len(lab))]
            gold += lab
        y, g_ = np.array(yes), np.array(gold)
        out[f"{key}.false_yes"] = round(float(y[~g_].mean()), 4)
        out[f"{key}.recall_of_relevant"] = round(float(y[g_].mean()), 4)
    return out


def trec_dl(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    cases = [question_case(r, r["passages"]) for r in rows]
    metric = ContextualRelevancyMetric(model=judge)
    res, secs = _run(cases, [metric])
    conf, rel, grade = [], [], []
    for r, tr in zip(rows, res.test_results, strict=True):
        conf += _node_conf_from_sentences(tr.metric(metric.name).verdicts, len(r["passages"]))
        rel += [bool(p["relevant"]) for p in r["passages"]]
        grade += [int(p["grade"]) for p in r["passages"]]
    DUMP["trec_dl"] = {"conf": conf, "labels": rel}
    return {"node_auc": round(roc_auc(conf, rel), 4), "grade_spearman": round(spearman(conf, grade), 4),
            "cases": len(rows), "nodes": len(conf), "seconds": round(secs, 1)}


def clapnq(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    with_gold = [LLMTestCase(input=r["question"], expected_output=r["reference_answer"],
                             retrieval_context=[p["text"] for p in r["passages"]]) for r in rows]
    without = [LLMTestCase(input=r["question"], expected_output=r["reference_answer"],
                           retrieval_context=[p["text"] for p in r["passages"] if not p["relevant"]]) for r in rows]
    metric = ContextualRecallMetric(model=judge)
    res, secs = _run(with_gold + without, [metric])
    scores = res.scores(metric.name)
    a = float(np.mean(scores[: len(rows)]))
    b = float(np.mean(scores[len(rows):]))
    return {"recall_with_gold": round(a, 4), "recall_without_gold": round(b, 4), "gap": round(a - b, 4),
            "cases": len(rows), "seconds": round(secs, 1)}


def mtrag(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    cases = [mtrag_case(r, r["passages"]) for r in rows]
    metric = TurnContextualRelevancyMetric(model=judge)
    res, secs = _run(cases, [metric])
    conf, rel = [], []
    for r, tr in zip(rows, res.test_results, strict=True):
        conf += _node_conf_from_sentences(tr.metric(metric.name).verdicts, len(r["passages"]))
        rel += [bool(p["relevant"]) for p in r["passages"]]
    DUMP["mtrag"] = {"conf": conf, "labels": rel}
    return {"node_auc": round(roc_auc(conf, rel), 4), "cases": len(rows), "nodes": len(conf),
            "seconds": round(secs, 1)}

# ------------------------------------------------------------------------------------------- per request size
SIZES = ("1", "2", "3", "full")
# The metric whose node verdicts each set is judged by at every request size, and how a chunk becomes a test case.
SIZE_RUNS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "hotpotqa": (ContextualPrecisionMetric, hotpotqa_case),
    "trec_dl": (ContextualRelevancyMetric, question_case),
    "mtrag": (TurnContextualRelevancyMetric, mtrag_case),
}


def request_size(text: str) -> str:
    """A --sizes value: a positive number of nodes, or "full" (the whole request)."""
    if text == "full" or (text.isdigit() and int(text) > 0):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: a size is a positive number of nodes or 'full'")


def size_label(size: str) -> str:
    return "full" if size == "full" else f"size{size}"


def chunks(n: int, size: str) -> list[range]:
    """Consecutive chunks of a request's ``n`` nodes, ``size`` each (the last may be shorter); "full" is one chunk."""
    k = n if size == "full" else int(size)
    return [range(i, min(i + k, n)) for i in range(0, n, k)] if n else []


@dataclass
class Judged:
    """Each node's verdict and confidence in data order, and each sentence's verdict for the relevancy metrics.

    A node is yes when any of its verdicts is yes, and its confidence is the highest of them: for node verdicts that
    is the node's own, for sentence verdicts it is the node confidence ``_node_conf_from_sentences`` gives."""

    yes: list[bool]
    conf: list[float]
    sentences: dict[tuple[int, str], bool]  # (node index, "s3") -> yes; empty for node verdicts
    seconds: float


def judge_in_chunks(rows: list[dict[str, Any]], judge: LocalJudge, set_name: str, size: str) -> Judged:
    """Judge every node in requests of ``size`` nodes: each row's nodes cut into consecutive chunks, each chunk its own
    test case, all through one evaluate() run."""
    metric_cls, make_case = SIZE_RUNS[set_name]
    metric = metric_cls(model=judge)
    cases, spans, base = [], [], 0
    for r in rows:
        for span in chunks(len(r["passages"]), size):
            cases.append(make_case(r, [r["passages"][i] for i in span]))
            spans.append(range(base + span.start, base + span.stop))
        base += len(r["passages"])
    res, secs = _run(cases, [metric])
    yes, conf, sentences = [False] * base, [0.0] * base, {}
    for span, tr in zip(spans, res.test_results, strict=True):
        for v in tr.metric(metric.name).verdicts:
            node = span[int(v["rank"]) - 1]
            verdict = v["verdict"] == "yes"
            yes[node] = yes[node] or verdict
            conf[node] = max(conf[node], float(v.get("confidence") or 0.0))
            if "." in v["id"]:  # "n2.s3": the chunk's rank, then the sentence, numbered within its node
                sentences[(node, v["id"].split(".", 1)[1])] = verdict
    return Judged(yes, conf, sentences, secs)


def by_size(rows: list[dict[str, Any]], judge: LocalJudge, set_name: str, sizes: list[str]) -> dict[str, Any]:
    """Node ROC AUC and accuracy at each request size, and how often a verdict differs from the full request's.

    Keys: "<set>.size1.auc", "<set>.size1.acc", ..., "<set>.full.auc"; "<set>.flip.size1" (share of nodes whose
    yes/no differs from the full request), "<set>.flip_to_yes.size1" (share of nodes no in full, yes alone);
    for the relevancy metrics "<set>.sentence_flip.size1" (share of sentences whose verdict differs)."""
    gold = np.array([bool(p["relevant"]) for r in rows for p in r["passages"]])
    judged = {s: judge_in_chunks(rows, judge, set_name, s) for s in dict.fromkeys([*sizes, "full"])}
    full = judged["full"]
    full_yes = np.array(full.yes)
    out: dict[str, Any] = {}
    for s in sizes:
        j = judged[s]
        yes = np.array(j.yes)
        out[f"{set_name}.{size_label(s)}.auc"] = round(roc_auc(j.conf, gold), 4)
        out[f"{set_name}.{size_label(s)}.acc"] = round(float(np.mean(yes == gold)), 4)
    for s in sizes:
        if s == "full":
            continue
        j = judged[s]
        yes = np.array(j.yes)
        out[f"{set_name}.flip.size{s}"] = round(float(np.mean(yes != full_yes)), 4)
        out[f"{set_name}.flip_to_yes.size{s}"] = round(float(np.mean(yes & ~full_yes)), 4)
        if full.sentences:
            if j.sentences.keys() != full.sentences.keys():
                raise AssertionError(f"{set_name} size {s}: not the same sentences as in the full requests")
            changed = sum(j.sentences[k] != v for k, v in full.sentences.items())
            out[f"{set_name}.sentence_flip.size{s}"] = round(changed / len(full.sentences), 4)
    out[f"{set_name}.by_size.nodes"] = len(gold)
    out[f"{set_name}.by_size.sentences"] = len(full.sentences) or None
    out[f"{set_name}.by_size.seconds"] = round(sum(j.seconds for j in judged.values()), 1)
    return out


def size_table(figures: dict[str, Any], sets: list[str], sizes: list[str]) -> str:
    """The per-size figures as a readable table (the same numbers as the JSON keys)."""
    def cell(key: str) -> str:
        v = figures.get(key)
        return "-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)

    head = f"{'set':<9} {'size':<5} {'AUC':>7} {'acc':>7} {'flip':>7} {'to yes':>7} {'sent.flip':>9}"
    lines = ["Node verdicts by request size (flips: against the same node in the full request)", head,
             "-" * len(head)]
    for name in sets:
        for s in sizes:
            lab = size_label(s)
            lines.append(f"{name:<9} {s:<5} {cell(f'{name}.{lab}.auc'):>7} {cell(f'{name}.{lab}.acc'):>7} "
                         f"{cell(f'{name}.flip.{lab}'):>7} {cell(f'{name}.flip_to_yes.{lab}'):>7} "
                         f"{cell(f'{name}.sentence_flip.{lab}'):>9}")
        lines.append(f"{'':<9} ({figures[f'{name}.by_size.nodes']} nodes"
                     + (f", {figures[f'{name}.by_size.sentences']} sentences"
                        if figures.get(f"{name}.by_size.sentences") else "")
                     + f", {figures[f'{name}.by_size.seconds']} s for all sizes)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with hotpotqa_dev.jsonl, trec_dl_dev.jsonl, ...")
    ap.add_argument("--limit", type=int, default=None, help="use the first N rows of each file")
    ap.add_argument("--sets", nargs="+", choices=list(FILES), default=list(FILES),
                    help="run only these data sets (for example: --sets hotpotqa, to measure speed alone)")
    ap.add_argument("--skip", nargs="*", default=[], metavar="SET=N",
                    help="leave out the first N rows of a set, e.g. hotpotqa=200 mtrag=150: the rows the local "
                         "judge's weights were fitted on, to see the figures on the others")
    ap.add_argument("--sizes", nargs="*", type=request_size, default=list(SIZES), metavar="SIZE",
                    help="request sizes to judge HotpotQA, TREC DL and MTRAG nodes at: a number of nodes, or full "
                         "(default: 1 2 3 full); --sizes with nothing after it leaves the per-size runs out")
    ap.add_argument("--dump", metavar="FILE", help="also write each set's node confidences and gold labels (JSON)")
    ap.add_argument("--judge", choices=("current", "stacked", "cascade"), default="current",
                    help="current: the bi-encoder and lexical judge; stacked: with the cross-encoder's logits; "
                         "cascade: the cross-encoder read only where the bi-encoder is unsure (model='local-cascade')")
    ap.add_argument("--cross", default=None, metavar="NPZ", help="the cross-encoder's weights (default: shipped)")
    ap.add_argument("--cross-cache", default=None, metavar="FILE",
                    help="start the stacked judge with these cross-encoder logits (calibrate_local.py --cross-cache): "
                         "figures only, its speed is then not measured")
    ap.add_argument("--stacked-weights", default=None, metavar="JSON",
                    help="the stacked judge with these fitted weights (calibrate_local.py --write-stacked) in place "
                         "of the shipped ones")
    ap.add_argument("--compare", nargs="*", default=None, choices=("current", "stacked", "cascade"),
                    help="run these judges (none named: current and stacked), one after the other, and print their "
                         "figures side by side")
    args = ap.parse_args()
    judges = (args.compare or ["current", "stacked"]) if args.compare is not None else [args.judge]
    results = {}
    for name in judges:
        judge = make_judge(name, args.cross, args.stacked_weights)
        if name == "stacked" and args.cross_cache:
            with open(args.cross_cache, "rb") as f:
                judge._scorer._xcache.update(pickle.load(f))  # noqa: SLF001
        print(f"== judge: {name}", file=sys.stderr, flush=True)
        results[name] = run_all(judge, args)
    if args.compare is not None:
        print(compare_table(results))
        print(json.dumps(results))
    else:
        print(json.dumps(results[judges[0]]))


def make_judge(kind: str, cross: str | None = None, weights: str | None = None) -> LocalJudge:
    """The judge a benchmark compares: ``current`` (the bi-encoder judge), ``stacked`` (with the cross-encoder: the
    shipped weights or ``cross``'s, and with ``weights`` a JSON file of stacked weights that replace those of
    CROSS_CALIBRATION it names, as ``calibrate_local.py --cross --write-stacked FILE`` writes them) or ``cascade``
    (model="local-cascade"; the environment variable CASCADE_BAND="LO,HI" tries another band, for
    cascade_band.py)."""
    if kind == "cascade":
        judge = LocalJudge(cross_encoder="unsure")
        if os.environ.get("CASCADE_BAND"):
            lo, hi = (float(v) for v in os.environ["CASCADE_BAND"].split(","))
            judge._scorer.band = (lo, hi)  # noqa: SLF001
        return judge
    if kind != "stacked":
        return LocalJudge()
    judge = LocalJudge(cross_encoder=cross or True)
    if weights:
        from contextjudge.judges._local._scoring import CROSS_CALIBRATION  # noqa: PLC0415

        with open(weights) as f:
            fitted = json.load(f)
        unknown = sorted(set(fitted) - set(CROSS_CALIBRATION))
        if unknown:
            raise SystemExit(f"{weights}: {unknown} are not stacked models (expected some of {sorted(CROSS_CALIBRATION)})")
        judge._scorer.weights = {**CROSS_CALIBRATION, **fitted}  # noqa: SLF001
    return judge


HEADLINE = ["hotpotqa.node_auc", "hotpotqa.node_accuracy", "hotpotqa.precision_spearman", "hotpotqa.ece",
            "trec_dl.node_auc", "trec_dl.full.acc", "trec_dl.ece", "mtrag.node_auc", "mtrag.full.acc", "mtrag.ece",
            "clapnq.gap", "hotpotqa.flip.size1", "trec_dl.flip.size1", "mtrag.flip.size1", "nodes_per_second",
            "peak_memory_mb"]


def compare_table(results: dict[str, dict[str, Any]]) -> str:
    def get(out: dict[str, Any], key: str) -> Any:
        if key in out:
            return out[key]
        name, _, fig = key.partition(".")
        return out.get(name, {}).get(fig) if isinstance(out.get(name), dict) else None

    names = list(results)
    lines = ["figure".ljust(30) + "".join(n.rjust(12) for n in names)]
    for key in HEADLINE + sorted(k for k in results[names[0]] if ".size" in k and k not in HEADLINE):
        vals = [get(results[n], key) for n in names]
        if all(v is None for v in vals):
            continue
        lines.append(key.ljust(30) + "".join(("-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v))
                                             .rjust(12) for v in vals))
    return "\n".join(lines)


def ece(conf: list[float], labels: list[bool], bins: int = 10) -> float:
    """Expected calibration error: the mean gap between confidence and the share of yes, over ten equal bins."""
    p, y = np.asarray(conf, dtype=float), np.asarray(labels, dtype=float)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    return float(sum(abs(p[idx == b].mean() - y[idx == b].mean()) * (idx == b).mean() for b in range(bins)
                     if (idx == b).any()))


def run_all(judge: LocalJudge, args: argparse.Namespace) -> dict[str, Any]:
    skip = {k: int(v) for k, v in (kv.split("=") for kv in args.skip)}
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    sizes = list(dict.fromkeys(args.sizes))
    per_size: dict[str, Any] = {}
    for name, fn in (("hotpotqa", hotpotqa), ("trec_dl", trec_dl), ("clapnq", clapnq), ("mtrag", mtrag)):
        if name not in args.sets:
            continue
        rows = load(args.data_dir, name)[skip.get(name, 0):]
        rows = rows[: args.limit] if args.limit else rows
        out[name] = fn(rows, judge)
        if name in DUMP:
            out[name]["ece"] = round(ece(DUMP[name]["conf"], DUMP[name]["labels"]), 4)
        print(f"{name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)
        # After the set's own run, so its nodes are embedded already and nodes_per_second is measured as before.
        if sizes and name in SIZE_RUNS:
            figures = by_size(rows, judge, name, sizes)
            print(f"{name} by size: {json.dumps(figures)}", file=sys.stderr, flush=True)
            per_size.update(figures)
    if not args.limit:
        out["demo_distractors"] = demo_distractors(judge)
        print(f"demo_distractors: {json.dumps(out['demo_distractors'])}", file=sys.stderr, flush=True)
    hp = out.get("hotpotqa", {"nodes": 0, "seconds": 0})
    out["nodes_per_second"] = round(hp["nodes"] / hp["seconds"], 2) if hp["seconds"] else None
    out["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["embedded_texts"] = judge.embedding_cache.embedded
    out["judge"] = dict(judge._identifying_params)  # noqa: SLF001
    out["total_seconds"] = round(time.perf_counter() - t0, 1)
    def value(key: str) -> Any:  # "set.figure" or a top-level figure
        name, _, figure = key.partition(".")
        return out.get(name, {}).get(figure) if figure else out.get(name)

    out["targets_missed"] = sorted(k for k, t in TARGETS.items()
                                   if k.split(".")[0] in (*args.sets, "nodes_per_second")
                                   and (value(k) is None or value(k) < t))
    out.update(per_size)  # after the figures that were there before, which keep their keys and order
    if per_size:
        print(size_table(per_size, [n for n in SIZE_RUNS if n in args.sets], sizes), flush=True)
    if args.dump:
        Path(args.dump).write_text(json.dumps(DUMP), encoding="utf-8")
    return out


if __name__ == "__main__":
    main()

"""Agreement of the embedded judge (model="local") with gold relevance labels, through the core metrics.

    python benchmarks/agreement.py --data-dir ../shared/data [--limit N]

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
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, evaluate  # noqa: E402
from contextjudge.judges.local import LocalJudge  # noqa: E402
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
            for t, v in zip(miss, vecs):
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


def hotpotqa(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    cases = [LLMTestCase(input=r["question"], actual_output=r["reference_answer"],
                         expected_output=r["reference_answer"], retrieval_context=[p["text"] for p in r["passages"]])
             for r in rows]
    metrics = [ContextualPrecisionMetric(model=judge), ContextUtilizationMetric(model=judge),
               ContextualRecallMetric(model=judge), ContextualRelevancyMetric(model=judge)]
    res, secs = _run(cases, metrics)
    conf, yes, gold, scores, gold_scores = [], [], [], [], []
    for r, tr in zip(rows, res.test_results):
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
    return {"node_auc": round(roc_auc(conf, gold), 4), "node_accuracy": round(float(np.mean(yes_a == gold_a)), 4),
            "precision_spearman": round(spearman(scores, gold_scores), 4),
            "precision_mae": round(float(np.mean(np.abs(np.array(scores) - np.array(gold_scores)))), 4),
            "node_recall_of_gold": round(float(yes_a[gold_a].mean()), 4),
            "node_false_positive_rate": round(float(yes_a[~gold_a].mean()), 4),
            "mean_recall": round(float(res.mean(metrics[2].name)), 4),
            "mean_relevancy": round(float(res.mean(metrics[3].name)), 4),
            "cases": len(rows), "nodes": n_nodes, "seconds": round(secs, 1)}


def trec_dl(rows: list[dict[str, Any]], judge: LocalJudge) -> dict[str, Any]:
    cases = [LLMTestCase(input=r["question"], retrieval_context=[p["text"] for p in r["passages"]]) for r in rows]
    metric = ContextualRelevancyMetric(model=judge)
    res, secs = _run(cases, [metric])
    conf, rel, grade = [], [], []
    for r, tr in zip(rows, res.test_results):
        conf += _node_conf_from_sentences(tr.metric(metric.name).verdicts, len(r["passages"]))
        rel += [bool(p["relevant"]) for p in r["passages"]]
        grade += [int(p["grade"]) for p in r["passages"]]
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
    cases = []
    for r in rows:
        turns = [Turn(role=t["role"], content=t["content"]) for t in r["turns"]]
        turns.append(Turn(role="assistant", content=r["reference_answer"] or "",
                          retrieval_context=[p["text"] for p in r["passages"]]))
        cases.append(ConversationalTestCase(turns=turns))
    metric = TurnContextualRelevancyMetric(model=judge)
    res, secs = _run(cases, [metric])
    conf, rel = [], []
    for r, tr in zip(rows, res.test_results):
        conf += _node_conf_from_sentences(tr.metric(metric.name).verdicts, len(r["passages"]))
        rel += [bool(p["relevant"]) for p in r["passages"]]
    return {"node_auc": round(roc_auc(conf, rel), 4), "cases": len(rows), "nodes": len(conf),
            "seconds": round(secs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with hotpotqa_dev.jsonl, trec_dl_dev.jsonl, ...")
    ap.add_argument("--limit", type=int, default=None, help="use the first N rows of each file")
    ap.add_argument("--sets", nargs="+", choices=list(FILES), default=list(FILES),
                    help="run only these data sets (for example: --sets hotpotqa, to measure speed alone)")
    ap.add_argument("--skip", nargs="*", default=[], metavar="SET=N",
                    help="leave out the first N rows of a set, e.g. hotpotqa=200 mtrag=150: the rows the local "
                         "judge's weights were fitted on, to see the figures on the others")
    args = ap.parse_args()
    skip = {k: int(v) for k, v in (kv.split("=") for kv in args.skip)}
    t0 = time.perf_counter()
    judge = LocalJudge()
    out: dict[str, Any] = {}
    for name, fn in (("hotpotqa", hotpotqa), ("trec_dl", trec_dl), ("clapnq", clapnq), ("mtrag", mtrag)):
        if name not in args.sets:
            continue
        rows = load(args.data_dir, name)[skip.get(name, 0):]
        out[name] = fn(rows[: args.limit] if args.limit else rows, judge)
        print(f"{name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)
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
    print(json.dumps(out))


if __name__ == "__main__":
    main()

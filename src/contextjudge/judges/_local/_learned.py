"""The embedded judge taught by a user's labels (issue 47): its own feature rows, refitted per verdict family with the
shipped weights as the prior.

Every verdict of the embedded judge is a logistic model over a few features of the item (``_scoring``: the
similarity, the shared words, with the cross-encoder its logits), times what a statement's node lacks. Here:

- ``item_rows``: for each item of a request, the rows its confidence is the maximum of, each ``(key, x, mult,
  node)``: the weights' key ("node_noref", "cross.sentence", ...), the features, the multiplier (support: one minus
  what the node lacks) and the context node's index (support). ``prior`` gives the shipped weights of a key; with
  them the rows give back the judge's own confidences (a test checks it).
- ``fit_units``: L2 shrinkage toward the shipped weights in standardised units, so a few labels move the model a
  little and many move it a lot. A labelled *unit* is what the label is about: a node (usefulness), a node whose
  sentences the judge reads (relevancy: the node is relevant when its best sentence is), a statement (support: the
  best node). Its confidence is the maximum over its rows, fitted by alternating the choice of the best row with a
  Newton fit (multiple-instance learning).
- ``cross_validate``: leave one case out (at most ``max_folds`` folds, grouped by case), over a small grid of
  shrinkage strengths; the shipped weights are kept unless a fit beats them out of sample.
- ``apply_learned``: a calibrated judge's verdicts with the fitted weights (``LocalJudge(learned=...)``).
- ``learn_memory`` / ``apply_memory``: a label memory for the node families: a new (question, node) pair close in
  embedding space to labelled ones (the same question in other words, on the same node) leans on their labels,
  kept only when it beats the judge without it out of sample (``LocalJudge(memory=...)``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._protocol import JudgeRequest
from ._lexical import content_tokens, specifics, token_recall
from ._scoring import CALIBRATION, Scorer, node_model

__all__ = ["LAMBDAS", "Row", "apply_learned", "apply_memory", "cross_validate", "fit_units", "item_rows", "learn",
           "learn_memory", "predict", "prior"]

Row = tuple[str, np.ndarray, float, int | None]  # (weights' key, features, multiplier, context node index)
CROSS = "cross."
# shrinkage strengths tried (the penalty is lambda * ||d||^2 on the change d in standardised units, against a sum of
# log losses over the labelled units): from barely moving to moving freely. The prior (no change) is always a choice.
LAMBDAS = (32.0, 8.0, 2.0, 0.5, 0.125)
_EPS = 1e-6


# ------------------------------------------------------------------------------------------------ rows
def prior(scorer: Scorer, key: str, size: int | None = None) -> np.ndarray:
    """The weights the judge itself uses for ``key``; with ``size``, padded with zeros for the features the rows add
    that the shipped weights do not use (a sentence's own similarity)."""
    if key.startswith(CROSS):
        w = scorer.w(key[len(CROSS):])
    elif key == "answer_relevance":
        w = np.array(CALIBRATION["answer_relevance"])
    else:
        w = scorer.bi_weights(key)
    w = np.asarray(w, dtype=float)
    return np.concatenate([w, np.zeros(size - len(w))]) if size is not None and size > len(w) else w


def item_rows(scorer: Scorer, req: JudgeRequest) -> dict[str, list[Row]]:
    """Each item's rows, as ``Scorer.answer`` judges it (the same gate for the cross-encoder). An item without rows
    (a statement with no context) is a no whatever the weights. A verdict family with no rows function (the rubric's
    one score) has no rows: it is not learned."""
    if not req.items:
        return {}
    rows_of = _ROWS.get(req.verdict_family.name)
    return rows_of(scorer, req) if rows_of is not None else {}


def _node_usefulness_rows(scorer: Scorer, req: JudgeRequest) -> dict[str, list[Row]]:
    items = req.items
    texts = [it.text for it in items]
    x, _ = scorer.node_features(req, texts)
    model = node_model(req.reference)
    rows: list[Row] = [(model, x[i], 1.0, None) for i in range(len(items))]
    if scorer.cross is not None and not req.reference:
        idx = scorer.gate(scorer.bi_conf(model, x))
        if len(idx):
            crows, _ = scorer.node_cross_rows(req, [texts[i] for i in idx], x[idx])
            for j, i in enumerate(idx):
                rows[int(i)] = (CROSS + model, crows[j], 1.0, None)
    return {it.id: [rows[i]] for i, it in enumerate(items)}


def _sentence_relevance_rows(scorer: Scorer, req: JudgeRequest) -> dict[str, list[Row]]:
    items = req.items
    x, nodes = scorer.sentence_rows(req)
    own = _sentence_cos(scorer, req)
    rows = [("node_noref", np.append(x[i], own[i]), 1.0, None) for i in range(len(items))]
    if scorer.cross is not None:
        idx = scorer.gate(scorer.bi_conf("node_noref", x))
        if len(idx):
            crows = scorer.sentence_cross_rows(req, idx, x, nodes)
            for j, i in enumerate(idx):
                rows[int(i)] = (CROSS + "sentence", np.append(crows[j], own[int(i)]), 1.0, None)
    return {it.id: [rows[i]] for i, it in enumerate(items)}


def _statement_support_rows(scorer: Scorer, req: JudgeRequest) -> dict[str, list[Row]]:
    items = req.items
    if not req.context:
        return {it.id: [] for it in items}
    statements, nodes = [it.text for it in items], [c.text for c in req.context]
    cos, rec, miss = scorer.support_features(statements, nodes)
    out: dict[str, list[Row]] = {}
    grid: list[list[Row]] = []
    for i in range(len(statements)):
        grid.append([("support", np.array([1.0, cos[i, j], rec[i, j]]), float(1.0 - miss[i, j]), j)
                     for j in range(len(nodes))])
    if scorer.cross is not None:
        flat = scorer.gate(scorer.support_bi_conf(cos, rec, miss).ravel())
        if len(flat):
            crows = scorer.support_cross_rows(statements, nodes, flat, cos, rec)
            for r, k in enumerate(flat):
                i, j = int(k) // len(nodes), int(k) % len(nodes)
                grid[i][j] = (CROSS + "support", crows[r], float(1.0 - miss[i, j]), j)
    for i, it in enumerate(items):
        out[it.id] = grid[i]
    return out


def _sentence_cos(scorer: Scorer, req: JudgeRequest) -> np.ndarray:
    """Each sentence's own similarity to the question: a feature the shipped weights do not use (their row has the
    node's; its prior weight is 0), which labels may teach to matter (a node is relevant when its best sentence is)."""
    qv, sv = scorer._vectors([scorer.query_text(req)], [it.text for it in req.items])  # noqa: SLF001
    return sv @ qv[0]


def _answer_relevance_rows(scorer: Scorer, req: JudgeRequest) -> dict[str, list[Row]]:
    q = scorer.query_text(req)
    texts = [it.text for it in req.items]
    qvs, pv = scorer._vectors([q], texts)  # noqa: SLF001 - the scorer's own batching
    cos = pv @ qvs[0]
    qtok = content_tokens(q)
    out: dict[str, list[Row]] = {}
    for i, it in enumerate(req.items):
        rec = token_recall(qtok, content_tokens(it.text))
        filler = len(content_tokens(it.text)) <= 2 and rec == 0 and not specifics(it.text)
        out[it.id] = [("answer_relevance", np.array([1.0, float(cos[i]), rec]), 0.2 if filler else 1.0, None)]
    return out


# each learnable verdict family's rows, by the family's name
_ROWS: dict[str, Callable[[Scorer, JudgeRequest], dict[str, list[Row]]]] = {
    "node_usefulness": _node_usefulness_rows, "sentence_relevance": _sentence_relevance_rows,
    "statement_support": _statement_support_rows, "answer_relevance": _answer_relevance_rows}


def _sig(z: np.ndarray | float) -> Any:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


def unit_conf(rows: Sequence[Row], weights: dict[str, np.ndarray]) -> tuple[float, int]:
    """The unit's confidence (the best row's) and that row's index; (0.0, -1) with no rows."""
    best, at = 0.0, -1
    for r, (key, x, mult, _) in enumerate(rows):
        c = float(_sig(float(x @ weights[key]))) * mult
        if c > best or at < 0:
            best, at = c, r
    return best, at


def apply_learned(scorer: Scorer, req: JudgeRequest, verdicts: list[dict[str, Any]],
                  learned: dict[str, list[float]]) -> None:
    """Decide ``verdicts`` (the scorer's, in place) with the fitted weights of the request's family: confidence,
    verdict, supporting nodes, and a note in the reason where the verdict changed."""
    rows = item_rows(scorer, req)
    weights: dict[str, np.ndarray] = {}
    for v in verdicts:
        got = rows.get(str(v.get("id")))
        if not got:
            continue
        for key, x, _, _ in got:
            if key not in weights:
                fitted = learned.get(key)
                weights[key] = np.array(fitted) if fitted is not None and len(fitted) == len(x) else prior(
                    scorer, key, len(x))
        confs = [float(_sig(float(x @ weights[k]))) * m for k, x, m, _ in got]
        c = round(max(confs), 4)
        yes = c >= 0.5
        was = v.get("confidence")
        if (v.get("verdict") == "yes") != yes:
            v["reason"] = (f"{'Yes' if yes else 'No'} with the weights fitted on your labels (confidence {c:.2f}, "
                           f"{was if was is None else f'{was:.2f}'} before): {v.get('reason') or ''}").strip()
        v["verdict"] = "yes" if yes else "no"
        v["confidence"] = c
        if req.verdict_family.cites_context:
            v["node_ids"] = [req.context[j].id for (_, _, _, j), cj in zip(got, confs, strict=True)
                             if j is not None and cj >= 0.5] if yes else []


# ------------------------------------------------------------------------------------------------ fitting
class _Design:
    """Standardisation of each key's features over the training rows, and the flat parameter vector's layout."""

    def __init__(self, units: Sequence[dict[str, Any]], priors: dict[str, np.ndarray]) -> None:
        by_key: dict[str, list[np.ndarray]] = {}
        for u in units:
            for key, x, _, _ in u["rows"]:
                by_key.setdefault(key, []).append(x)
        self.keys = sorted(by_key)
        self.mu: dict[str, np.ndarray] = {}
        self.sd: dict[str, np.ndarray] = {}
        self.at: dict[str, int] = {}
        n = 0
        for k in self.keys:
            xs = np.stack(by_key[k])
            self.mu[k] = xs[:, 1:].mean(axis=0)
            sd = xs[:, 1:].std(axis=0)
            self.sd[k] = np.where(sd > _EPS, sd, 1.0)
            self.at[k] = n
            n += xs.shape[1]
        self.size = n
        self.priors = priors

    def tilde(self, key: str, x: np.ndarray) -> np.ndarray:
        return np.concatenate([[1.0], (x[1:] - self.mu[key]) / self.sd[key]])

    def weights(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Raw weights per key: the prior plus the standardised change ``theta`` mapped back."""
        out = dict(self.priors)
        for k in self.keys:
            d = theta[self.at[k]: self.at[k] + len(self.priors[k])]
            w = np.array(self.priors[k], dtype=float).copy()
            w[1:] += d[1:] / self.sd[k]
            w[0] += d[0] - float(np.sum(d[1:] * self.mu[k] / self.sd[k]))
            out[k] = w
        return out


def _loss(z: np.ndarray, m: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(_sig(z) * m, 1e-9, 1 - 1e-9)
    return float(-np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))


def _newton(X: np.ndarray, z0: np.ndarray, m: np.ndarray, y: np.ndarray, lam: float, theta: np.ndarray,
            iters: int = 25) -> np.ndarray:
    """Minimise the log loss of p = sigmoid(z0 + X theta) * m plus lam * ||theta||^2 (damped Newton, Fisher-style
    curvature, backtracking on the objective)."""
    def objective(t: np.ndarray) -> float:
        return _loss(z0 + X @ t, m, y) + lam * float(t @ t)

    f = objective(theta)
    eye = np.eye(X.shape[1])
    for _ in range(iters):
        z = z0 + X @ theta
        s = _sig(z)
        pm = np.clip(s * m, 1e-9, 1 - 1e-9)
        dz = np.where(y > 0.5, -(1 - s), s * m * (1 - s) / (1 - pm))
        h = np.maximum(s * (1 - s), 1e-6)
        g = X.T @ dz + 2 * lam * theta
        H = (X * h[:, None]).T @ X + 2 * lam * eye
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            break
        t = 1.0
        while t > 1e-4:
            cand = theta - t * step
            fc = objective(cand)
            if fc <= f:
                break
            t /= 2
        else:
            break
        if f - fc < 1e-9:
            theta, f = cand, fc
            break
        theta, f = cand, fc
    return theta


def fit_units(units: Sequence[dict[str, Any]], priors: dict[str, np.ndarray], lam: float,
              rounds: int = 4) -> dict[str, np.ndarray]:
    """Weights per key fitted on ``units`` (dicts with ``label`` and ``rows``) with shrinkage ``lam`` toward
    ``priors``. A unit's confidence is its best row's: the best row is chosen under the current weights, then the
    weights are fitted on those rows, ``rounds`` times at most."""
    units = [u for u in units if u["rows"]]
    if not units or math.isinf(lam):
        return dict(priors)
    design = _Design(units, priors)
    theta = np.zeros(design.size)
    y = np.array([1.0 if u["label"] else 0.0 for u in units])
    choice: list[int] | None = None
    for _ in range(rounds):
        w = design.weights(theta)
        now = [unit_conf(u["rows"], w)[1] for u in units]
        if now == choice:
            break
        choice = now
        X = np.zeros((len(units), design.size))
        z0 = np.zeros(len(units))
        m = np.zeros(len(units))
        for i, (u, r) in enumerate(zip(units, choice, strict=True)):
            key, x, mult, _ = u["rows"][r]
            t = design.tilde(key, x)
            X[i, design.at[key]: design.at[key] + len(t)] = t
            z0[i] = float(x @ priors[key])
            m[i] = mult
        theta = _newton(X, z0, m, y, lam, theta)
    return design.weights(theta)


def predict(units: Sequence[dict[str, Any]], weights: dict[str, np.ndarray]) -> list[float]:
    """Each unit's confidence under ``weights``."""
    return [unit_conf(u["rows"], weights)[0] for u in units]


def log_loss(confs: Sequence[float], labels: Sequence[bool]) -> float:
    """Mean log loss."""
    if not confs:
        return 0.0
    p = np.clip(np.array(confs), 1e-6, 1 - 1e-6)
    y = np.array([1.0 if v else 0.0 for v in labels])
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def folds_of(units: Sequence[dict[str, Any]], max_folds: int, seed: int = 0) -> list[list[int]]:
    """Unit indices per fold, grouped by case: one case a fold (leave one case out) up to ``max_folds`` cases."""
    cases = sorted({str(u["case"]) for u in units})
    random.Random(seed).shuffle(cases)
    k = min(len(cases), max_folds)
    fold_of = {c: i % k for i, c in enumerate(cases)}
    out: list[list[int]] = [[] for _ in range(k)]
    for i, u in enumerate(units):
        out[fold_of[str(u["case"])]].append(i)
    return out


def cross_validate(units: Sequence[dict[str, Any]], priors: dict[str, np.ndarray], *,
                   lambdas: Sequence[float] = LAMBDAS, max_folds: int = 20, seed: int = 0) -> dict[str, Any]:
    """Out-of-sample confidences of every unit for each shrinkage strength (leave one case out, at most
    ``max_folds`` folds): ``{"folds": k, "cv": {lam: [conf per unit]}, "prior": [conf per unit]}``. No case's units
    are judged by weights fitted on them."""
    folds = folds_of(units, max_folds, seed) if units else []
    cv: dict[float, list[float]] = {lam: [0.0] * len(units) for lam in lambdas}
    if len(folds) >= 2:
        for test in folds:
            held = set(test)
            train = [u for i, u in enumerate(units) if i not in held]
            for lam in lambdas:
                w = fit_units(train, priors, lam)
                for i, c in zip(test, predict([units[i] for i in test], w), strict=True):
                    cv[lam][i] = c
    return {"folds": len(folds) if len(folds) >= 2 else 0, "cv": cv if len(folds) >= 2 else {},
            "prior": predict(units, priors)}


def _decisions_kappa(confs: Sequence[float], labels: Sequence[bool]) -> tuple[float | None, float]:
    from ...stats import cohen_kappa, confusion  # noqa: PLC0415

    c = confusion((cf >= 0.5, bool(y)) for cf, y in zip(confs, labels, strict=True))
    return cohen_kappa(*c), (c[0] + c[3]) / max(1, sum(c))


def learn(units: Sequence[dict[str, Any]], priors: dict[str, np.ndarray], *, lambdas: Sequence[float] = LAMBDAS,
          max_folds: int = 20, seed: int = 0) -> dict[str, Any]:
    """One family's fit on its labelled ``units`` (dicts with ``case``, ``label``, ``rows``): the shrinkage strength
    with the lowest cross-validated log loss, kept only when it beats the shipped weights out of sample (lower log
    loss, and kappa, else accuracy, no worse). Returns ``accepted``, ``lambda``, ``folds``, the confidences of each
    unit (``prior``: the judge's own; ``cv``: out of sample, the prior's when not accepted; ``fitted``: in sample),
    the log losses and ``weights`` (key -> list, the keys the units use; the prior's when not accepted)."""
    labels = [bool(u["label"]) for u in units]
    got = cross_validate(units, priors, lambdas=lambdas, max_folds=max_folds, seed=seed)
    prior_conf = got["prior"]
    ll_prior = log_loss(prior_conf, labels)
    out: dict[str, Any] = {"accepted": False, "lambda": None, "folds": got["folds"], "prior": prior_conf,
                           "cv": prior_conf, "fitted": prior_conf, "logloss_prior": ll_prior, "logloss_cv": None,
                           "weights": {}}
    if not got["cv"]:
        out["why"] = "fewer than two labelled cases: nothing to cross-validate a fit on"
        return out
    gains = {lam: _paired_gain(units, prior_conf, confs) for lam, confs in got["cv"].items()}
    best = max(gains, key=lambda x: gains[x][0])
    # the most shrinkage whose out-of-sample gain is within one standard error of the best (the one-SE rule): at
    # small N the strengths' figures differ by noise, and the stronger pull toward the shipped weights is the safer
    lam = max(x for x in gains if gains[x][0] >= gains[best][0] - gains[best][1])
    cv_conf = got["cv"][lam]
    ll_cv = log_loss(cv_conf, labels)
    gain, se = gains[lam]
    out.update(lam_tried=lam, logloss_cv=ll_cv)
    k_prior, a_prior = _decisions_kappa(prior_conf, labels)
    k_cv, a_cv = _decisions_kappa(cv_conf, labels)
    decisions_ok = (k_cv >= k_prior - 1e-12) if k_cv is not None and k_prior is not None else a_cv >= a_prior - 1e-12
    # kept only when it beats the shipped weights out of sample by more than the noise of the cases: its log loss
    # lower on held-out cases by at least one standard error of the per-case differences, and its decisions no worse
    if gain - se <= 0 or not decisions_ok:
        out["why"] = (f"the best fit on these labels (shrinkage {lam:g}) does not beat the shipped weights on cases it "
                      f"was not fitted on by more than their noise (log loss {ll_cv:.3f} against {ll_prior:.3f}, "
                      f"kappa {_fmt(k_cv)} against {_fmt(k_prior)}), so the judge keeps its own weights; label more "
                      "cases")
        return out
    weights = fit_units(units, priors, lam)
    keys = sorted({r[0] for u in units for r in u["rows"]})
    out.update(accepted=True, cv=cv_conf, fitted=predict(units, weights), **{"lambda": lam},
               weights={k: [round(float(x), 6) for x in weights[k]] for k in keys})
    return out


def _paired_gain(units: Sequence[dict[str, Any]], before: Sequence[float],
                 after: Sequence[float]) -> tuple[float, float]:
    """Mean per-case reduction of the summed log loss from ``before`` to ``after``, and its standard error."""
    per: dict[str, float] = {}
    for u, b, a in zip(units, before, after, strict=True):
        y = 1.0 if u["label"] else 0.0
        pb, pa = min(max(b, 1e-6), 1 - 1e-6), min(max(a, 1e-6), 1 - 1e-6)
        lb = -(y * math.log(pb) + (1 - y) * math.log(1 - pb))
        la = -(y * math.log(pa) + (1 - y) * math.log(1 - pa))
        per[str(u["case"])] = per.get(str(u["case"]), 0.0) + lb - la
    xs = np.array(list(per.values()))
    if len(xs) < 2:
        return float(xs.mean()) if len(xs) else 0.0, float("inf")
    return float(xs.mean()), float(xs.std(ddof=1) / math.sqrt(len(xs)))


def _fmt(k: float | None) -> str:
    return "n/a" if k is None else f"{k:.3f}"


# ------------------------------------------------------------------------------------------------ label memory
# A labelled (question, node) pair speaks for a new pair close to it in embedding space: the same question asked in
# other words about the same node (a help desk hears the same questions again). Its pull on a new pair's logit is
#   beta * sum_i s_i (2 y_i - 1) / (sum_i s_i + exp(-kappa * MEMORY_FLOOR)),  s_i = exp(kappa (cos_q_i + cos_n_i - 2))
# so a pair with no close labelled one keeps its confidence. kappa (how close is close) and beta (how much it pulls)
# are chosen out of sample: each case's pull is from the other cases' labels only, and the choice of (kappa, beta)
# for a case is made on the other cases (nested), so the figure that decides whether the memory is kept was never
# fitted on the case it measures. beta = 0 (no memory) is always a choice.
MEMORY_KAPPAS = (20.0, 40.0, 80.0)
MEMORY_BETAS = (0.5, 1.0, 2.0, 4.0, 8.0)
MEMORY_FLOOR = 0.1  # a labelled pair this far (summed cosine distance) from a new one weighs as much as none


def memory_pull(q: np.ndarray, n: np.ndarray, mem_q: np.ndarray, mem_n: np.ndarray, signs: np.ndarray,
                kappa: float, mask: np.ndarray | None = None) -> np.ndarray:
    """The memory's pull on each of the pairs (``q[i]``, ``n[i]``) (unit vectors, rows), in [-1, 1]; ``signs``:
    +1 for a labelled relevant pair, -1 for not; ``mask[i, j]`` False leaves labelled pair j out of pair i's pull."""
    if len(mem_q) == 0 or len(q) == 0:
        return np.zeros(len(q))
    s = np.exp(kappa * ((q @ mem_q.T) + (n @ mem_n.T) - 2.0))
    if mask is not None:
        s = s * mask
    return (s @ signs) / (s.sum(axis=1) + math.exp(-kappa * MEMORY_FLOOR))


def _logit(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 1e-6, 1 - 1e-6)
    return np.log(c / (1 - c))


def with_memory(confs: np.ndarray, pull: np.ndarray, beta: float) -> np.ndarray:
    """Confidences moved by the memory's pull."""
    return np.asarray(_sig(_logit(np.asarray(confs, dtype=float)) + beta * pull), dtype=float)


def learn_memory(units: Sequence[dict[str, Any]], confs: Sequence[float], qv: np.ndarray, nv: np.ndarray, *,
                 kappas: Sequence[float] = MEMORY_KAPPAS, betas: Sequence[float] = MEMORY_BETAS) -> dict[str, Any]:
    """Whether a memory of the labelled ``units`` (their question and node vectors ``qv``, ``nv``) improves on
    ``confs`` (the units' out-of-sample confidences without it) out of sample: ``accepted``, ``kappa``, ``beta``,
    ``cv`` (each unit's confidence with the pull of the other cases' labels under the (kappa, beta) chosen on the
    other cases; ``confs`` when not accepted), ``why``."""
    base = np.asarray(confs, dtype=float)
    out: dict[str, Any] = {"accepted": False, "kappa": None, "beta": None, "cv": list(base)}
    cases = [str(u["case"]) for u in units]
    if len(set(cases)) < 3:
        out["why"] = "fewer than three labelled cases: nothing to validate a memory on"
        return out
    signs = np.array([1.0 if u["label"] else -1.0 for u in units])
    other = np.array([[a != b for b in cases] for a in cases])
    grid = [(k, b) for k in kappas for b in betas]
    y = np.array([1.0 if u["label"] else 0.0 for u in units])

    def losses(c: np.ndarray) -> np.ndarray:
        c = np.clip(c, 1e-6, 1 - 1e-6)
        return -(y * np.log(c) + (1 - y) * np.log(1 - c))

    pulls = {k: memory_pull(qv, nv, qv, nv, signs, k, other) for k in kappas}
    cand = {g: with_memory(base, pulls[g[0]], g[1]) for g in grid}
    order = sorted(set(cases))
    at = {c: i for i, c in enumerate(order)}
    idx = np.array([at[c] for c in cases])

    def per_case(v: np.ndarray) -> np.ndarray:
        return np.bincount(idx, weights=v, minlength=len(order))

    base_case = per_case(losses(base))
    gain_case = {g: base_case - per_case(losses(c)) for g, c in cand.items()}  # per case, higher is better
    nested = base.copy()
    for ci in range(len(order)):
        rest = np.arange(len(order)) != ci
        best, best_gain = None, 0.0
        for g in grid:
            mean = float(gain_case[g][rest].mean())
            if mean > best_gain + 1e-12:
                best, best_gain = g, mean
        if best is not None:
            nested[idx == ci] = cand[best][idx == ci]
    diff = base_case - per_case(losses(nested))
    gain, se = float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))
    k0, a0 = _decisions_kappa(list(base), [bool(v) for v in y])
    k1, a1 = _decisions_kappa(list(nested), [bool(v) for v in y])
    ok = (k1 >= k0 - 1e-12) if k0 is not None and k1 is not None else a1 >= a0 - 1e-12
    if gain - se <= 0 or not ok:
        out["why"] = (f"the labels of close questions and nodes do not beat the judge without them on cases they were "
                      f"not taken from by more than their noise (log loss gain {gain:.3f} per case, standard error "
                      f"{se:.3f}; kappa {_fmt(k1)} against {_fmt(k0)})")
        return out
    mean_gain = {g: float(v.mean()) for g, v in gain_case.items()}
    top = max(mean_gain.values())
    spread = {g: float(v.std(ddof=1) / math.sqrt(len(v))) for g, v in gain_case.items()}
    top_g = max(mean_gain, key=lambda g: mean_gain[g])
    # the smallest pull within one standard error of the best (the one-SE rule, as for the weights)
    kappa, beta = min((g for g in grid if mean_gain[g] >= top - spread[top_g]), key=lambda g: (g[1], -g[0]))
    out.update(accepted=True, kappa=kappa, beta=beta, cv=[float(c) for c in nested], gain=gain, se=se)
    return out


def _memory_nodes(req: JudgeRequest) -> tuple[list[str], list[str]] | None:
    """The node text of each item (a sentence's node: its parent's sentences joined, as ``sentence_rows`` reads it)
    and the distinct node texts; None for a request the memory does not speak to."""
    if req.task == "node_usefulness":
        texts = [it.text for it in req.items]
        return texts, list(dict.fromkeys(texts))
    if req.task == "sentence_relevance" and any(it.parent for it in req.items):
        parents: dict[str, list[str]] = {}
        for it in req.items:
            parents.setdefault(it.parent or it.id, []).append(it.text)
        node_of = {p: " ".join(s) for p, s in parents.items()}
        texts = [node_of[it.parent or it.id] for it in req.items]
        return texts, list(node_of.values())
    return None


def apply_memory(scorer: Scorer, req: JudgeRequest, verdicts: list[dict[str, Any]], memory: dict[str, Any]) -> None:
    """Move ``verdicts`` (in place) by the pull of the labelled pairs close to each item's (question, node)."""
    got = _memory_nodes(req)
    entries = memory.get("entries") or []
    if got is None or not entries or not verdicts:
        return
    texts, distinct = got
    qv, nv = scorer._vectors([req.input], distinct)  # noqa: SLF001 - the scorer's own cache and batching
    mq, mn = scorer._vectors([str(e[0]) for e in entries], [str(e[1]) for e in entries])  # noqa: SLF001
    signs = np.array([1.0 if e[2] else -1.0 for e in entries])
    pull = memory_pull(np.repeat(qv, len(distinct), axis=0), nv, mq, mn, signs, float(memory["kappa"]))
    pull_of = dict(zip(distinct, pull.tolist(), strict=True))
    by_id = {it.id: t for it, t in zip(req.items, texts, strict=True)}
    beta = float(memory["beta"])
    for v in verdicts:
        text = by_id.get(str(v.get("id")))
        conf = v.get("confidence")
        if text is None or not isinstance(conf, (int, float)) or abs(pull_of[text]) < 1e-3:
            continue
        c = round(float(with_memory(np.array([conf]), np.array([pull_of[text]]), beta)[0]), 4)
        yes = c >= 0.5
        if (v.get("verdict") == "yes") != yes:
            v["reason"] = (f"{'Yes' if yes else 'No'} by your labels of close questions on this node (confidence "
                           f"{c:.2f}, {conf:.2f} before): {v.get('reason') or ''}").strip()
        v["verdict"] = "yes" if yes else "no"
        v["confidence"] = c

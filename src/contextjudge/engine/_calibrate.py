"""Calibration: a judge's verdicts against a user's own gold labels, and decision thresholds fitted on them.

For every labelled case and every label field it carries, the judge is asked exactly what the field's metrics ask
(each registered metric declares its ``label_field`` and verdict ``family``: ``metrics.metrics_of_field``; the
metric itself runs, through ``JudgeClient``: cache, retries, budgets and per-run limits apply; one request per case
and family). Then, per verdict family: agreement (``stats.binary_agreement``: confusion counts, base rate, accuracy,
Cohen's kappa, TPR, TNR, each with a 95% bootstrap interval over cases) and every item where judge and labels
disagree; per metric: the mean judged score against the mean gold score (``metrics._gold``), MAE and Spearman.

For a judge whose verdicts carry confidences, each family's threshold is fitted to maximise kappa on the labels
(``fit_threshold``), and the report says how much of that gain survives cross-validation over cases: the in-sample
figure flatters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._aio import run_sync
from .._json import loads as read_json
from .._result import embedded_spec, is_embedded_judge
from .._text import split_statements
from ..cases.labels import LABELS_KEY, NODE_FIELDS, labels_of, normalize_labels, resolve_labels
from ..cases.testcase import LLMTestCase
from ..errors import ConfigurationError, ContextJudgeError, JudgeError
from ..judges import (
    FAMILIES,
    CalibratedJudge,
    Calibration,
    Item,
    JudgeClient,
    JudgeOptions,
    JudgeRequest,
    RunContext,
    family_of,
    judge_identity,
    judge_name,
    resolve_model,
    use_run_context,
)
from ..metrics import (
    BaseMetric,
    gold_score,
    gold_statements,
    label_problems,
    node_items,
    registered_metrics,
)
from ..stats import binary_agreement, cohen_kappa, confusion, mae, one_class, spearman
from ._judged import JudgedCache, VerdictStore

__all__ = ["TRUST_KAPPA", "acalibrate", "advice", "calibrate", "calibration_of", "fit_threshold",
           "read_labels_file"]

MIN_ITEMS, MIN_EACH = 20, 5  # below these a fitted threshold is noise, so none is fitted
JUDGE_THRESHOLD = 0.5  # a judge's own decision point: ties between thresholds go to the one nearest it


def _taught() -> list[type[BaseMetric]]:
    """The registered metrics with a gold label field, in their families' order (``judges.FAMILIES``, then any
    other) and, within a family, in registration order: the built-in one of a field first."""
    order = {fam: i for i, fam in enumerate(FAMILIES)}
    return sorted((cls for cls in registered_metrics() if cls.label_field is not None),
                  key=lambda cls: order.get(cls.calibration_key() or "", len(order)))


def _fields(taught: Sequence[type[BaseMetric]]) -> dict[str, type[BaseMetric]]:
    """Label field -> the first metric of ``taught`` it teaches (the one whose check a labelled case must pass)."""
    out: dict[str, type[BaseMetric]] = {}
    for cls in taught:
        out.setdefault(str(cls.label_field), cls)
    return out


# ------------------------------------------------------------------------------------------------ input
def read_labels_file(path: str | Path) -> list[LLMTestCase]:
    """The labelled cases of a JSONL file: one test case a line (``input``, ``actual_output``, ``expected_output``,
    ``retrieval_context`` in rank order, optional ``id``) with the label fields of ``cases.labels`` at top level.
    Raises ConfigurationError naming the line of anything it cannot read."""
    p = Path(path)
    if not p.exists():
        raise ConfigurationError(f"labels file {str(p)!r} does not exist: check the --labels path.")
    cases: list[LLMTestCase] = []
    try:
        lines = p.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read labels file {str(p)!r}: {exc}.") from exc
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{p.name} line {n}"
        try:
            row = read_json(line)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{where} is not a JSON object ({exc.msg}). Write one test case per line.") \
                from exc
        if not isinstance(row, dict):
            raise ConfigurationError(f"{where} is not a JSON object. Write one test case per line.")
        labels = normalize_labels(row, where)
        if not labels:
            continue
        fields = {k: row.get(k) for k in ("input", "actual_output", "expected_output", "retrieval_context", "id",
                                          "name")}
        try:
            tc = LLMTestCase(**{k: v for k, v in fields.items() if v is not None})
        except ContextJudgeError as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
        if tc.id is None:
            tc.id = f"line {n}"
        tc.additional_metadata = {LABELS_KEY: labels}
        cases.append(tc)
    if not cases:
        raise ConfigurationError(f"labels file {str(p)!r} holds no labelled case: each line needs a test case and at "
                                 "least one of labels, relevance_labels, utilization_labels, statement_labels.")
    return cases


def _can_score(cls: type[BaseMetric], first: dict[str, type[BaseMetric]], tc: Any) -> bool:
    """Whether ``cls`` can score ``tc``: the first metric of each field was checked (``_check`` raises when it
    cannot); another metric of the field judges only the cases it can score."""
    if first.get(str(cls.label_field)) is cls:
        return True
    try:
        cls(model="local").check(tc)
    except ContextJudgeError:
        return False
    return True


def _case_id(tc: Any, index: int) -> str:
    return str(getattr(tc, "id", None) or getattr(tc, "name", None) or f"case {index + 1}")


def _check(cases: Sequence[Any], unused: list[dict[str, Any]] | None = None) -> list[tuple[Any, dict[str, Any]]]:
    """Each case with its labels lined up with its nodes (``resolve_labels``); raises ConfigurationError on the first
    case that cannot be calibrated. Keyed labels whose node is not among the case's are appended to ``unused``."""
    out = []
    for i, tc in enumerate(cases):
        stored = labels_of(tc)
        if not stored:
            continue
        labels, left = resolve_labels(tc, stored)
        if unused is not None:
            unused += [{"case": _case_id(tc, i), "input": tc.input, "node": e.get("id") or e.get("text") or e.get("hash"),
                        "text": e.get("text") or None,
                        **{f: e[f] for f in NODE_FIELDS if f in e}}
                       for e in left]
        problems = label_problems(tc, labels)
        if problems:
            raise ConfigurationError(problems[0])
        for field, metric in _fields(_taught()).items():
            if labels.get(field) is None:
                continue
            if field != "statement_labels" and all(v is None for v in labels[field]):
                labels.pop(field)  # none of this retrieval's nodes has a label for it: nothing to check
                continue
            try:
                metric(model="local").check(tc)
            except ContextJudgeError as exc:
                raise ConfigurationError(f"case {_case_id(tc, i)!r} has {field}, which cannot be checked: {exc}") \
                    from exc
        out.append((tc, labels))
    if not out:
        raise ConfigurationError("none of the cases carries gold labels (labels, relevance_labels, utilization_labels "
                                 "or statement_labels), so there is nothing to calibrate against.")
    return out


# ------------------------------------------------------------------------------------------------ judging
async def _judge_field(model: Any, tc: Any, labels: dict[str, Any], cls: type[BaseMetric]) -> dict[str, Any]:
    """Ask the judge what the metric ``cls`` asks; its verdicts (to pair with its label field's labels), and the
    judged score."""
    field = cls.label_field
    if field == "statement_labels" and labels.get("statements") is not None and \
            labels["statements"] != split_statements(tc.expected_output or ""):
        return await _judge_own_statements(model, tc, labels, cls)
    if field == "answer_statement_labels" and labels.get("answer_statements") is not None and \
            labels["answer_statements"] != split_statements(tc.actual_output or ""):
        return await _judge_own_statements(model, tc, labels, cls, answer=True)
    metric = cls(model=model, include_reason=False)
    result = await metric.a_score(tc)
    if result.error:
        return {"error": f"{result.error_type or 'JudgeError'}: {result.error}", "metric": metric.name}
    return {"metric": metric.name, "score": result.score, "verdicts": list(result.verdicts)}


async def _judge_own_statements(model: Any, tc: Any, labels: dict[str, Any], metric: type[BaseMetric],
                                answer: bool = False) -> dict[str, Any]:
    """Recall (``answer``: faithfulness), the metric ``metric``, over the user's own statements: the request the
    metric sends, with those statements."""
    statements = list(labels["answer_statements" if answer else "statements"])
    nodes = tc.retrieval_context or []
    name = metric.name
    if not nodes:
        return {"metric": name, "score": 0.0, "verdicts": []}
    req = JudgeRequest(task="statement_support", metric=metric.key, input=tc.input,
                       reference=tc.actual_output if answer else tc.expected_output,
                       reference_kind="actual_output" if answer else "expected_output",
                       items=[Item(id=f"s{j}", text=s) for j, s in enumerate(statements, 1)], context=node_items(nodes))
    client = JudgeClient(model, metric.default_template)
    try:
        ans = await client.ask(req, client.template.generate_verdicts)
    except JudgeError as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "metric": name}
    verdicts = [{"id": f"s{j}", "statement": s, "verdict": ans.verdicts[f"s{j}"]["verdict"],
                 "reason": ans.verdicts[f"s{j}"].get("reason", ""),
                 "confidence": ans.verdicts[f"s{j}"].get("confidence")} for j, s in enumerate(statements, 1)]
    score = float(metric.score_labels([v["verdict"] == "yes" for v in verdicts])) if verdicts else 0.0
    return {"metric": name, "score": score, "verdicts": verdicts}


def _pairs(tc: Any, labels: dict[str, Any], field: str, verdicts: list[dict[str, Any]],
           rows_of: Callable[[str, str], list[Any] | None] | None = None) -> list[dict[str, Any]]:
    """One record per labelled item: its label, the judge's verdict and confidence, and (``rows_of``: the embedded
    judge's feature rows of a verdict, by item id and text) the rows its confidence is the best of, under ``_rows``.
    Relevance labels are of nodes, and so are their records: a node is relevant when its best sentence is (verdict:
    any sentence's yes; confidence: the highest), never its label copied onto each of its sentences."""
    nodes = tc.retrieval_context or []
    out = []
    if field == "relevance_labels":
        by_node: dict[int, list[dict[str, Any]]] = {}
        for v in verdicts:
            if not v.get("statement"):
                continue  # an empty node: judged by the metric itself, not by the judge
            by_node.setdefault(int(str(v.get("id", ""))[1:].split(".")[0]), []).append(v)
        for k, sents in sorted(by_node.items()):
            label = labels[field][k - 1]
            if label is None:
                continue
            confs = [float(c) for c in (s.get("confidence") for s in sents) if isinstance(c, (int, float))]
            best = max(sents, key=_sentence_rank)
            rec = {"item": f"n{k}", "text": nodes[k - 1].text, "label": bool(label),
                   "verdict": any(s.get("verdict") == "yes" for s in sents),
                   "confidence": max(confs) if confs else None, "reason": best.get("reason", ""),
                   "sentences": len(sents),
                   # the node as the judge read it (its sentences joined): what a label memory keys the node by
                   "_node_read": " ".join(str(s["statement"]) for s in sents)}
            if rows_of is not None:
                got = [rows_of(str(s.get("id", "")), s["statement"]) for s in sents]
                rec["_rows"] = None if any(g is None for g in got) else [r for g in got for r in (g or [])]
            out.append(rec)
        return out
    for v in verdicts:
        vid = str(v.get("id", ""))
        if field in ("labels", "utilization_labels"):
            k = int(vid[1:])
            label, text = labels[field][k - 1], nodes[k - 1].text
        else:
            j = int(vid[1:])
            label, text = labels[field][j - 1], v.get("statement") or gold_statements(tc, labels, field)[j - 1]
        if label is None:
            continue  # a node this retrieval brought that no label names: not part of the agreement
        conf = v.get("confidence")
        rec = {"item": vid, "text": text, "label": bool(label), "verdict": v.get("verdict") == "yes",
               "confidence": float(conf) if isinstance(conf, (int, float)) else None, "reason": v.get("reason", "")}
        if isinstance(v.get("jurors"), dict):  # a jury's verdict: each juror's too, for its own agreement
            rec["jurors"] = {n: j.get("verdict") == "yes" for n, j in v["jurors"].items()}
        if rows_of is not None:
            rec["_rows"] = rows_of(vid, text)
        out.append(rec)
    return out


def _sentence_rank(v: dict[str, Any]) -> float:
    conf = v.get("confidence")
    return float(conf) if isinstance(conf, (int, float)) else float(v.get("verdict") == "yes")


class _Recorded:
    """The embedded judge's feature rows of every request it answered during a calibration, found again by what a
    verdict record knows: the family, the question, the item's id and text, and the reference it was judged with."""

    def __init__(self, recorded: list[tuple[Any, dict[str, Any]]]) -> None:
        self.index: dict[tuple[str, str, str, str], list[tuple[str, list[Any]]]] = {}
        for req, rows in recorded:
            fam = family_of(req.task, req.reference_kind)
            for it in req.items:
                if it.id in rows:
                    self.index.setdefault((fam, req.input, it.id, it.text), []).append(
                        (req.reference or "", rows[it.id]))

    def rows_of(self, fam: str, tc: Any) -> Callable[[str, str], list[Any] | None]:
        want = (tc.actual_output if fam.endswith(".actual_output") else tc.expected_output) or ""

        def find(vid: str, text: str) -> list[Any] | None:
            got = self.index.get((fam, tc.input, vid, text))
            if not got:
                return None
            return next((rows for ref, rows in got if ref == want), got[0][1])

        return find


# ------------------------------------------------------------------------------------------------ fitting
def _accuracy(c: tuple[int, int, int, int]) -> float | None:
    total = sum(c)
    return (c[0] + c[3]) / total if total else None


def _best_threshold(items: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """The threshold (a midpoint between distinct confidences) with the highest kappa, ties to the one nearest 0.5;
    items without a confidence keep their verdict. None when the confidences take fewer than two values."""
    scored = sorted(((it["confidence"], it["label"]) for it in items if it["confidence"] is not None),
                    key=lambda x: -x[0])
    fixed = confusion((it["verdict"], it["label"]) for it in items if it["confidence"] is None)
    pos = sum(1 for _, label in scored if label)
    neg = len(scored) - pos
    best: tuple[float, float] | None = None
    tp = fp = 0
    i = 0
    while i < len(scored):
        c = scored[i][0]
        while i < len(scored) and scored[i][0] == c:  # every item at this confidence becomes yes together
            tp += scored[i][1]
            fp += not scored[i][1]
            i += 1
        if i == len(scored):
            break
        t = (c + scored[i][0]) / 2
        k = cohen_kappa(tp + fixed[0], fp + fixed[1], pos - tp + fixed[2], neg - fp + fixed[3])
        if k is None:
            continue
        if best is None or k > best[1] + 1e-12 or (
                abs(k - best[1]) <= 1e-12 and abs(t - JUDGE_THRESHOLD) < abs(best[0] - JUDGE_THRESHOLD)):
            best = (t, k)
    return best


def _apply(items: Sequence[dict[str, Any]], t: float | None) -> list[tuple[bool, bool]]:
    return [((it["confidence"] >= t) if t is not None and it["confidence"] is not None else it["verdict"],
             it["label"]) for it in items]


def _enough(items: Sequence[dict[str, Any]]) -> str | None:
    """Why these items are too few to fit a threshold on, or None."""
    scored = [it for it in items if it["confidence"] is not None]
    pos = sum(1 for it in scored if it["label"])
    if not scored:
        return "the judge reported no confidences, and a threshold needs them"
    if len(scored) < MIN_ITEMS or pos < MIN_EACH or len(scored) - pos < MIN_EACH:
        return (f"too few labelled items with a confidence ({len(scored)}: {pos} yes, {len(scored) - pos} no); "
                f"fitting needs at least {MIN_ITEMS}, with {MIN_EACH} of each label")
    return None


def fit_threshold(items: Sequence[dict[str, Any]], *, folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Fit one family's decision threshold on ``items`` (dicts with ``confidence``, ``verdict``, ``label`` and
    ``case``, the case each belongs to), maximising Cohen's kappa.

    Returns ``{"fitted": False, "why": ...}`` when there are too few items of either label or no confidences; else
    the threshold, kappa and accuracy before (the judge's own verdicts) and after (in-sample, which flatters), and
    ``kappa_after_cv``: kappa of verdicts each made by a threshold fitted without that item's case
    (``folds``-fold cross-validation over cases; a fold too small to fit keeps the judge's own verdicts). When the
    cross-validated kappa is below the judge's own, the threshold would make the judge worse: ``fitted`` is False,
    with ``why`` and the ``rejected_threshold``.
    """
    before = confusion((it["verdict"], it["label"]) for it in items)
    scored = [it for it in items if it["confidence"] is not None]
    pos = sum(1 for it in scored if it["label"])
    base = {"items": len(items), "with_confidence": len(scored), "positives": pos, "negatives": len(scored) - pos,
            "kappa_before": cohen_kappa(*before), "accuracy_before": _accuracy(before)}
    why = _enough(items)
    if why is not None:
        return {"fitted": False, "why": why, **base}
    best = _best_threshold(items)
    if best is None:
        return {"fitted": False, "why": "every item has the same confidence, so no threshold separates them",
                **base}
    t, _ = best
    after = confusion(_apply(items, t))
    cases = sorted({str(it["case"]) for it in items})
    rng = random.Random(seed)
    rng.shuffle(cases)
    k = min(folds, len(cases))
    cv_rows: list[tuple[bool, bool]] = []
    if k >= 2:
        fold_of = {c: i % k for i, c in enumerate(cases)}
        for f in range(k):
            train = [it for it in items if fold_of[str(it["case"])] != f]
            test = [it for it in items if fold_of[str(it["case"])] == f]
            fit = _best_threshold(train) if _enough(train) is None else None
            cv_rows += _apply(test, fit[0] if fit else None)
    out: dict[str, Any] = {"fitted": True, "threshold": round(t, 6), **base, "kappa_after": cohen_kappa(*after),
                           "accuracy_after": _accuracy(after),
                           "kappa_after_cv": cohen_kappa(*confusion(cv_rows)) if cv_rows else None,
                           "folds": k if k >= 2 else 0}
    # A threshold that does worse than the judge's own verdicts on cases it was not fitted on would make a judge
    # loaded from the file worse: it is reported, never saved.
    kb, kcv = out["kappa_before"], out["kappa_after_cv"]
    if kb is not None and kcv is not None and kcv < kb - 1e-12:
        out["fitted"] = False
        out["rejected_threshold"] = out.pop("threshold")
        out["why"] = (f"the best threshold on these labels ({t:.3f}) does worse than the judge's own verdicts on cases "
                      f"it was not fitted on (kappa {kcv:.3f} cross-validated against {kb:.3f}), so none is saved; "
                      "label more cases and calibrate again")
    return out


# ------------------------------------------------------------------------------------------------ report
def _spec_of(model: Any, resolved: Any) -> str:
    """The model spec a calibration file names: what the user passed, else what resolve_model reads back."""
    if isinstance(resolved, CalibratedJudge):
        return resolved.calibration.judge
    if isinstance(model, str) and not model.strip().startswith("@"):
        return model.strip()
    name = judge_name(resolved)
    if is_embedded_judge(name):
        return embedded_spec(name)
    return name


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


async def acalibrate(cases: Sequence[Any], model: Any, *, judge_spec: str | None = None,
                     options: JudgeOptions | None = None, resamples: int = 2000, folds: int = 5,
                     seed: int = 0, verdicts: VerdictStore | None = None) -> dict[str, Any]:
    """The calibration report of ``model`` on the labelled ``cases`` (see the module docstring), as a JSON-ready dict:
    one key per verdict family judged, ``metrics``, ``thresholds`` (fitted, family -> threshold), ``judge``,
    ``errors`` (cases the judge failed on; they are left out of the figures). Raises ConfigurationError when a
    case's labels do not line up with it. ``verdicts`` (a results store): what the judge said of each case is kept
    there and read back next time (``_judged.JudgedCache``), so only the cases whose judged work changed are
    judged again; the report is the same."""
    unused: list[dict[str, Any]] = []
    checked = _check(cases, unused)
    resolved = resolve_model(model)
    raw = resolved.judge if isinstance(resolved, CalibratedJudge) else resolved
    ctx = RunContext(options=options or JudgeOptions())
    taught = _taught()
    first = _fields(taught)
    jobs = [(i, tc, labels, cls) for i, (tc, labels) in enumerate(checked) for cls in taught
            if labels.get(str(cls.label_field)) is not None and _can_score(cls, first, tc)]
    learns = callable(getattr(raw, "recording", None)) and callable(getattr(raw, "learn", None))
    recorder: Any = raw.recording() if learns else contextlib.nullcontext([])  # type: ignore[attr-defined]
    kept = JudgedCache(verdicts, judge_identity(resolved), options, learns=learns) if verdicts is not None else None
    hits = await kept.hits([(i, tc, labels, str(cls.label_field), cls.key) for i, tc, labels, cls in jobs],
                           _pairs) if kept is not None else {}
    with use_run_context(ctx), recorder as recorded:
        judged = await asyncio.gather(*(_judge_field(resolved, tc, labels, cls)
                                        for n, (_, tc, labels, cls) in enumerate(jobs) if n not in hits))
    found = _Recorded(list(recorded)) if learns else None
    fresh = iter(judged)
    per_family: dict[str, list[dict[str, Any]]] = {}
    per_metric: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, Any]] = []
    seen: set[tuple[str, int, str]] = set()  # (family, case, item): an item two metrics of a family judge counts once
    for n, (i, tc, labels, cls) in enumerate(jobs):
        fam, field = str(cls.calibration_key()), str(cls.label_field)
        cid = _case_id(tc, i)
        if n in hits:
            got, rows_of = hits[n]
        else:
            got = next(fresh)
            rows_of = found.rows_of(fam, tc) if found is not None else None
            if kept is not None:
                rows_of = kept.asked(n, got, rows_of)
        if "error" in got:
            errors.append({"case": cid, "family": fam, "metric": got["metric"], "error": got["error"]})
            continue
        for rec in _pairs(tc, labels, field, got["verdicts"], rows_of):
            if (fam, i, rec["item"]) in seen:
                continue
            seen.add((fam, i, rec["item"]))
            per_family.setdefault(fam, []).append({"case": cid, "input": tc.input, **rec})
        gold = gold_score(cls.key, tc, labels, strict=True)
        if gold is None:  # not reached: every label field has a gold form, and strict=True raises on a misfit
            continue
        m = per_metric.setdefault(cls.key, {"metric": got["metric"], "judged": [], "gold": []})
        m["judged"].append(float(got["score"]))
        m["gold"].append(float(gold))
    report: dict[str, Any] = {"judge": judge_name(resolved), "judge_spec": judge_spec if judge_spec and not judge_spec.strip().startswith("@")
                              else _spec_of(model, resolved),
                              "judge_identity": judge_identity(raw), "cases": len(checked)}
    thresholds: dict[str, float] = {}
    learned: dict[str, dict[str, list[float]]] = {}
    memory: dict[str, dict[str, Any]] = {}
    any_confidence = False
    for fam in dict.fromkeys(str(cls.calibration_key()) for cls in taught):
        items = per_family.get(fam)
        if not items:
            continue
        by_case: dict[str, list[tuple[bool, bool]]] = {}
        for it in items:
            by_case.setdefault(it["case"], []).append((it["verdict"], it["label"]))
        agreement = binary_agreement(list(by_case.values()), resamples=resamples, seed=seed).to_dict()
        jurors = _juror_agreement(items, resamples, seed)
        if jurors:
            agreement["jurors"] = jurors
        rows = [it.pop("_rows", None) for it in items]
        node_read = [it.pop("_node_read", None) for it in items]
        if learns and all(r is not None for r in rows):
            fit = _learn_family(raw, items, rows, resamples=resamples, seed=seed, family=fam, node_read=node_read)
            if fit.get("weights"):
                learned[fam] = fit["weights"]
            if fit.get("memory"):
                memory[fam] = fit["memory"]
            any_confidence = True
        else:
            fit = fit_threshold(items, folds=folds, seed=seed)
            any_confidence = any_confidence or fit["with_confidence"] > 0
            if fit.get("fitted"):
                thresholds[fam] = fit["threshold"]
            fit["kappa_cv"] = fit.get("kappa_after_cv") if fit.get("fitted") else fit.get("kappa_before")
        agreement["threshold"] = fit
        # the family's kappa as the calibrated judge will decide it, measured on cases it was not fitted on (the
        # judge's own kappa where nothing was fitted): what "trust this family" reads (issue 46)
        agreement["kappa_cv"] = fit.get("kappa_cv")
        agreement["kappa_cv_ci"] = fit.get("kappa_cv_ci")
        agreement["disagreements"] = [it for it in items if it["verdict"] != it["label"]]
        report[fam] = agreement
    report["metrics"] = {key: {"metric": m["metric"], "cases": len(m["judged"]), "judged_mean": _mean(m["judged"]),
                               "gold_mean": _mean(m["gold"]), "mae": mae(m["judged"], m["gold"]),
                               "spearman": spearman(m["judged"], m["gold"])} for key, m in per_metric.items()}
    report["thresholds"] = thresholds
    report["learned"] = learned
    report["memory"] = memory
    report["confidences"] = any_confidence
    if not any_confidence:
        report["note"] = ("This judge reports no confidences (a chat model's verdicts are yes/no), so only agreement "
                          "is measured: fitting a threshold needs a confidence per verdict, as the embedded judge "
                          "gives.")
    if kept is not None:
        await kept.save()
    report["errors"] = errors
    # labels whose node the case's retrieval did not bring back: listed, never applied to another node
    report["unused_labels"] = unused
    report["advice"] = advice(report)
    return report


MEMORY_FAMILIES = ("sentence_relevance", "node_usefulness")


def _learn_family(judge: Any, items: list[dict[str, Any]], rows: list[Any], *, resamples: int,
                  seed: int, family: str = "", node_read: list[str | None] | None = None) -> dict[str, Any]:
    """The embedded judge's weights for one family fitted on its labelled items (``LocalJudge.learn``: shrinkage
    toward the shipped weights, leave one case out), with the figures the report and the file keep."""
    reads = node_read or [None] * len(items)
    units = [{"case": it["case"], "label": it["label"], "rows": r, "input": it.get("input") or "",
              "text": read or it.get("text") or ""} for it, r, read in zip(items, rows, reads, strict=True)]
    got = judge.learn(units, seed=seed)
    labels = [u["label"] for u in units]
    # a label memory (node families): close questions on the same node lean on their labels, kept only when it
    # beats the judge (as fitted above, out of sample) on cases its labels were not taken from
    mem: dict[str, Any] = {"accepted": False}
    if callable(getattr(judge, "learn_memory", None)) and family in MEMORY_FAMILIES:
        mem = judge.learn_memory(units, got["cv"])
        if mem["accepted"]:
            got = {**got, "cv": mem["cv"]}

    def conf_of(confs: list[float]) -> tuple[int, int, int, int]:
        return confusion((c >= 0.5, y) for c, y in zip(confs, labels, strict=True))

    before, after, cv = conf_of(got["prior"]), conf_of(got["fitted"]), conf_of(got["cv"])
    by_case: dict[str, list[tuple[bool, bool]]] = {}
    for u, c in zip(units, got["cv"], strict=True):
        by_case.setdefault(str(u["case"]), []).append((c >= 0.5, u["label"]))
    cv_agree = binary_agreement(list(by_case.values()), resamples=resamples, seed=seed).to_dict()
    pos = sum(labels)
    out: dict[str, Any] = {
        "fitted": bool(got["accepted"]), "method": "weights shrunk toward the shipped ones",
        "items": len(units), "with_confidence": len(units), "positives": pos, "negatives": len(units) - pos,
        "cases": len(by_case), "folds": got["folds"], "lambda": got["lambda"],
        "kappa_before": cohen_kappa(*before), "accuracy_before": _accuracy(before),
        "kappa_after": cohen_kappa(*after), "accuracy_after": _accuracy(after),
        "kappa_cv": cv_agree.get("kappa"), "kappa_cv_ci": cv_agree.get("kappa_ci"),
        "accuracy_cv": _accuracy(cv), "logloss_before": round(got["logloss_prior"], 6),
        "logloss_cv": None if got["logloss_cv"] is None else round(got["logloss_cv"], 6)}
    out["kappa_after_cv"] = out["kappa_cv"] if got["accepted"] or mem["accepted"] else None
    if got["accepted"]:
        out["weights"] = got["weights"]
    else:
        out["why"] = got.get("why", "")
    out["memory_kept"] = bool(mem["accepted"])
    if mem["accepted"]:
        out["fitted"] = True
        out["method"] = ("weights shrunk toward the shipped ones, and a memory of your labels" if got["accepted"] else
                         "a memory of your labels (the shipped weights kept)")
        out["memory"] = {"kappa": mem["kappa"], "beta": mem["beta"],
                         "entries": [[str(u["input"]), str(u["text"]), bool(u["label"])] for u in units]}
        out.pop("why", None)
    elif mem.get("why"):
        out["memory_why"] = mem["why"]
    return out


def _juror_agreement(items: Sequence[dict[str, Any]], resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """For a jury's verdicts: each juror's agreement with the labels on the same items (kappa, accuracy, TPR, TNR
    with their intervals), by juror name, in the jury's order."""
    names: list[str] = []
    for it in items:
        for n in it.get("jurors") or {}:
            if n not in names:
                names.append(n)
    out = {}
    for n in names:
        by_case: dict[str, list[tuple[bool, bool]]] = {}
        for it in items:
            if n in (it.get("jurors") or {}):
                by_case.setdefault(it["case"], []).append((it["jurors"][n], it["label"]))
        got = binary_agreement(list(by_case.values()), resamples=resamples, seed=seed).to_dict()
        out[n] = {k: got.get(k) for k in ("items", "accuracy", "accuracy_ci", "kappa", "kappa_ci", "tpr", "tpr_ci",
                                          "tnr", "tnr_ci")}
    return out


TRUST_KAPPA = 0.6  # "substantial" agreement (Landis and Koch): the bar a metric's verdicts must clear to gate on


def advice(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One piece of advice in words per metric whose verdict family was calibrated: ``"trust"`` (the lower end of
    kappa's 95% interval is at least ``TRUST_KAPPA``), ``"use with the calibrated file"`` (a threshold was fitted and
    its cross-validated kappa reaches ``TRUST_KAPPA`` and beats the judge's own verdicts), else ``"do not gate on
    this metric with this judge"``; with the kappa and interval behind it, and ``too_few`` when the family has fewer
    labelled items than the threshold rule needs (``MIN_ITEMS``, ``MIN_EACH`` of each label)."""
    out = []
    for cls in _taught():
        fam = str(cls.calibration_key())
        got = report.get(fam)
        if not isinstance(got, dict):
            continue
        kappa, ci = got.get("kappa"), got.get("kappa_ci")
        fit = got.get("threshold") or {}
        conf = got.get("confusion") or {}
        yes = int(conf.get("tp", 0)) + int(conf.get("fn", 0))
        items = int(got.get("items") or 0)
        cv = fit.get("kappa_after_cv") if fit.get("fitted") else None
        single = one_class(*(int(conf[k]) for k in ("tp", "fp", "fn", "tn"))) \
            if all(k in conf for k in ("tp", "fp", "fn", "tn")) else None
        if single:  # kappa is 0 or 1 by arithmetic: it cannot vouch for the judge
            verdict = "do not gate on this metric with this judge"
            why = (f"kappa n/a ({single}): agreement cannot be measured on one class; label items of both kinds "
                   "(nodes that do and do not answer)")
        elif ci and ci[0] is not None and ci[0] >= TRUST_KAPPA:
            verdict = "trust"
            why = f"kappa {kappa:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]: the judge agrees with your labels substantially"
        elif cv is not None and cv >= TRUST_KAPPA and cv > (fit.get("kappa_before") or -1.0) and not (
                "lambda" in fit and _too_few(items, yes)):
            verdict = "use with the calibrated file"
            how = (f"the fitted threshold {fit['threshold']:.3f}" if "threshold" in fit else
                   f"the weights fitted on {fit.get('items')} of your labels")
            why = f"kappa {_k(kappa, ci)} with the judge's own verdicts, {cv:.2f} cross-validated with {how}"
        else:
            verdict = "do not gate on this metric with this judge"
            why = _why_not(kappa, ci, cv)
        too_few = _too_few(items, yes)
        out.append({"metric": cls.name, "family": fam, "advice": verdict, "why": why,
                    "kappa": kappa, "kappa_ci": ci, "items": items, "yes": yes, "too_few": too_few})
    return out


def _too_few(items: int, yes: int) -> bool:
    """Fewer labelled items than a stable figure needs: weights are still fitted (shrinkage keeps them near the
    shipped ones), but the advice does not rest on them."""
    return items < MIN_ITEMS or yes < MIN_EACH or items - yes < MIN_EACH


def _why_not(kappa: Any, ci: Any, cv: Any) -> str:
    """Why a family falls short of ``TRUST_KAPPA``, in words that agree with the figures printed beside them: when
    kappa itself reaches the bar, it is the lower end of its interval that does not (given to three decimals, so a
    0.597 is never shown as a 0.60 that seems to pass)."""
    fitted = f"; {cv:.3f} cross-validated with a fitted threshold" if cv is not None else ""
    if kappa is None:
        return "no kappa could be computed (every label, or every verdict, is the same)" + fitted
    lo = ci[0] if ci and ci[0] is not None else None
    if kappa >= TRUST_KAPPA and lo is not None:
        return (f"kappa {_k(kappa, ci)} reaches {TRUST_KAPPA}, but the lower end of its 95% interval, {lo:.3f}, is "
                f"below {TRUST_KAPPA} (substantial agreement): these labels cannot yet show that the judge agrees "
                "substantially" + fitted)
    return f"kappa {_k(kappa, ci)} is below {TRUST_KAPPA} (substantial agreement)" + fitted


def _k(kappa: Any, ci: Any) -> str:
    if kappa is None:
        return "n/a"
    if ci and ci[0] is not None:
        return f"{kappa:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{kappa:.2f}"


def calibrate(cases: Sequence[Any], model: Any, **kwargs: Any) -> dict[str, Any]:
    """Sync form of ``acalibrate`` (runs on contextjudge's shared loop)."""
    return run_sync(acalibrate(cases, model, **kwargs))


def calibration_of(report: dict[str, Any]) -> Calibration | None:
    """The calibration file's contents for a report with fitted thresholds or weights, else None."""
    if not report.get("thresholds") and not report.get("learned") and not report.get("memory"):
        return None
    fams = dict.fromkeys([*(report.get("thresholds") or {}), *(report.get("learned") or {}),
                          *(report.get("memory") or {})])
    fitted = {fam: {k: v for k, v in report[fam]["threshold"].items() if k not in ("fitted", "weights", "memory")}
              for fam in fams}
    return Calibration(judge=report["judge_spec"], thresholds=dict(report.get("thresholds") or {}),
                       judge_name=report["judge"].removesuffix("+calibrated"),
                       judge_identity=report["judge_identity"], fitted=fitted,
                       learned=dict(report.get("learned") or {}), memory=dict(report.get("memory") or {}))

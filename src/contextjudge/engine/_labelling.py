"""Labelling a run's cases (issue 37; a room of its own since issue 49): the two queues, a case as a person labels
it, one label checked and written, and the figures beside the labels, callable from Python as from the labelling
page (``contextjudge label --serve``, whose server in ``cli/_label_serve.py`` only parses HTTP and checks tokens).

Two queues: ``calibrate`` orders the run's cases by what a label teaches (``calibrate_order``: the most uncertain
verdict first, round-robin over metric and pass/fail so both signs of every family get labels); ``estimate`` is a
seeded uniform random order, the only labels the bias-corrected means use. The figures (``LabelSession.figures``)
are ``acalibrate``'s report, the very dict ``calibrate --json`` prints, plus the bias-corrected means of the
estimate-queue labels (``corrected_means``), two annotators' agreement with each other (``annotator_agreement``),
the labels given per queue (``labels_given``) and the labels a target kappa interval width needs
(``labels_needed``). What the judge said of each labelled case is kept in the store (``_judged``), so a refresh
after a new label judges only what changed.

Each label goes to the store through ``ResultsStore.give_label``: the case's labels, their log row and queue tag in
one transaction that holds the case's labels row, so two sessions (two pages, two processes, a ``label`` import)
on one store never lose a label.
"""

from __future__ import annotations

import math
import random
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store import ResultsStore, RunReads

__all__ = ["QUEUES", "LabelSession", "annotator_agreement", "calibrate_order", "corrected_means", "labels_given",
           "labels_needed"]

QUEUES = ("calibrate", "estimate")  # as store.give_label checks them


# ------------------------------------------------------------------------------------------------ the queues
def calibrate_order(keys: list[str], results: dict[tuple[str, str], Any]) -> list[str]:
    """The ``calibrate`` queue: per case its most uncertain judged metric (``_fit_doubt``: a verdict whose confidence
    is nearest 0.5 or whose jurors or tiers disagree, else the score nearest its threshold); cases grouped
    by (metric, pass/fail), each group nearest-first, then dealt round-robin so every family's positives and
    negatives get labels early; cases with no judged score last, in run order."""
    best: dict[str, tuple[float, str, bool]] = {}
    for (key, metric), r in results.items():
        score, threshold = getattr(r, "score", None), getattr(r, "threshold", None)
        if score is None or threshold is None or key not in keys:
            continue
        d = _fit_doubt(abs(float(score) - float(threshold)), _verdict_doubt(getattr(r, "verdicts", None) or []))
        if key not in best or d < best[key][0]:
            best[key] = (d, metric, float(score) >= float(threshold))
    groups: dict[tuple[str, bool], list[tuple[float, str]]] = {}
    for key, (d, metric, sign) in best.items():
        groups.setdefault((metric, sign), []).append((d, key))
    lanes = sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])
    out: list[str] = []
    while any(lanes):
        for lane in lanes:
            if lane:
                out.append(lane.pop(0)[1])
    return out + [k for k in keys if k not in best]


def estimate_order(keys: list[str], seed: int = 0) -> list[str]:
    """The ``estimate`` queue: the cases in a uniform random order drawn with ``seed``."""
    shuffled = list(keys)
    random.Random(seed).shuffle(shuffled)
    return shuffled


def _fit_doubt(score_distance: float, doubt: float) -> float:
    """How little a case's labels would move the fit (lower: more): a verdict nearest its decision boundary (a
    confidence nearest 0.5, or jurors or tiers that disagree) teaches the fitted weights most, so every case with one
    comes first, by it; a judge without confidences falls back on the score's distance from its threshold, after
    them (issue 47)."""
    return doubt if doubt < 1.0 else 1.0 + score_distance


def _verdict_doubt(verdicts: list[Any]) -> float:
    """How near a result's verdicts come to going the other way: -1 when jurors (a ``Jury``) or tiers (a
    ``TieredJudge`` that escalated) disagree on an item, else the least distance of a verdict's confidence from 0.5
    (1.0 when no verdict has one)."""
    out = 1.0
    for v in verdicts:
        if not isinstance(v, dict):
            continue
        jurors = v.get("jurors")
        said = {bool(j.get("verdict")) for j in jurors.values() if isinstance(j, dict)} \
            if isinstance(jurors, dict) else set()
        if len(said) > 1 or ("cheap_verdict" in v and v.get("cheap_verdict") != v.get("verdict")):
            return -1.0
        conf = v.get("confidence")
        if isinstance(conf, (int, float)):
            out = min(out, abs(float(conf) - 0.5))
    return out


# ------------------------------------------------------------------------------------------------ the figures
def annotator_agreement(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per label field and pair of annotators, Cohen's kappa over the items both labelled (each one's latest
    label; a withdrawn label counts as none). ``log``: ``store.label_log()``."""
    from ..stats import cohen_kappa, confusion  # noqa: PLC0415

    latest: dict[tuple[str, str, str, str], bool | None] = {}
    for r in log:
        latest[(r["field"], str(r["who"] or "anonymous"), r["case_key"], r["item"])] = r["value"]
    out = []
    fields = sorted({f for f, _, _, _ in latest})
    for field in fields:
        by_who: dict[str, dict[tuple[str, str], bool]] = {}
        for (f, who, case, item), v in latest.items():
            if f == field and v is not None:
                by_who.setdefault(who, {})[(case, item)] = bool(v)
        people = sorted(by_who)
        for i, a in enumerate(people):
            for b in people[i + 1:]:
                both = sorted(set(by_who[a]) & set(by_who[b]))
                if not both:
                    continue
                tp, fp, fn, tn = confusion((by_who[a][k], by_who[b][k]) for k in both)
                out.append({"field": field, "a": a, "b": b, "items": len(both),
                            "agreement": (tp + tn) / len(both), "kappa": cohen_kappa(tp, fp, fn, tn)})
    return out


def labels_given(log: list[dict[str, Any]]) -> dict[str, int]:
    """Per queue, the items that carry a label now: each (annotator, case, field, item) counted once, by its latest
    label (a re-label is the same label changed, a withdrawn one counts as none), under the queue it came from."""
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in log:
        if r["field"] != "note":
            latest[(str(r["who"] or ""), r["case_key"], r["field"], r["item"])] = r
    return {q: sum(r["queue"] == q and r["value"] is not None for r in latest.values()) for q in QUEUES}


def labels_needed(report: dict[str, Any] | None, width: float) -> dict[str, int | None]:
    """Per family, roughly how many more labelled cases bring kappa's interval to ``width`` (an interval's width
    shrinks as one over the square root of the cases). ``report``: ``acalibrate``'s."""
    from ..judges import FAMILIES  # noqa: PLC0415

    out: dict[str, int | None] = {}
    for f in FAMILIES:
        fam = (report or {}).get(f)
        if not fam or not fam.get("kappa_ci") or not fam.get("cases"):
            continue
        lo, hi = fam["kappa_ci"]
        n = fam["cases"]
        out[f] = max(0, math.ceil(n * ((hi - lo) / width) ** 2) - n) if hi > lo else 0
    return out


def corrected_means(store: RunReads, run_id: str, metrics: list[str] | None = None) -> dict[str, Any]:
    """A run's bias-corrected means as the report computes them (``fill_gold_scores`` then
    ``EvaluationResult.corrected``), per metric (``metrics``, default the run's): only cases labelled from the
    estimate queue (or from a file) count; None where no case of it carries labels."""
    from dataclasses import asdict  # noqa: PLC0415

    from ..metrics import fill_gold_scores  # noqa: PLC0415

    result = fill_gold_scores(store.load_run(run_id))
    out = {}
    for metric in sorted(metrics if metrics is not None else result.metric_names()):
        est = result.corrected(metric)
        out[metric] = None if est is None else {
            "corrected": asdict(est.corrected), "judged": asdict(est.judged), "n_labelled": est.n_labelled}
    return out


# ------------------------------------------------------------------------------------------------ the session
class LabelSession:
    """Labelling one run of a store: the cases shown (``cases``, by key), the two queues (``queues``), a case as a
    person labels it (``case``), one label checked and written (``give_label``; ``give`` takes the page's JSON
    body), and the figures (``figures``) with ``judge``. ``run``: an id, name or prefix (default the newest run)."""

    def __init__(self, store: ResultsStore, judge: Any, *, run: str | None = None, judge_spec: str | None = None,
                 seed: int = 0, target_width: float = 0.2) -> None:
        self.store, self.judge, self.judge_spec = store, judge, judge_spec
        self.run_ref = run
        self.run_id = store.resolve_run(run)
        from ..cases import LLMTestCase  # noqa: PLC0415

        self.cases = {sc.case_key: sc.test_case for sc in store.load_cases(self.run_id)
                      if isinstance(sc.test_case, LLMTestCase)}  # the single-turn cases: those with nodes
        keys = list(self.cases)
        self.results = store.completed_results(self.run_id)
        self.queues = {"calibrate": calibrate_order(keys, self.results), "estimate": estimate_order(keys, seed)}
        self.target_width = target_width
        self._figures_lock = threading.Lock()  # two polling tabs compute the figures once
        self._figures: tuple[int, dict[str, Any]] | None = None

    # ------------------------------------------------------------------------------------------------ cases
    def case(self, key: str) -> dict[str, Any]:
        """The case ``key`` as the page shows it: its input and outputs, its nodes (rank, text, source, ``ref``,
        their labels now), the expected output's statements and the answer's, each with its label now."""
        from ..cases.labels import NODE_FIELDS, node_ref  # noqa: PLC0415
        from ..metrics import gold_statements  # noqa: PLC0415

        tc = self.cases[key]
        got = self._stored_labels(key)
        nodes = []
        entries = got.get("nodes") or []
        for rank, node in enumerate(tc.retrieval_context or []):
            ref = node_ref(node)
            hit: dict[str, Any] = next((e for e in entries if (ref["id"] and e.get("id") == ref["id"])
                        or e.get("hash") == ref["hash"]), {})
            meta = getattr(node, "metadata", None) or {}
            source = (meta.get("source") or meta.get("title") or meta.get("url") or meta.get("file_name")
                      or ref["id"] or "") if isinstance(meta, dict) else (ref["id"] or "")
            nodes.append({"rank": rank + 1, "text": str(getattr(node, "text", node)), "source": str(source),
                          "ref": {"id": ref["id"], "hash": ref["hash"]},
                          "labels": {f: hit.get(f) for f in NODE_FIELDS}})
        pairs = dict(zip(got.get("statements") or [], got.get("statement_labels") or [], strict=False))
        statements = [{"text": s, "label": pairs.get(s)}
                      for s in gold_statements(tc, {}) or []] if tc.expected_output else []
        # the answer's statements as faithfulness splits them, whenever the case has an actual output (calibrate
        # judges faithfulness from these labels whether or not the run scored it)
        said = dict(zip(got.get("answer_statements") or [], got.get("answer_statement_labels") or [], strict=False))
        answer = [{"text": s, "label": said.get(s)}
                  for s in gold_statements(tc, {}, "answer_statement_labels")] if tc.actual_output else []
        return {"key": key, "input": tc.input, "expected_output": tc.expected_output,
                "actual_output": tc.actual_output, "nodes": nodes, "statements": statements,
                "answer_statements": answer}

    def _stored_labels(self, key: str) -> dict[str, Any]:
        for r in self.store.export_labels():
            if r["key"] == key:
                return r
        return {}

    def give(self, body: Any) -> dict[str, Any]:
        """One label as the page sends it (a JSON object ``{"key", "field", "item", "value", "who", "queue",
        "note"}``), checked (``give_label``); ConfigurationError says what is wrong."""
        from ..errors import ConfigurationError  # noqa: PLC0415

        if not isinstance(body, dict):
            raise ConfigurationError(f"the body is a JSON {type(body).__name__}, not one label: send one JSON object "
                                     '{"key", "field", "item", "value"} per label.')
        self.give_label(body.get("key"), str(body.get("field")), body.get("item"), body.get("value"),
                        who=(str(body.get("who") or "") or None), queue=body.get("queue"),
                        note=(str(body.get("note") or "") or None))
        return {"ok": True}

    def give_label(self, key: Any, field: str, item: Any, value: Any, *, who: str | None = None,
                   queue: str | None = None, note: str | None = None) -> None:
        """One label on a case of this run, checked against the case (its nodes, its statements) before anything
        is written, then written in one store transaction (``store.give_label``). ``field``: a label field of
        ``cases.labels`` or ``"note"``; ``item``: a node's ``node_ref`` or a statement's text; ``value``: True,
        False, or None (withdraw). ConfigurationError says what is wrong."""
        from ..errors import ConfigurationError  # noqa: PLC0415

        if not isinstance(key, str) or key not in self.cases:
            raise ConfigurationError(f"no case {key!r} in run {self.run_id}.")
        if value is not None and not isinstance(value, bool):
            raise ConfigurationError("a label's value is true, false or null (withdraw).")
        if field != "note":
            self._check_item(key, field, item)
        self.store.give_label(key, field, item, value, who=who, queue=queue, note=note, run_id=self.run_id)

    def _check_item(self, key: str, field: str, item: Any) -> None:
        """A label names a node or a statement of this case: the page never sends another, so one that does is
        refused rather than stored where no metric finds it."""
        from ..cases.labels import LABEL_FIELDS, NODE_FIELDS, node_ref  # noqa: PLC0415
        from ..errors import ConfigurationError  # noqa: PLC0415
        from ..metrics import gold_statements  # noqa: PLC0415

        tc = self.cases[key]
        if field not in LABEL_FIELDS:
            raise ConfigurationError(f"unknown label field {field!r}: one of {', '.join(LABEL_FIELDS)} (or 'note').")
        if field in NODE_FIELDS:
            if not isinstance(item, dict) or not (item.get("id") or item.get("hash")):
                raise ConfigurationError("a node label names its node: give its 'hash' or 'id' (node_ref).")
            refs = [node_ref(n) for n in tc.retrieval_context or []]
            if not any((item.get("id") and r["id"] == item.get("id")) or (item.get("hash") and r["hash"] ==
                       item.get("hash")) for r in refs):
                raise ConfigurationError(f"case {key!r} retrieved no node with id {item.get('id')!r} / hash "
                                         f"{item.get('hash')!r}: label one of its {len(refs)} node(s).")
            return
        answer = field == "answer_statement_labels"
        source = tc.actual_output if answer else tc.expected_output
        texts = (gold_statements(tc, {}, "answer_statement_labels") if answer else gold_statements(tc, {})) \
            if source else []
        if not isinstance(item, str) or item not in (texts or []):
            what = "actual output" if answer else "expected output"
            raise ConfigurationError(f"{str(item)[:80]!r} is not a statement of case {key!r}'s {what}: label one "
                                     f"of its {len(texts or [])} statement(s), as the page shows them.")

    # ---------------------------------------------------------------------------------------------- figures
    def figures(self) -> dict[str, Any]:
        """``acalibrate``'s report on the store's labelled cases (what ``calibrate --json --store`` prints), and the
        page's own figures beside it; recomputed only when a label was given since the last call (by this session
        or any other writer on the store), and then only the cases whose judged work changed are judged (what the
        judge said of the others is read back from the store)."""
        with self._figures_lock:
            return self._compute_figures()

    def _compute_figures(self) -> dict[str, Any]:
        from .._aio import run_sync  # noqa: PLC0415
        from ._calibrate import acalibrate  # noqa: PLC0415
        from ._judged import kept_verdicts  # noqa: PLC0415

        log = self.store.label_log()
        if self._figures is not None and self._figures[0] == len(log):
            return self._figures[1]
        cases = self.store.labelled_cases(run=self.store.resolve_run(self.run_ref) if self.run_ref else None)
        report = run_sync(acalibrate(cases, self.judge, judge_spec=self.judge_spec,
                                     verdicts=kept_verdicts(self.store))) \
            if cases else None
        from ..judges import families  # noqa: PLC0415

        out = {"calibrate": report, "annotators": annotator_agreement(log),
               # the page's rows, in the families' order: every calibration key the registered families have
               "families": list(dict.fromkeys(k for fam in families() for k in fam.calibration_keys()
                                             if report is not None and k in report)),
               "labels": labels_given(log),
               "needed": labels_needed(report, self.target_width), "target_width": self.target_width,
               "corrected": corrected_means(self.store, self.run_id, sorted({m for _, m in self.results}))}
        self._figures = (len(log), out)
        return out

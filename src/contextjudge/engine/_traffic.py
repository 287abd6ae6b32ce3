"""Goldens from traffic: the cases a store holds (captured in production, or run by ``eval``) turned into goldens.

    from contextjudge.goldens import from_store
    rows, report = from_store("results.db", labelled=True, limit=200)

Per case: the question (its input); ``expected_context_ids`` from the nodes a person labelled useful (gold labels,
``labels``), else, unless ``labelled=True``, from the nodes the judge called useful in the run's Contextual
Precision verdicts (else Context Utilization's, for traffic scored without a reference), marked ``"expected_context_by": "judge"``; ``expected_output`` from the golden the case already
had, else the app's own answer where a person accepted it (every statement of it labelled supported, or a thumbs-up
in the case's metadata: ``accepted``/``answer_accepted`` true, ``feedback`` "up"/"positive"/1). A case with neither
expected ids nor an expected answer gives no golden. Cases are deduplicated by normalised question and sampled
evenly across (retriever, day) groups, seeded. ``redact`` (the personal-data hook) sees each row before it is kept
and returns it (changed or not), or None to leave it out.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cases.goldens import normalize_input
from ..errors import ConfigurationError
from ..metrics import ContextualPrecisionMetric, ContextUtilizationMetric

if TYPE_CHECKING:
    from ..store import RunReads

__all__ = ["from_store"]

# the per-node verdicts read as "the judge called it useful", best first: usefulness for the expected answer, else
# for the answer the app gave (utilization: what captured traffic without a reference is scored with)
_NODE_METRICS = (ContextualPrecisionMetric.name, ContextUtilizationMetric.name)
_UP = {"up", "positive", "good", "yes", "accepted", "1", "true", "thumbs_up", "👍"}


def _accepted(tc: Any, labels: dict[str, Any] | None) -> bool:
    meta = getattr(tc, "additional_metadata", None) or {}
    for key in ("answer_accepted", "accepted"):
        if meta.get(key) is True:
            return True
    fb = meta.get("feedback", meta.get("user_feedback"))
    if isinstance(fb, dict):
        fb = fb.get("score", fb.get("value", fb.get("rating")))
    if fb is True or (fb is not None and not isinstance(fb, bool) and str(fb).strip().lower() in _UP):
        return True
    stmts = (labels or {}).get("answer_statement_labels") or []
    return bool(stmts) and all(x is True for x in stmts)


def _useful_nodes(tc: Any, tr: Any, labels: dict[str, Any] | None, labelled: bool
                  ) -> tuple[list[Any], str | None, str | None]:
    """The nodes of ``tc`` that should be retrieved, who said so ("person", "judge" or None) and the metric whose
    verdicts said so (the judge's)."""
    from ..cases.labels import resolve_labels  # noqa: PLC0415

    nodes = tc.retrieval_context or []
    if labels:
        view, _unused = resolve_labels(tc, labels)
        marks = view.get("labels") or []
        if any(m is not None for m in marks):
            return [n for n, m in zip(nodes, marks, strict=False) if m is True], "person", None
    if labelled:
        return [], None, None
    prec = next((m for name in _NODE_METRICS for m in tr.metrics_data
                 if m.name == name and not m.error and m.verdicts), None)
    if prec is None:
        return [], None, None
    ranks = [int(v.get("rank") or str(v.get("id", "n0"))[1:] or 0) for v in prec.verdicts
             if v.get("verdict") == "yes"]
    return [nodes[r - 1] for r in ranks if 0 < r <= len(nodes)], "judge", prec.name


def _node_key(node: Any) -> str:
    from ..cases.labels import node_hash  # noqa: PLC0415
    from ..cases.provenance import source_of  # noqa: PLC0415

    doc, _ = source_of(node.metadata)
    return node.id or doc or f"node-{node_hash(node.text)[:12]}"


def from_store(store: RunReads | str | Path, *, run: str | None = None, labelled: bool = False,
               limit: int | None = None, seed: int = 0,
               redact: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Goldens from the cases of ``store`` (a store or its URL/path): of ``run`` (an id or name), else of every run.
    Returns the rows (ready for ``write_goldens``) and a report: cases read, kept, and why the others were left."""
    from ..cases.labels import labels_of  # noqa: PLC0415
    from ..cases.testcase import LLMTestCase  # noqa: PLC0415
    from ..store import open_store  # noqa: PLC0415

    s = open_store(str(store), read_only=True) if isinstance(store, (str, Path)) else store
    runs = [s.resolve_run(run)] if run is not None else [r.run_id for r in s.list_runs()][::-1]
    if not runs:
        raise ConfigurationError("the store holds no runs: capture or evaluate some traffic first.")
    why: dict[str, int] = {}
    candidates: list[tuple[tuple[str, str], dict[str, Any]]] = []
    seen: set[str] = set()
    read = 0

    def skip(reason: str) -> None:
        why[reason] = why.get(reason, 0) + 1

    for run_id in runs:
        when = {r["case_key"]: r["captured_at"] for r in s.cases(run=run_id)}
        for tr in s.iter_test_results(run_id):  # a batch of cases at a time: a large store never sits in memory
            tc = tr.test_case
            key = getattr(tc, "id", None)  # a stored case's id is its key in the store
            read += 1
            if not isinstance(tc, LLMTestCase) or not tc.input:
                skip("not a single-turn case")
                continue
            norm = normalize_input(tc.input)
            if norm in seen:
                skip("duplicate question")
                continue
            labels = labels_of(tc)
            useful, by, judged_by = _useful_nodes(tc, tr, labels, labelled)
            expected = tc.expected_output
            answer_by = "golden" if expected else None
            if not expected and tc.actual_output and _accepted(tc, labels):
                expected, answer_by = tc.actual_output, "person"
            if by is None and not expected:
                skip("no labels" if labelled else "no labels, no judge verdicts, no accepted answer")
                continue
            meta = tc.additional_metadata or {}
            import hashlib  # noqa: PLC0415

            row: dict[str, Any] = {"id": "t-" + hashlib.blake2b(norm.encode(), digest_size=6).hexdigest(),
                                   "input": tc.input}
            if expected:
                row["expected_output"] = expected
            if by is not None:
                row["expected_context_ids"] = list(dict.fromkeys(_node_key(n) for n in useful))
                row["expected_context"] = [n.text for n in useful]
                row["expected_context_by"] = by
            captured = when.get(key)
            retriever = meta.get("retriever")
            row["provenance"] = {"from": "traffic", "run_id": run_id, "case_key": key,
                                 "retriever": retriever, "expected_context_by": by, "expected_output_by": answer_by}
            if judged_by:
                row["provenance"]["judged_by"] = {"metric": judged_by}
            if redact is not None:
                try:
                    row = redact(row)  # type: ignore[assignment]
                except Exception as exc:  # noqa: BLE001 - the user's hook: say which case, keep going
                    raise ConfigurationError(f"the redact hook failed on case {getattr(tc, 'id', '?')}: "
                                             f"{type(exc).__name__}: {exc}") from exc
                if row is None:
                    skip("left out by the redact hook")
                    continue
            seen.add(norm)
            day = time.strftime("%Y-%m-%d", time.gmtime(float(captured))) if isinstance(captured, (int, float)) \
                else str(run_id)
            candidates.append(((str(retriever), day), row))
    rows = _sample(candidates, limit, seed)
    report = {"cases_read": read, "goldens": len(rows), "left_out": why,
              "sampled_from": len(candidates), "groups": len({g for g, _ in candidates})}
    return rows, report


def _sample(candidates: list[tuple[tuple[str, str], dict[str, Any]]], limit: int | None, seed: int
            ) -> list[dict[str, Any]]:
    """Up to ``limit`` rows taken in turn from each (retriever, day) group, each group shuffled with ``seed``."""
    if limit is None or len(candidates) <= limit:
        return [r for _, r in candidates]
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for g, r in candidates:
        groups.setdefault(g, []).append(r)
    for rows in groups.values():
        rng.shuffle(rows)
    out: list[dict[str, Any]] = []
    order = sorted(groups)
    while len(out) < limit:
        for g in order:
            if groups[g] and len(out) < limit:
                out.append(groups[g].pop())
    return out


goldens_from_store = from_store  # the engine door's name for it

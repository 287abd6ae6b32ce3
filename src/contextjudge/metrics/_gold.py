"""Gold scores: the score a metric would give a case if every verdict were the case's gold label.

The formulas and the sentence and statement splitting are the metrics' own (each metric's ``score_labels`` of its
``label_field``; ``_text``), so a gold score and a judged score differ only where the judge and the labels do.
``label_problems`` says why a case's labels cannot be lined up with what the metric judges (a count that does not
match the nodes, the sentences or the statements); ``gold_score`` then gives None, or raises with ``strict=True``.
"""

from __future__ import annotations

import logging
from typing import Any

from .._text import split_sentences, split_statements
from ..cases.labels import LABELS_KEY, NODE_FIELDS, labels_of, resolve_labels
from ..cases.provenance import short
from ..errors import ConfigurationError
from ._registry import metric_class

__all__ = ["fill_gold_scores", "gold_score", "gold_score_of", "gold_statements", "label_problems",
           "relevance_items", "unlabelled_nodes"]

logger = logging.getLogger("contextjudge")


def _nodes(test_case: Any) -> list[Any]:
    return list(getattr(test_case, "retrieval_context", None) or [])


def _case_name(test_case: Any) -> str:
    cid = getattr(test_case, "id", None) or getattr(test_case, "name", None)
    if cid:
        return f"case {cid!r}"
    text = str(getattr(test_case, "input", "") or "")
    return f"case with input {text[:60]!r}"


def gold_statements(test_case: Any, labels: dict[str, Any], field: str = "statement_labels") -> list[str]:
    """The statements the statement labels refer to: ``labels["statements"]`` when given, else the expected output
    split into statements the way the recall metric splits it (``_text.split_statements``).
    ``field="answer_statement_labels"``: the actual output's (``answer_statements``, else its statements, as
    faithfulness splits it)."""
    answer = field == "answer_statement_labels"
    given = labels.get("answer_statements" if answer else "statements")
    if given is not None:
        return list(given)
    return split_statements(getattr(test_case, "actual_output" if answer else "expected_output", None) or "")


def relevance_items(test_case: Any, labels: dict[str, Any]) -> list[tuple[str, bool]]:
    """(item id, label) for every sentence the relevancy metric judges: node k's label applies to each of its
    sentences (ids ``n<k>.s<j>``); an empty node is one irrelevant sentence, as the metric counts it."""
    labels = resolve_labels(test_case, labels)[0]
    out: list[tuple[str, bool]] = []
    for k, (node, label) in enumerate(zip(_nodes(test_case), labels.get("relevance_labels") or [], strict=False), start=1):
        sents = split_sentences(getattr(node, "text", "") or "")
        if not sents:
            out.append((f"n{k}.s1", False))
        out += [(f"n{k}.s{j}", bool(label)) for j in range(1, len(sents) + 1)]
    return out


def label_problems(test_case: Any, labels: dict[str, Any]) -> list[str]:
    """Why ``labels`` cannot be lined up with the case (empty when they can), one message per label field, each
    saying which case, what the counts are and what to do. Keyed node labels always line up (a node without a
    label is simply unlabelled: ``unlabelled_nodes``)."""
    return list(_problems(test_case, resolve_labels(test_case, labels)[0]).values())


def unlabelled_nodes(test_case: Any, labels: dict[str, Any]) -> dict[str, int]:
    """Per node field the labels give, how many of the case's nodes have no label for it (a gold score needs every
    node labelled; calibration uses the labelled ones)."""
    view = resolve_labels(test_case, labels)[0]
    return {f: sum(v is None for v in view[f]) for f in NODE_FIELDS
            if view.get(f) is not None and any(v is None for v in view[f])}


def _problems(test_case: Any, labels: dict[str, Any]) -> dict[str, str]:
    problems: dict[str, str] = {}
    where = _case_name(test_case)
    n_nodes = len(_nodes(test_case))
    for field in NODE_FIELDS:
        got = labels.get(field)
        if got is not None and len(got) != n_nodes:
            problems[field] = (f"{where}: {len(got)} {field} for {n_nodes} retrieved nodes. Give one label per "
                               "node of retrieval_context, in rank order.")
    got = labels.get("answer_statement_labels")
    if got is not None and len(got) != len(gold_statements(test_case, labels, "answer_statement_labels")):
        n = len(gold_statements(test_case, labels, "answer_statement_labels"))
        problems["answer_statement_labels"] = (
            f"{where}: {len(got)} answer_statement_labels for {n} statements of the actual_output (as faithfulness "
            "splits it into sentences). Give one label per statement, or list yours in 'answer_statements'.")
    got = labels.get("statement_labels")
    if got is not None:
        statements = gold_statements(test_case, labels)
        if len(got) != len(statements):
            if labels.get("statements") is not None:
                problems["statement_labels"] = (f"{where}: {len(got)} statement_labels for {len(statements)} "
                                                "statements. Give one label per entry of 'statements'.")
            else:
                listed = "; ".join(f"{j}. {s!r}" for j, s in enumerate(statements, 1)) or "(none)"
                problems["statement_labels"] = (
                    f"{where}: {len(got)} statement_labels, but the recall metric splits the expected_output into "
                    f"{len(statements)} statements: {listed}. Label those, or give your own statements in a "
                    "'statements' list beside the labels.")
    return problems


def gold_score(metric_name: str, test_case: Any, labels: dict[str, Any] | None = None, *,
               strict: bool = False) -> float | None:
    """The score ``metric_name`` (a result's name, "Contextual Precision", or a key, "contextual_precision") gets
    from the case's gold labels (``labels``, else the labels the case carries): None when the case has no labels
    for that metric, when the metric has no gold form (rubric, turn metrics), or when the labels do not line up with
    the case (``label_problems``; with ``strict=True`` that raises ConfigurationError instead).

    The metric's own formula (``score_labels``) of its label field's labels, item by item as it judges them:
    precision / utilization: weighted cumulative precision of the node labels; recall, faithfulness: the share of
    supported statements; relevancy: the share of relevant sentences, a node's label counting once per sentence.
    With no retrieved node every metric scores 0, as the metrics do.
    """
    cls = metric_class(metric_name)
    field = cls.label_field if cls is not None else None
    if cls is None or field is None:
        return None
    if labels is None:
        labels = labels_of(test_case)
    if not labels:
        return None
    labels = resolve_labels(test_case, labels)[0]
    if labels.get(field) is None:
        return None
    problem = _problems(test_case, labels).get(field)
    if problem:
        if strict:
            raise ConfigurationError(problem)
        return None
    if any(v is None for v in labels[field]):
        return None  # a node of this retrieval has no label: no gold score (the case counts as unlabelled here)
    if not _nodes(test_case):
        return 0.0
    if field == "relevance_labels":  # judged sentence by sentence: a node's label once per sentence of it
        flags = [label for _, label in relevance_items(test_case, labels)]
    else:
        flags = [bool(x) for x in labels[field]]
    return float(cls.score_labels(flags))


def gold_score_of(metric_name: str, test_case: Any, strict_mode: bool = False) -> float | None:
    """The score ``test_case``'s gold labels give for ``metric_name``, or None (no labels for it, or labels that do
    not fit the case: the calibrate command reports those; a run only leaves the case out of the correction).

    ``strict_mode``: the metric's strict mode, which scores 1 or 0; the gold score is made 1 or 0 the same way, so
    the bias-corrected mean and the judge's bias compare like with like (a 0/1 judged score against a fractional
    gold one would count the strictness as the judge's bias)."""
    try:
        labels = labels_of(test_case)
    except Exception:  # noqa: BLE001 - a malformed label must not fail a run: the case simply counts as unlabelled
        logger.warning("contextjudge: the gold labels of case %r cannot be read; it counts as unlabelled.",
                       short(getattr(test_case, "input", "") or "", 60))
        return None
    if not labels:
        return None
    try:
        value = gold_score(metric_name, test_case, labels)
    except Exception as exc:  # noqa: BLE001 - e.g. a labels count that is not the nodes count
        logger.warning("contextjudge: %s: the case's gold labels give no score (%s); it counts as unlabelled.",
                       metric_name, exc)
        return None
    if value is None:
        return None
    return (1.0 if value >= 1.0 - 1e-9 else 0.0) if strict_mode else float(value)


def fill_gold_scores(result: Any) -> Any:
    """Set ``gold_score`` on every scored result of ``result`` (an EvaluationResult with its per-case results) whose
    case carries gold labels for that metric and that has none yet; returns ``result``. Cases labelled from the
    labelling page's ``calibrate`` queue get none (not a random sample: see ``_chosen``)."""
    for tr in getattr(result, "test_results", None) or []:
        if _labels_or_none(tr.test_case) is None or _chosen(tr.test_case):
            continue
        for m in tr.metrics_data:
            if m.score is not None and m.gold_score is None:
                m.gold_score = gold_score_of(m.name, tr.test_case, bool(m.strict_mode))
    return result


def _chosen(test_case: Any) -> bool:
    """Whether the case's labels were given from the labelling page's ``calibrate`` queue: a case chosen for what it
    teaches, not drawn at random, so it may not enter the bias-corrected (prediction-powered) means, which need a
    random sample; ``calibrate`` still uses its labels for agreement."""
    raw = (getattr(test_case, "additional_metadata", None) or {}).get(LABELS_KEY)
    return isinstance(raw, dict) and raw.get("queue") == "calibrate"


def _labels_or_none(test_case: Any) -> dict[str, Any] | None:
    try:
        return labels_of(test_case)
    except Exception:  # noqa: BLE001
        return None

"""Gold labels a user attaches to a test case, for ``contextjudge calibrate`` and for bias-corrected means.

A case's labels live in ``additional_metadata["gold_labels"]`` (``LABELS_KEY``) as a dict with any of:

    labels              per retrieved node, in rank order: useful for the expected output (contextual precision;
                        verdict family node_usefulness)
    relevance_labels    per node: relevant to the input; a node's label applies to each of its sentences
                        (contextual relevancy; sentence_relevance)
    utilization_labels  per node: used by / useful for the actual output (contextual utilization;
                        node_usefulness with the actual output as reference)
    statement_labels    per statement of the expected output: supported by the nodes (contextual recall;
                        statement_support); ``statements`` may list the statements themselves, else the expected
                        output is split into sentences the way the recall metric splits it
    answer_statement_labels  per statement of the actual output: supported by the nodes (faithfulness;
                        statement_support with the actual output); ``answer_statements`` may list them, else the
                        actual output is split into sentences the way the faithfulness metric splits it

Each label is a yes/no: True/False, 1/0 or "yes"/"no" are read. A golden (JSONL) may carry these fields at its top
level; they reach the case's ``additional_metadata`` with the golden's other extra fields, and ``labels_of`` reads
them there too.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError

__all__ = ["LABELS_KEY", "LABEL_FIELDS", "METRIC_OF_FIELD", "labels_of", "normalize_labels", "with_labels"]

LABELS_KEY = "gold_labels"
LABEL_FIELDS = ("labels", "relevance_labels", "utilization_labels", "statement_labels", "answer_statement_labels")
# Which metric each label list checks (the metric's name as results carry it).
METRIC_OF_FIELD = {"labels": "Contextual Precision", "relevance_labels": "Contextual Relevancy",
                   "utilization_labels": "Contextual Utilization", "statement_labels": "Contextual Recall",
                   "answer_statement_labels": "Faithfulness"}
_YES = {"yes", "y", "true", "1", "relevant", "useful", "supported"}
_NO = {"no", "n", "false", "0", "irrelevant", "not relevant", "not useful", "unsupported"}


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _YES | _NO:
        return value.strip().lower() in _YES
    raise ConfigurationError(f"{where}: a label must be yes/no (true/false, 1/0 or 'yes'/'no'), got {value!r}. "
                             "Fix that entry in the labels file.")


def normalize_labels(raw: dict[str, Any], where: str = "labels") -> dict[str, Any]:
    """The label fields of ``raw`` as lists of bools (and ``statements`` as strings); other keys are ignored.
    Raises ConfigurationError naming the field and position of a bad entry."""
    out: dict[str, Any] = {}
    for name in LABEL_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)):
            raise ConfigurationError(f"{where}: {name!r} must be a list of yes/no labels in rank order, got "
                                     f"{type(value).__name__}.")
        out[name] = [_flag(v, f"{where}: {name}[{i}]") for i, v in enumerate(value)]
    for key, whose in (("statements", "expected output's"), ("answer_statements", "actual output's")):
        statements = raw.get(key)
        if statements is not None:
            if not isinstance(statements, (list, tuple)) or not all(isinstance(s, str) for s in statements):
                raise ConfigurationError(f"{where}: {key!r} must be a list of strings (the {whose} statements, one "
                                         "per statement label).")
            out[key] = list(statements)
    return out


def labels_of(test_case: Any) -> dict[str, Any] | None:
    """The gold labels a case carries (normalised), or None."""
    meta = getattr(test_case, "additional_metadata", None) or {}
    raw = meta.get(LABELS_KEY)
    if raw is None and any(meta.get(f) is not None for f in LABEL_FIELDS):
        raw = meta
    if not raw:
        return None
    out = normalize_labels(raw)
    return out or None


def with_labels(test_case: Any, labels: dict[str, Any]) -> Any:
    """Attach ``labels`` (normalised) to the case's ``additional_metadata`` and return the case."""
    meta = dict(getattr(test_case, "additional_metadata", None) or {})
    meta[LABELS_KEY] = normalize_labels(labels)
    test_case.additional_metadata = meta
    return test_case

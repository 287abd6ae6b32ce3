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

Which metric a field teaches and checks is the metric's own declaration (``BaseMetric.label_field``; the metrics
registry lists them: ``contextjudge.metrics.metrics_of_field``); this module knows only the fields.

Each label is a yes/no: True/False, 1/0 or "yes"/"no" are read. A golden (JSONL) may carry these fields at its top
level; they reach the case's ``additional_metadata`` with the golden's other extra fields, and ``labels_of`` reads
them there too.

A label says what it is about (schema 5 of the store). Node labels are kept keyed by the node's identity, in
``nodes``: one entry per labelled node with its ``id`` (the chunk or document id the framework gave, if any), ``hash``
(of its normalised text: ``node_hash``) and a short ``text``, and any of the three node fields (``labels``,
``relevance_labels``, ``utilization_labels``; ``useful``, ``relevant`` and ``used`` are read as their aliases). A
label applies to the node it names at whatever rank it comes back, in any run (a node matches an entry with the same
id, or with the same text hash); an entry whose node did not come back is *unused* (``resolve_labels`` lists it),
never applied to whatever sits at its old rank. Positional lists are read as the labels of the case they are given
with: ``keyed_labels`` turns them into entries with that case's nodes (``add_labels``, ``with_labels`` and the
goldens do so as they attach them). Statement labels go with ``statements`` (their texts); without it they are
given for the case's expected output as the recall metric splits it, and keying writes those texts down.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any

from ..errors import ConfigurationError

__all__ = ["LABELS_KEY", "LABEL_FIELDS", "NODE_FIELDS", "keyed_labels", "labels_of", "node_hash",
           "node_ref", "normalize_labels", "resolve_labels", "with_labels"]

LABELS_KEY = "gold_labels"
LABEL_FIELDS = ("labels", "relevance_labels", "utilization_labels", "statement_labels", "answer_statement_labels")
_YES = {"yes", "y", "true", "1", "relevant", "useful", "supported"}
NODE_FIELDS = ("labels", "relevance_labels", "utilization_labels")
_NODE_ALIASES = {"useful": "labels", "relevant": "relevance_labels", "used": "utilization_labels"}
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
    nodes = raw.get("nodes")
    if nodes is not None:
        out["nodes"] = _normalize_nodes(nodes, where)
    return out


def node_hash(text: str) -> str:
    """The identity of a node's text: a hash of it with Unicode (NFKC) and white space normalised."""
    norm = " ".join(unicodedata.normalize("NFKC", text or "").split())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:24]


def _node_text(node: Any) -> str:
    return str(getattr(node, "text", node) or "")


def node_ref(node: Any) -> dict[str, Any]:
    """What names a node in a keyed label: its id (when the framework gave one), the hash of its text, and the
    first 200 characters of that text (for people reading a labels file)."""
    nid = getattr(node, "id", None)
    text = _node_text(node)
    return {"id": None if nid in (None, "") else str(nid), "hash": node_hash(text), "text": text[:200]}


def _normalize_nodes(nodes: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(nodes, (list, tuple)):
        raise ConfigurationError(f"{where}: 'nodes' must be a list of node labels like {{\"text\": \"...\", "
                                 f"\"useful\": true}}, got {type(nodes).__name__}.")
    out = []
    for i, entry in enumerate(nodes):
        here = f"{where}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{here}: expected an object with the node's 'id' or 'text' and its labels.")
        nid, text, h = entry.get("id"), entry.get("text"), entry.get("hash")
        if nid in (None, "") and not text and not h:
            raise ConfigurationError(f"{here}: say which node it labels with 'id' (the chunk or document id) or "
                                     "'text' (the node's text).")
        got: dict[str, Any] = {"id": None if nid in (None, "") else str(nid),
                               "hash": str(h) if h else (node_hash(str(text)) if text else None),
                               "text": str(text)[:200] if text else None}
        for name, value in entry.items():
            field = _NODE_ALIASES.get(name, name)
            if field in NODE_FIELDS and value is not None:
                got[field] = _flag(value, f"{here}.{name}")
        if not any(f in got for f in NODE_FIELDS):
            raise ConfigurationError(f"{here}: no label; give 'useful', 'relevant' or 'used' (yes/no).")
        out.append(got)
    return out


def _matches(entry: dict[str, Any], ref: dict[str, Any]) -> bool:
    if entry.get("id") and ref.get("id") and entry["id"] == ref["id"]:
        return True
    return bool(entry.get("hash")) and entry.get("hash") == ref.get("hash")


def keyed_labels(test_case: Any, labels: dict[str, Any]) -> dict[str, Any]:
    """``labels`` (normalised) with its positional node lists turned into ``nodes`` entries naming ``test_case``'s
    nodes (the case the labels were given for), and ``statements`` written down for statement labels that lack
    them. Raises ConfigurationError when a positional list's length is not the case's node count (a label could
    then land on another node)."""
    out = {k: v for k, v in labels.items() if k not in NODE_FIELDS}
    nodes = list(getattr(test_case, "retrieval_context", None) or [])
    positional = {f: labels[f] for f in NODE_FIELDS if labels.get(f) is not None}
    if positional:
        for field, flags in positional.items():
            if len(flags) != len(nodes):
                cid = getattr(test_case, "id", None) or str(getattr(test_case, "input", ""))[:60]
                raise ConfigurationError(f"case {cid!r}: {len(flags)} {field} for {len(nodes)} retrieved nodes. Give "
                                         "one label per node of retrieval_context, in rank order, or label nodes by "
                                         "text in 'nodes'.")
        entries = [dict(e) for e in out.get("nodes") or []]
        for k, node in enumerate(nodes):
            ref = node_ref(node)
            hit = next((e for e in entries if _matches(e, ref)), None)
            if hit is None:
                hit = dict(ref)
                entries.append(hit)
            for field, flags in positional.items():
                hit[field] = bool(flags[k])
        out["nodes"] = entries
    if out.get("statement_labels") is not None and out.get("statements") is None:
        from .._text import split_statements  # noqa: PLC0415

        out["statements"] = split_statements(getattr(test_case, "expected_output", None) or "")
    return out


def resolve_labels(test_case: Any, labels: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``labels`` lined up with ``test_case``'s nodes as it is: the positional view (``labels``,
    ``relevance_labels``, ``utilization_labels`` with one entry per node in rank order, None for a node that has no
    label; ``statements`` and ``statement_labels`` as given) and the keyed entries whose node is not among the
    case's (unused). Positional lists (not yet keyed) are returned as they are."""
    view = {k: v for k, v in labels.items() if k != "nodes"}
    entries = labels.get("nodes")
    if not entries:
        return view, []
    refs = [node_ref(n) for n in getattr(test_case, "retrieval_context", None) or []]
    used = [False] * len(entries)
    for field in NODE_FIELDS:
        if view.get(field) is not None or not any(field in e for e in entries):
            continue
        column: list[bool | None] = []
        for ref in refs:
            value = None
            for j, e in enumerate(entries):
                if field in e and _matches(e, ref):
                    value, used[j] = e[field], True
                    break
            column.append(value)
        view[field] = column
    for j, e in enumerate(entries):
        if not used[j] and any(_matches(e, ref) for ref in refs):
            used[j] = True
    return view, [e for e, u in zip(entries, used, strict=True) if not u]


def labels_of(test_case: Any) -> dict[str, Any] | None:
    """The gold labels a case carries (normalised, as stored: keyed node labels in ``nodes``), or None. Line them up
    with the case's nodes with ``resolve_labels``."""
    meta = getattr(test_case, "additional_metadata", None) or {}
    raw = meta.get(LABELS_KEY)
    if raw is None and any(meta.get(f) is not None for f in LABEL_FIELDS):
        raw = meta
    if not raw:
        return None
    out = normalize_labels(raw)
    return out or None


def with_labels(test_case: Any, labels: dict[str, Any]) -> Any:
    """Attach ``labels`` (normalised; positional node lists keyed to this case's nodes) to the case's
    ``additional_metadata`` and return the case."""
    meta = dict(getattr(test_case, "additional_metadata", None) or {})
    meta[LABELS_KEY] = keyed_labels(test_case, normalize_labels(labels))
    test_case.additional_metadata = meta
    return test_case

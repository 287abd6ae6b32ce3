"""The rows of the store: a test case, a metric result and a judge call as table rows and back, and the JSON the
store keeps. Shared by the store (``_store.py``) and its work queue (``_queue.py``), which both write cases and
results; kept apart from both so neither imports the other."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from .._result import MetricResult, Usage
from .._text import escape_unstorable, escape_unstorable_in
from ..cases.labels import LABELS_KEY
from ..cases.testcase import ConversationalTestCase, LLMTestCase, dump_json, jsonable

__all__ = ["StoredCase", "case_facets", "case_rows", "input_key", "judge_call_row", "meta_of", "result_from_row",
           "result_rows", "stored_case", "tags_text"]


logger = logging.getLogger("contextjudge")


def _dumps(value: Any) -> str:
    text = json.dumps(value, default=_json_default, sort_keys=True)
    if "\\ud" in text or "\\u0000" in text:  # a lone surrogate or NUL (JSON-escaped): escaped in the value itself,
        # so what is read back is storable text too (``_text.escape_unstorable``)
        text = json.dumps(escape_unstorable_in(json.loads(text))[0], sort_keys=True)
    return text


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return dump_json(obj)
    return jsonable(obj)


def _loads(text: str | None, default: Any = None) -> Any:
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default



@dataclass
class StoredCase:
    """A test case read back from the store, with its key and position in the run; from a queue claim also its
    run (``run_id``) and how many times it has been claimed (``attempts``, this claim included)."""

    case_key: str
    position: int
    test_case: LLMTestCase | ConversationalTestCase
    scored: int = 0
    run_id: str | None = None
    attempts: int = 0



def _case_to_json(tc: Any) -> tuple[str, str]:
    kind = "conversational" if isinstance(tc, ConversationalTestCase) else "llm"
    if hasattr(tc, "model_dump"):
        try:
            data = dump_json(tc)
        except Exception:  # noqa: BLE001 - arbitrary metadata objects are kept as their text
            data = json.loads(json.dumps(tc.model_dump(), default=str))
    else:  # pragma: no cover - the runner only hands us test cases
        data = {"input": str(tc)}
    text = json.dumps(data, default=str)
    if "\\ud" in text or "\\u0000" in text:  # see _dumps: the case read back holds storable text only
        text = json.dumps(escape_unstorable_in(json.loads(text))[0])
    return kind, text


_WARNED_ESCAPED = [0]  # how many rows with escaped characters were logged at WARNING (the first few are)


def _storable(table: str, rows: list[dict[str, Any]]) -> None:
    """Escape, in place, the characters no store takes (a lone surrogate an end user sent, NUL) in the text columns
    of ``rows`` (``_text.escape_unstorable``), so one end user's text never makes a database refuse a write; each
    row changed is named in the log (the first few at WARNING)."""
    for row in rows:
        changed = []
        for col, value in row.items():
            if isinstance(value, str):
                new = escape_unstorable(value)
                if new is not value:
                    row[col] = new
                    changed.append(col)
        if changed:
            loud = _WARNED_ESCAPED[0] < 5
            _WARNED_ESCAPED[0] += loud
            logger.log(logging.WARNING if loud else logging.DEBUG,
                       "contextjudge: %s row of case %r (run %r) held characters no store takes (a lone surrogate "
                       "or NUL) in %s; they are stored escaped (\\udce9, \\u0000)", table, row.get("case_key"),
                       row.get("run_id"), ", ".join(changed))


def _case_from_json(kind: str, data: str, key: str) -> LLMTestCase | ConversationalTestCase:
    raw = json.loads(data)
    cls = ConversationalTestCase if kind == "conversational" else LLMTestCase
    tc = cls(**raw)
    if not tc.id:
        # the key is the case's identity in this store: results written later (``contextjudge score``) land on it
        tc.id = key
    return tc


def _attach_labels(test_case: Any, labels: dict[str, Any]) -> None:
    meta = dict(getattr(test_case, "additional_metadata", None) or {})
    meta[LABELS_KEY] = labels
    test_case.additional_metadata = meta


# ---------------------------------------------------------------------------------------------- rows
# The rows of a case, a result and a judge call, and a result or case read back: ResultsStore's single writes and
# the queue's batched, one-transaction writes (store/_queue.py) build them here.
def case_rows(run_id: str, key: str, position: int, test_case: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``cj_cases`` row of ``test_case`` and the ``cj_nodes`` rows of its ranked nodes."""
    kind, data = _case_to_json(test_case)
    fp = test_case.fingerprint() if hasattr(test_case, "fingerprint") else None
    row = {"run_id": run_id, "case_key": key, "position": int(position), "kind": kind,
           "name": getattr(test_case, "name", None), "input": _case_input(test_case),
           "actual_output": getattr(test_case, "actual_output", None),
           "expected_output": getattr(test_case, "expected_output", None) or
           getattr(test_case, "expected_outcome", None), "fingerprint": fp, "data": data, "created_at": time.time()}
    nodes = []
    for turn, retrieval in _retrievals(test_case):
        for rank, node in enumerate(retrieval, start=1):
            nodes.append({"run_id": run_id, "case_key": key, "turn": turn, "rank": rank, "node_id": node.id,
                          "text": node.text, "score": node.score, "node_metadata": _dumps(node.metadata or {})})
    _storable("cj_cases", [row])
    _storable("cj_nodes", nodes)
    return row, nodes


def result_rows(run_id: str, key: str, result: MetricResult) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``cj_results`` row of ``result`` and the ``cj_verdicts`` rows of its verdicts."""
    row = {"run_id": run_id, "case_key": key, "metric": result.name, "score": result.score,
           "threshold": float(result.threshold), "success": bool(result.success),
           "strict_mode": bool(result.strict_mode), "reason": result.reason, "error": result.error,
           "error_type": result.error_type, "evaluation_model": result.evaluation_model,
           "verbose_logs": result.verbose_logs, "usage": _dumps(result.usage.to_dict()),
           "details": _dumps(result.details or {}), "created_at": time.time(),
           "gold_score": result.gold_score, "score_spread": result.score_spread,
           "judge_identity": _identity(result.details)}
    vrows = []
    for pos, v in enumerate(result.verdicts or []):
        v = v if isinstance(v, dict) else {"value": v}
        rank = v.get("rank")
        vrows.append({"run_id": run_id, "case_key": key, "metric": result.name, "position": pos,
                      "item_id": None if v.get("id") is None else str(v.get("id")),
                      "rank": rank if isinstance(rank, int) else None, "statement": v.get("statement"),
                      "verdict": None if v.get("verdict") is None else str(v.get("verdict")),
                      "reason": v.get("reason"), "data": _dumps(v)})
    _storable("cj_results", [row])
    _storable("cj_verdicts", vrows)
    return row, vrows


def _identity(details: Any) -> str | None:
    got = details.get("judge_identity") if isinstance(details, dict) else None
    return None if got is None else str(got)


def judge_call_row(run_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """The ``cj_judge_calls`` row of one judge-call event."""
    u = _usage_from(event.get("usage"))
    row = {"run_id": run_id, "judge": event.get("judge"), "task": event.get("task"), "metric": event.get("metric"),
            "method": event.get("method"), "cached": bool(event.get("cached")), "input_tokens": int(u.input_tokens),
            "output_tokens": int(u.output_tokens), "seconds": float(u.seconds), "cost": u.cost,
            "created_at": time.time()}
    _storable("cj_judge_calls", [row])
    return row


def result_from_row(r: Any, verdicts: list[Any]) -> MetricResult:
    """A ``cj_results`` row read back, with its verdicts (dicts, or their stored JSON texts)."""
    return MetricResult(name=r.metric, score=r.score, threshold=r.threshold, success=bool(r.success), reason=r.reason,
                        strict_mode=bool(r.strict_mode), error=r.error, error_type=r.error_type,
                        verdicts=[_loads(v, {}) if isinstance(v, str) else v for v in verdicts],
                        verbose_logs=r.verbose_logs, usage=_usage_from(_loads(r.usage, {})),
                        evaluation_model=r.evaluation_model, details=_loads(r.details, {}) or {},
                        gold_score=r.gold_score, score_spread=r.score_spread)


def stored_case(r: Any, labels: str | None = None, **extra: Any) -> StoredCase:
    """A ``cj_cases`` row read back, with the gold labels attached to it (their stored JSON text), if any."""
    sc = StoredCase(case_key=r.case_key, position=r.position, test_case=_case_from_json(r.kind, r.data, r.case_key),
                    **extra)
    if labels is not None:
        _attach_labels(sc.test_case, _loads(labels, {}) or {})
    return sc


def _usage_from(value: Any) -> Usage:
    if isinstance(value, Usage):
        return value
    if isinstance(value, dict):
        known = {k: value[k] for k in ("calls", "cache_hits", "input_tokens", "output_tokens", "seconds", "cost")
                 if k in value}
        return Usage(**known)
    return Usage()



def meta_of(data: Any) -> tuple[dict[str, Any], list[str]]:
    """(additional_metadata, tags) of a stored case's JSON: its own tags, then the call tags the capture recorded."""
    try:
        raw = json.loads(data) if isinstance(data, str) else (data or {})
    except ValueError:
        return {}, []
    if not isinstance(raw, dict):
        return {}, []
    meta = raw.get("additional_metadata") or {}
    tags = [str(t) for t in (raw.get("tags") or []) if t is not None]
    if not isinstance(meta, dict):
        meta = {}
    more = meta.get("tags")
    if isinstance(more, (list, tuple)):
        tags += [str(t) for t in more if t is not None]
    return meta, tags


def input_key(text: str | None) -> str:
    """What pairs two cases by input: a hash of the normalised input (``goldens.normalize_input``), 32 hex digits."""
    from ..cases.goldens import normalize_input  # noqa: PLC0415 - goldens imports more than the store's rows need

    return hashlib.blake2b(normalize_input(text or "").encode("utf-8"), digest_size=16).hexdigest()


def tags_text(tags: list[str]) -> str | None:
    """``cj_results.tags``: the tags framed by the separator ("\\x1fa\\x1fb\\x1f"), so one tag is found exactly with
    a substring test; None without tags."""
    from ._schema import TAG_SEP  # noqa: PLC0415

    clean = [t.replace(TAG_SEP, " ") for t in dict.fromkeys(tags)]
    return TAG_SEP + TAG_SEP.join(clean) + TAG_SEP if clean else None


def case_facets(created_at: Any, input_text: str | None, data: Any) -> dict[str, Any]:
    """The columns of ``cj_results`` that come from its case (schema 4): when it was captured, its retriever, its
    tags and its input's key."""
    meta, tags = meta_of(data)
    retriever = meta.get("retriever")
    return {"captured_at": None if created_at is None else float(created_at),
            "retriever": None if retriever is None else str(retriever), "tags": tags_text(tags),
            "input_key": input_key(input_text)}


def _case_input(tc: Any) -> str | None:
    if isinstance(tc, ConversationalTestCase):
        users = [t.content for t in tc.turns if t.role == "user"]
        return users[-1] if users else None
    return getattr(tc, "input", None)


def _retrievals(tc: Any) -> list[tuple[int, list[Any]]]:
    if isinstance(tc, ConversationalTestCase):
        return [(i, t.retrieval_context) for i, t in enumerate(tc.turns) if t.retrieval_context]
    rc = getattr(tc, "retrieval_context", None)
    return [(0, rc)] if rc else []

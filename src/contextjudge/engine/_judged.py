"""Calibration's judged labelled cases kept in the store (issue 49): what the judge said of one case for one label
field (``acalibrate``'s job: the metric's score and verdicts, and, for the embedded judge, the feature rows of each
labelled item), in the store's verdict cache (``cj_verdict_cache``), so a refresh of the labelling page's figures
after a new label judges only the cases whose judged work changed, not every labelled case again.

An entry's key is a hash of the judge's identity (a calibrated judge's thresholds and an embedded judge's learned
weights are part of it), the judge options, this contextjudge's version, the label field and the case's content
(everything but its labels, save the statements the user wrote, which the request carries). A job whose case,
judge or statements changed has a new key; a job whose key is known is judged again only when the embedded judge's
rows of an item labelled since are not in its entry (the entry is then replaced with them). Failed jobs are never
kept, and a store that cannot be read or written only costs the judging (logged), never the report. Keys are 64 hex characters, as the judge client's own cache keys, and never meet them (a different first
part is hashed).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["JudgedCache", "VerdictStore", "kept_verdicts"]

logger = logging.getLogger("contextjudge")

_TAG = "contextjudge.calibrate.job/1"
_MISSING = object()


class VerdictStore(Protocol):
    """Where judged jobs are kept: the results store (``get_verdicts`` / ``put_verdicts``)."""

    def get_verdicts(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The entries of ``keys`` found."""

    def put_verdicts(self, entries: dict[str, dict[str, Any]]) -> None:
        """Keep (or replace) these entries."""


def kept_verdicts(store: Any) -> VerdictStore | None:
    """Where ``acalibrate(..., verdicts=)`` keeps judged labelled cases for ``store``: the store itself when it can
    keep them (it has ``put_verdicts`` and was not opened read-only), else None (everything is judged each time)."""
    if store is None or getattr(store, "read_only", False) or not callable(getattr(store, "put_verdicts", None)):
        return None
    return store


Job = tuple[int, Any, dict[str, Any], str, str]  # (case index, test case, its labels, label field, metric key)
RowsOf = Callable[[str, str], Any]
Pairs = Callable[..., list[dict[str, Any]]]


class JudgedCache:
    """One calibration's view of the kept jobs: ``hits`` before judging, ``asked`` around each judged job's rows,
    ``save`` after."""

    def __init__(self, store: VerdictStore, identity: str, options: Any, *, learns: bool) -> None:
        from .._version import __version__  # noqa: PLC0415

        self.store, self.learns = store, learns
        self._base = [_TAG, __version__, identity, "" if options is None else repr(options)]
        self._keys: list[str | None] = []
        self._new: dict[str, dict[str, Any]] = {}
        self.hit_jobs = 0
        self.judged_jobs = 0

    def key(self, job: Job) -> str | None:
        """The entry key of one job (None: a case that cannot be written out, never kept)."""
        _, tc, labels, field, metric = job
        from ..cases.labels import LABELS_KEY  # noqa: PLC0415

        try:
            case = tc.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - a case built in code with objects JSON cannot hold: judged each time
            return None
        meta = case.get("additional_metadata")
        if isinstance(meta, dict):
            case["additional_metadata"] = {k: v for k, v in meta.items() if k != LABELS_KEY}
        own = {k: labels.get(k) for k in ("statements", "answer_statements")}
        h = hashlib.sha256()
        for part in (*self._base, field, metric, json.dumps([case, own], sort_keys=True, default=str)):
            h.update(str(part).encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        return h.hexdigest()

    async def hits(self, jobs: Sequence[Job], pairs: Pairs) -> dict[int, tuple[dict[str, Any], RowsOf | None]]:
        """Per job index the kept answer and (the embedded judge) the lookup of its kept rows, for the jobs whose
        entry answers everything ``pairs`` asks of it with these labels; the others are to be judged. The store is
        read in the store's threads (``_aio.in_store_thread``), never on the loop."""
        from .._aio import in_store_thread  # noqa: PLC0415

        self._keys = [self.key(j) for j in jobs]
        try:
            kept = await in_store_thread(self.store.get_verdicts, [k for k in self._keys if k is not None])
        except Exception as exc:  # noqa: BLE001 - a store that cannot be read: everything is judged, as before
            logger.warning("contextjudge: the judged labelled cases could not be read from the store (%s); they are "
                           "judged again.", exc)
            kept = {}
        out: dict[int, tuple[dict[str, Any], RowsOf | None]] = {}
        for n, ((_, tc, labels, field, _metric), key) in enumerate(zip(jobs, self._keys, strict=True)):
            entry = kept.get(key) if key is not None else None
            answer = entry.get("answer") if isinstance(entry, dict) else None
            if not isinstance(answer, dict) or not isinstance(answer.get("verdicts"), list):
                continue
            rows_of: RowsOf | None = None
            if self.learns:
                rows = _rows_from(entry.get("rows") or [])  # type: ignore[union-attr]
                missed: list[tuple[str, str]] = []

                def lookup(vid: str, text: str, rows: dict[tuple[str, str], Any] = rows,
                           missed: list[tuple[str, str]] = missed) -> Any:
                    got = rows.get((vid, text), _MISSING)
                    if got is _MISSING:
                        missed.append((vid, text))
                        return None
                    return got

                pairs(tc, labels, field, answer["verdicts"], lookup)  # a dry run: which items' rows it asks for
                if missed:
                    continue
                rows_of = lookup
            out[n] = (answer, rows_of)
        self.hit_jobs, self.judged_jobs = len(out), len(jobs) - len(out)
        return out

    def asked(self, n: int, answer: dict[str, Any], rows_of: RowsOf | None) -> RowsOf | None:
        """Keep job ``n``'s fresh answer; ``rows_of`` wrapped so that the rows calibration asks for are kept with
        it (a failed answer is not kept)."""
        key = self._keys[n]
        if "error" in answer or key is None:
            return rows_of
        entry: dict[str, Any] = {"answer": {k: answer[k] for k in ("metric", "score", "verdicts") if k in answer},
                                 "rows": []}
        self._new[key] = entry
        if rows_of is None:
            return None
        inner = rows_of

        def keeping(vid: str, text: str) -> Any:
            got = inner(vid, text)
            entry["rows"].append([vid, text, _rows_to(got)])
            return got

        return keeping

    async def save(self) -> None:
        """Write the fresh answers (with the rows asked) to the store, in one transaction, in the store's threads."""
        from .._aio import in_store_thread  # noqa: PLC0415

        if self._new:
            try:
                await in_store_thread(self.store.put_verdicts, self._new)
            except Exception as exc:  # noqa: BLE001 - the report stands; the next call judges them again
                logger.warning("contextjudge: the judged labelled cases could not be kept in the store (%s).", exc)
            self._new = {}


def _rows_to(rows: Any) -> Any:
    """The embedded judge's rows of an item (``(key, features, multiplier, node)`` each) as JSON, exactly (each
    array's dtype kept), or None."""
    if rows is None:
        return None
    return [[key, {"dtype": str(x.dtype), "x": x.tolist()}, mult, node] for key, x, mult, node in rows]


def _rows_from(kept: list[Any]) -> dict[tuple[str, str], Any]:
    """``_rows_to``'s JSON back to rows, by (item id, text)."""
    import numpy as np  # noqa: PLC0415 - only the embedded judge has rows, and it needs numpy

    out: dict[tuple[str, str], Any] = {}
    for vid, text, rows in kept:
        out[(str(vid), str(text))] = None if rows is None else [
            (str(key), np.asarray(x["x"], dtype=x["dtype"]), float(mult), None if node is None else int(node))
            for key, x, mult, node in rows]
    return out

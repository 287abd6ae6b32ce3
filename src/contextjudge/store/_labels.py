"""Gold labels in a store (``cj_labels``, by case key): attach a labels file's records to the captured cases they
name (by key or by normalised input), checked before anything is written; and the cases that carry labels, for
calibration."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import delete, func, or_, select, update

from .._text import escape_unstorable, escape_unstorable_in
from ..cases.testcase import LLMTestCase
from ..errors import ConfigurationError
from . import _schema as S
from ._load import LoadStore
from ._rows import _attach_labels, _case_from_json, _dumps, _loads

__all__ = ["QUEUES", "LabelMatch", "LabelStore", "key_stored_labels"]

CALIBRATION_KEY = "calibration:"  # cj_meta: the embedded judge's calibration on the store's labels, per judge
QUEUES = ("calibrate", "estimate")  # the labelling page's two queues (cj_label_log.queue)

logger = logging.getLogger("contextjudge")


@dataclass
class LabelMatch:
    """What one labels record matched: its position in the file (from 1), the key and input it gave, the case keys
    it labelled, and how it matched (``"key"``, ``"input"``, or None: no case)."""

    record: int
    key: str | None
    input: str | None
    case_keys: list[str]
    by: str | None


class LabelStore(LoadStore):
    """Mixed into ``ResultsStore``: gold labels (it reads cases through ``LoadStore``). ``self`` is the store."""

    # ------------------------------------------------------------------------------------------ gold labels
    def add_labels(self, records: Iterable[dict[str, Any]], check: Callable[[Any, dict[str, Any]], list[str]] | None
                   = None, *, lines: list[int] | None = None, run: str | None = None
                   ) -> tuple[list[LabelMatch], list[LabelMatch]]:
        """Attach gold labels to the store's captured cases; returns (matched, unmatched), one ``LabelMatch`` per
        record, in order.

        Each record holds label fields (``labels``, ``relevance_labels``, ``utilization_labels``,
        ``statement_labels``, ``statements``: see ``contextjudge.cases.labels``) and says which case it labels: by
        ``key`` (or ``id``: the case's key in the store, which is its own id when it has one), else by ``input``
        (normalised: case, punctuation and white space do not matter). A record matches every case with that key
        or input, in any run. Labels replace earlier labels of the same case. A record with no label field, or a
        label that is not yes/no, raises ConfigurationError naming it, and nothing is written. ``check(test_case,
        labels) -> problems`` (``contextjudge.metrics._gold.label_problems``: counts against the case's nodes and
        statements) is asked about every case a record matched; any problem raises ConfigurationError naming the
        record, and nothing is written.

        Labels are stored keyed (``cases.labels``): node labels by node identity, statement labels with their
        statements' text. Node labels given by position (``labels: [1, 0, 1]``) are for the nodes of the case they
        were given for: the record's own ``retrieval_context`` when it has one, else the case in ``run`` (an id,
        name or prefix), else the case with that key, when every run holding it retrieved the same nodes (when
        they differ, ConfigurationError asks for ``run`` or node labels by text, and nothing is written).
        """
        matched, unmatched, writes = self._label_writes(records, check, lines=lines, run=run)
        if writes:
            with self._guard("save gold labels"), self._begin() as conn:
                self._save_label_writes(conn, writes)
        return matched, unmatched

    def _save_label_writes(self, conn: Any, writes: dict[str, dict[str, Any]]) -> None:
        ins = self._dialect_insert(S.labels)
        upsert = ins.on_conflict_do_update(index_elements=["case_key"], set_={
            "input": ins.excluded.input, "labels": ins.excluded.labels, "created_at": ins.excluded.created_at})
        conn.execute(upsert, list(writes.values()))

    def _reading(self, conn: Any, what: str) -> AbstractContextManager[Any]:
        """A read on ``conn`` (a transaction already open: ``give_label``'s), else in a read transaction of its own."""
        if conn is not None:
            return contextlib.nullcontext(conn)
        return _guarded(self._guard(what), self._begin(write=False))

    def _label_writes(self, records: Iterable[dict[str, Any]], check: Callable[[Any, dict[str, Any]], list[str]]
                      | None = None, *, lines: list[int] | None = None, run: str | None = None, conn: Any = None
                      ) -> tuple[list[LabelMatch], list[LabelMatch], dict[str, dict[str, Any]]]:
        """``add_labels`` up to the write: (matched, unmatched, the ``cj_labels`` rows to upsert), read only (on
        ``conn`` when given: the transaction that writes them)."""
        from ..cases.goldens import normalize_input  # noqa: PLC0415 - layer 2, read only here

        def where(i: int) -> str:  # a record as the user finds it: its line in the file when known
            return f"labels record {i} (line {lines[i - 1]})" if lines and i - 1 < len(lines) else \
                f"labels record {i}"

        parsed = _parse_label_records(records, where)
        # the cases the records name by key, looked up by key; every case's input only when a record must be matched
        # by its input (a page's label names its case: one indexed lookup, inside its transaction)
        keys = sorted({key for _, key, _, _, _ in parsed if key is not None})
        pick = select(S.cases.c.case_key, S.cases.c.input)
        with self._reading(conn, "read test cases") as c:
            rows = [r for at in range(0, len(keys), 500)
                    for r in c.execute(pick.where(S.cases.c.case_key.in_(keys[at:at + 500]))).all()]
            found = {r.case_key for r in rows}
            if any(text_in and (key is None or key not in found) for _, key, text_in, _, _ in parsed):
                rows = c.execute(pick).all()
        by_key: dict[str, str | None] = {}
        by_input: dict[str, list[str]] = {}
        for r in rows:
            by_key.setdefault(r.case_key, r.input)
            if r.input:
                keys = by_input.setdefault(normalize_input(r.input), [])
                if r.case_key not in keys:
                    keys.append(r.case_key)
        matched: list[LabelMatch] = []
        unmatched: list[LabelMatch] = []
        hits: list[tuple[int, dict[str, Any], list[str], Any]] = []
        first_record: dict[str, int] = {}
        for i, key, text_in, labels, given_nodes in parsed:
            if key is not None and key in by_key:
                hit, by = [key], "key"
            elif text_in and normalize_input(str(text_in)) in by_input:
                hit, by = by_input[normalize_input(str(text_in))], "input"
            else:
                unmatched.append(LabelMatch(i, key, text_in, [], None))
                continue
            for k in hit:
                if k in first_record:
                    raise ConfigurationError(f"{where(i)} labels case {k!r}, which {where(first_record[k])} "
                                             "labels too: keep one record per case (two would leave whichever "
                                             "came last). Nothing was written.")
                first_record[k] = i
            matched.append(LabelMatch(i, key, text_in, list(hit), by))
            hits.append((i, labels, list(hit), given_nodes))
        # positional node labels name the nodes of the case they were given for: key them to those nodes' identity
        given_for = self._cases_labels_were_given_for([k for _, _, hit, _ in hits for k in hit], run, conn)
        writes: dict[str, dict[str, Any]] = {}
        for i, labels, hit, given_nodes in hits:
            for k in hit:
                keyed = _key_record(labels, k, given_for.get(k, []), given_nodes, where(i))
                writes[k] = {"case_key": k, "input": by_key.get(k), "labels": _dumps(keyed),
                             "created_at": time.time()}
        if writes and check is not None:
            self._check_labels(writes, matched, check, where)
        return matched, unmatched, writes

    def _cases_labels_were_given_for(self, keys: list[str], run: str | None, conn: Any = None
                                     ) -> dict[str, list[Any]]:
        """Per case key, the test cases holding it (those of ``run`` only, when given), newest first."""
        if not keys:
            return {}
        query = select(S.cases.c.case_key, S.cases.c.kind, S.cases.c.data, S.cases.c.run_id).where(
            S.cases.c.case_key.in_(sorted(set(keys)))).order_by(S.cases.c.created_at.desc())
        if run is not None:
            query = query.where(S.cases.c.run_id == self.resolve_run(run))
        with self._reading(conn, "read test cases") as c:
            rows = c.execute(query).all()
        out: dict[str, list[Any]] = {}
        for r in rows:
            out.setdefault(r.case_key, []).append(_case_from_json(r.kind, r.data, r.case_key))
        return out

    def give_label(self, case_key: str, field: str, item: dict[str, Any] | str, value: bool | None, *,
                   who: str | None = None, queue: str | None = None, note: str | None = None,
                   run_id: str | None = None) -> dict[str, Any]:
        """One label as a person gives it (the labelling page): ``field`` one of ``labels``, ``relevance_labels``,
        ``utilization_labels`` (``item`` the node: its ``node_ref``), ``statement_labels`` (``item`` the
        expected output's statement) or ``answer_statement_labels`` (``item`` the actual output's statement, kept
        beside it in ``answer_statements``), or ``note`` (only logged, with ``note``); ``value`` None withdraws the
        item's label (undo). The case's labels are rewritten as ``add_labels`` writes them (keyed, checked) and the
        label is logged in ``cj_label_log`` (who, when, queue, note); returns the case's labels as now stored.

        One transaction holds it all (the read of the case's labels, their rewrite, the log row and the case's
        queue tag) and takes the case's labels row first (SQLite: the database's write lock; PostgreSQL: the row,
        made when the case has none yet), so two pages, two processes or a ``label`` import on the same store never
        interleave inside one label: each label is applied to the labels the one before it left, and a crash keeps
        all of it or none. Text no store takes (a lone surrogate, NUL) is escaped as the store rows escape it."""
        from ..cases.labels import LABEL_FIELDS, NODE_FIELDS  # noqa: PLC0415

        if field not in (*LABEL_FIELDS, "note"):
            raise ConfigurationError(f"unknown label field {field!r}: one of {', '.join(LABEL_FIELDS)} (or 'note').")
        if queue is not None and queue not in QUEUES:
            raise ConfigurationError(f"unknown queue {queue!r}: 'calibrate' or 'estimate'.")
        item = escape_unstorable_in(item)[0]  # type: ignore[assignment]
        who, note = (None if t is None else escape_unstorable(str(t)) for t in (who, note))
        if field == "note":  # a free-text note on the case: logged, no label changes
            with self._guard("log a label"), self._begin() as conn:
                conn.execute(S.label_log.insert().values(case_key=case_key, run_id=run_id, field="note", item="",
                                                         value=None, who=who, queue=queue, note=note,
                                                         created_at=time.time()))
            return {}
        if field in NODE_FIELDS and (not isinstance(item, dict) or not (item.get("hash") or item.get("id"))):
            raise ConfigurationError("a node label names its node: give its 'hash' or 'id' (node_ref).")
        with self._guard("save a label"), self._begin() as conn:
            now, made = self._locked_labels(conn, case_key)
            logged = _apply_label(now, field, item, value)
            if now.get("nodes"):  # kept in the case's rank order, whatever order the labels came in
                cases = self._cases_labels_were_given_for([case_key], None, conn).get(case_key) or []
                now["nodes"] = _in_rank_order(now["nodes"], cases[0] if cases else None)
            keep = any(k not in ("statements", "answer_statements") for k in now)
            writes = self._label_writes([{"key": case_key, **now}], conn=conn)[2] if keep else {}
            if writes:
                self._save_label_writes(conn, writes)
            elif made or not keep:  # the last label withdrawn (or none to keep): the case carries none
                conn.execute(S.labels.delete().where(S.labels.c.case_key == case_key))
            conn.execute(S.label_log.insert().values(
                case_key=case_key, run_id=run_id, field=field, item=logged, value=value, who=who, queue=queue,
                note=note, created_at=time.time()))
            # the case's labels say from which queue they came: any from "calibrate" (a case chosen for what it
            # teaches, not drawn at random) keeps the case out of the bias-corrected means (metrics._gold)
            queues = {q for (q,) in conn.execute(select(S.label_log.c.queue).where(
                S.label_log.c.case_key == case_key).where(S.label_log.c.value.is_not(None))).all()}
            if any(k != "statements" for k in now) and queues & set(QUEUES):
                now["queue"] = "calibrate" if "calibrate" in queues else "estimate"
                conn.execute(update(S.labels).where(S.labels.c.case_key == case_key).values(labels=_dumps(now)))
        return now

    def _locked_labels(self, conn: Any, case_key: str) -> tuple[dict[str, Any], bool]:
        """The case's stored labels (without the markers the store keeps beside them), read on ``conn`` after taking
        their row: an empty row is made first when the case has none (``give_label`` removes or fills it in the
        same transaction, so nobody sees it), which on SQLite takes the database's write lock and on PostgreSQL
        the row's; ``FOR UPDATE`` holds the row on PostgreSQL until the transaction ends. Returns (the labels,
        whether the empty row was made here)."""
        made = conn.execute(self._dialect_insert(S.labels).values(
            case_key=case_key, input=None, labels="{}", created_at=time.time()).on_conflict_do_nothing(
            index_elements=["case_key"])).rowcount == 1
        row = conn.execute(select(S.labels.c.labels).where(S.labels.c.case_key == case_key)
                           .with_for_update()).first()
        return {k: v for k, v in ((_loads(row.labels, {}) or {}) if row else {}).items()
                if k not in ("unmatched_positional", "queue")}, made

    def label_log(self, case_key: str | None = None) -> list[dict[str, Any]]:
        """The labels as given (``give_label``), oldest first: ``{"case_key", "run_id", "field", "item", "value",
        "who", "queue", "note", "created_at"}`` each."""
        if S.label_log.name in self._missing_tables:  # a read-only store of schema 3 or 4: no log yet
            return []
        query = select(S.label_log).order_by(S.label_log.c.id)
        if case_key is not None:
            query = query.where(S.label_log.c.case_key == case_key)
        with self._guard("read the label log"), self._begin(write=False) as conn:
            return [{k: v for k, v in r._mapping.items() if k != "id"} for r in conn.execute(query).all()]

    def export_labels(self) -> list[dict[str, Any]]:
        """Every labelled case key's labels as a record ``add_labels`` reads back (``{"key", "input", "nodes",
        "statements", "statement_labels", ...}``), keyed as stored; labels that name no node are left out
        (``unmatched_labels`` lists them)."""
        with self._guard("read gold labels"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.labels.c.case_key, S.labels.c.input, S.labels.c.labels)
                                .order_by(S.labels.c.case_key)).all()
        out = []
        for r in rows:
            got = {k: v for k, v in (_loads(r.labels, {}) or {}).items()
                   if k not in ("unmatched_positional", "queue")}
            if any(k != "statements" for k in got):
                out.append({"key": r.case_key, "input": r.input, **got})
        return out

    def unmatched_labels(self) -> list[dict[str, Any]]:
        """Labels the schema-5 migration could not key to a node (positional labels whose count matched no case of
        theirs): ``{"case_key", "input", "labels"}`` each. They are kept, and used nowhere."""
        with self._guard("read gold labels"), self._begin(write=False) as conn:
            rows = conn.execute(select(S.labels.c.case_key, S.labels.c.input, S.labels.c.labels)).all()
        out = []
        for r in rows:
            got = _loads(r.labels, {}) or {}
            if got.get("unmatched_positional"):
                out.append({"case_key": r.case_key, "input": r.input, "labels": got["unmatched_positional"]})
        return out

    def _check_labels(self, writes: dict[str, dict[str, Any]], matched: list[LabelMatch],
                      check: Callable[[Any, dict[str, Any]], list[str]], where: Callable[[int], str]) -> None:
        """Ask ``check`` about every case the labels are for; raise ConfigurationError naming the records whose
        labels do not fit their case (nothing is written then)."""
        record_of = {k: m.record for m in matched for k in m.case_keys}
        with self._guard("read test cases"), self._begin(write=False) as conn:
            found = conn.execute(select(S.cases.c.case_key, S.cases.c.kind, S.cases.c.data)
                                 .where(S.cases.c.case_key.in_(list(writes)))).all()
        problems = []
        for c in found:
            for problem in check(_case_from_json(c.kind, c.data, c.case_key), _loads(writes[c.case_key]["labels"],
                                                                                         {}) or {}):
                text_p = f"{where(record_of[c.case_key])}: {problem}"
                if text_p not in problems:
                    problems.append(text_p)
        if problems:
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            raise ConfigurationError(" ".join(problems[:5]) + more + " Nothing was written.")

    def labelled_cases(self, run: str | None = None) -> list[LLMTestCase]:
        """The single-turn cases that carry gold labels (attached with ``add_labels``, or brought by their golden),
        with the labels in ``additional_metadata["gold_labels"]``: those of ``run`` (an id, name or prefix), or with
        ``run=None`` those of every run, each case key once (from its newest run)."""
        from ..cases.labels import labels_of  # noqa: PLC0415

        if run is not None:
            cases = [sc.test_case for sc in self.load_cases(self.resolve_run(run))]
        else:
            with self._guard("read test cases"), self._begin(write=False) as conn:
                labels = dict(conn.execute(select(S.labels.c.case_key, S.labels.c.labels)).all())
                # only cases that may carry labels: a labels-table entry, or label fields in the case's own data
                rows = conn.execute(select(S.cases).where(S.cases.c.kind == "llm").where(or_(
                    S.cases.c.case_key.in_(select(S.labels.c.case_key)), S.cases.c.data.like('%labels"%')))
                    .order_by(S.cases.c.created_at.desc())).all()
            cases, seen = [], set()
            for r in rows:
                if r.case_key in seen:
                    continue
                seen.add(r.case_key)
                tc = _case_from_json(r.kind, r.data, r.case_key)
                if r.case_key in labels:
                    _attach_labels(tc, _loads(labels[r.case_key], {}) or {})
                cases.append(tc)
            cases.reverse()  # oldest first, as runs list their cases
        out = []
        for tc in cases:
            if not isinstance(tc, LLMTestCase):
                continue
            try:
                if labels_of(tc):
                    out.append(tc)
            except ConfigurationError as exc:
                logger.warning("contextjudge: case %s has gold labels that cannot be read (%s); left out.", tc.id,
                               exc)
        return out


def _apply_label(now: dict[str, Any], field: str, item: Any, value: bool | None) -> str:
    """One label applied to a case's labels ``now`` (in place; fields left empty removed); returns the item as the
    label log names it (a node's id or hash, a statement's text)."""
    from ..cases.labels import NODE_FIELDS  # noqa: PLC0415

    if field in NODE_FIELDS:
        entries = [dict(e) for e in now.get("nodes") or []]
        hit = next((e for e in entries if (item.get("id") and e.get("id") == item.get("id"))
                    or (item.get("hash") and e.get("hash") == item.get("hash"))), None)
        if hit is None:
            hit = {"id": item.get("id"), "hash": item.get("hash"), "text": str(item.get("text") or "")[:200]}
            entries.append(hit)
        if value is None:
            hit.pop(field, None)
        else:
            hit[field] = bool(value)
        now["nodes"] = [e for e in entries if any(f in e for f in NODE_FIELDS)]
        logged = str(item.get("id") or item.get("hash"))
    else:
        text = str(item)
        texts = "answer_statements" if field == "answer_statement_labels" else "statements"
        pairs = dict(zip(now.get(texts) or [], now.get(field) or [], strict=False))
        if value is None:
            pairs.pop(text, None)
        else:
            pairs[text] = bool(value)
        now[texts], now[field] = list(pairs), list(pairs.values())
        logged = text
    for k in [k for k, v in now.items() if v in (None, [])]:
        del now[k]
    return logged


def _in_rank_order(entries: list[dict[str, Any]], case: Any) -> list[dict[str, Any]]:
    """Keyed node labels in the order ``case`` retrieved their nodes (entries naming none of its nodes last, as
    they were): two labels given at once (a closing page hands its waiting labels over together) leave the same
    labels whichever the store took first."""
    from ..cases.labels import node_ref  # noqa: PLC0415

    refs = [node_ref(n) for n in getattr(case, "retrieval_context", None) or []]

    def rank(e: dict[str, Any]) -> int:
        return next((i for i, r in enumerate(refs) if (e.get("id") and r["id"] == e.get("id"))
                     or (e.get("hash") and r["hash"] == e.get("hash"))), len(refs))

    return sorted(entries, key=rank)


@contextlib.contextmanager
def _guarded(guard: Any, transaction: AbstractContextManager[Any]) -> Iterator[Any]:
    with guard, transaction as conn:
        yield conn


def key_stored_labels(engine: Any) -> None:
    """Schema 4 -> 5: positional node labels in ``cj_labels`` become labels keyed by node identity, with the
    nodes of the case they were given for: the newest case with that key captured before the labels were
    attached (else the newest with as many nodes as labels). Labels that fit no case of theirs are kept under
    ``unmatched_positional`` (used nowhere; ``unmatched_labels`` and a warning list them)."""
    from ..cases.labels import NODE_FIELDS, keyed_labels, normalize_labels  # noqa: PLC0415

    with engine.begin() as conn:
        rows = conn.execute(select(S.labels)).all()
        unmatched: list[str] = []
        for r in rows:
            stored = _loads(r.labels, {}) or {}
            if not any(stored.get(f) is not None for f in NODE_FIELDS) and not (
                    stored.get("statement_labels") is not None and stored.get("statements") is None):
                continue
            cands = conn.execute(select(S.cases.c.kind, S.cases.c.data, S.cases.c.created_at, S.cases.c.case_key)
                                 .where(S.cases.c.case_key == r.case_key)
                                 .order_by(S.cases.c.created_at.desc())).all()
            cases: list[tuple[float, Any]] = [(c.created_at, _case_from_json(c.kind, c.data, c.case_key))
                                              for c in cands]
            want = {len(stored[f]) for f in NODE_FIELDS if stored.get(f) is not None}
            fits = [tc for _, tc in cases
                    if not want or {len(getattr(tc, "retrieval_context", None) or [])} == want]
            before = [tc for at, tc in cases if at <= r.created_at and any(tc is f for f in fits)]
            case: Any = (before or fits or [None])[0]
            if case is None:
                new = {k: v for k, v in stored.items() if k not in NODE_FIELDS}
                new["unmatched_positional"] = {f: stored[f] for f in NODE_FIELDS if stored.get(f) is not None}
                unmatched.append(r.case_key)
            else:
                new = keyed_labels(case, normalize_labels(stored))
            conn.execute(update(S.labels).where(S.labels.c.case_key == r.case_key)
                         .values(labels=_dumps(new)))
    if unmatched:
        logger.warning("contextjudge: %d case(s)' node labels were given by rank and no captured case of theirs "
                       "has that many nodes, so they name no node and are not used: %s. Label them again "
                       "(`contextjudge label`, by text or with --run).", len(unmatched),
                       ", ".join(repr(k) for k in unmatched[:10]) + (" ..." if len(unmatched) > 10 else ""))


def _keyed(keyed_labels: Callable[[Any, dict[str, Any]], dict[str, Any]], case: Any, labels: dict[str, Any],
           where: str) -> dict[str, Any]:
    try:
        return keyed_labels(case, labels)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc} Nothing was written.") from exc


def _parse_label_records(records: Iterable[dict[str, Any]], where: Callable[[int], str]
                         ) -> list[tuple[int, str | None, Any, dict[str, Any], Any]]:
    """The label records of ``add_labels`` checked and read: (record number, key, input, normalised labels)."""
    from ..cases.labels import normalize_labels  # noqa: PLC0415

    parsed = []
    for i, rec in enumerate(records, start=1):
        if not isinstance(rec, dict):
            raise ConfigurationError(f"{where(i)}: expected a JSON object with 'key', 'id' or 'input' "
                                     f"and label fields, got {type(rec).__name__}.")
        # text no store takes (a lone surrogate, NUL) escaped as the stored cases and nodes hold it (``_rows``), so
        # the record's input, statements and node texts meet theirs
        rec = cast("dict[str, Any]", escape_unstorable_in(rec)[0])  # noqa: PLW2901
        labels = normalize_labels(rec, where(i))
        if "statement_labels" in labels and "statements" not in labels and rec.get("expected_output") is None:
            raise ConfigurationError(f"{where(i)}: 'statement_labels' without 'statements': give the statements "
                                     "the labels are for (the expected output's claims, in order), so a label "
                                     "cannot silently land on another statement. Nothing was written.")
        if not any(k != "statements" for k in labels):  # "nodes" (keyed node labels) counts as a label field
            raise ConfigurationError(f"{where(i)}: no label field; give at least one of 'labels', "
                                     "'relevance_labels', 'utilization_labels', 'statement_labels'.")
        key = rec.get("key") if rec.get("key") is not None else rec.get("id")
        text_in = rec.get("input")
        if text_in is not None and not isinstance(text_in, str):  # a list would match by its str() form, or not
            raise ConfigurationError(f"{where(i)}: 'input' must be the case's question as a string, got "
                                     f"{type(text_in).__name__}; to label several cases give one record each. "
                                     "Nothing was written.")
        if key is not None and (isinstance(key, bool) or not isinstance(key, str | int)):
            raise ConfigurationError(f"{where(i)}: 'key'/'id' must be the case's key as a string, got "
                                     f"{type(key).__name__}. Nothing was written.")
        if key is None and not text_in:
            raise ConfigurationError(f"{where(i)}: say which case it labels with 'key', 'id' or "
                                     "'input'.")
        if "statement_labels" in labels and "statements" not in labels:
            from .._text import split_sentences  # noqa: PLC0415

            labels["statements"] = split_sentences(str(rec["expected_output"]))
        parsed.append((i, None if key is None else str(key), text_in, labels, rec.get("retrieval_context")))
    return parsed


class CalibrationKeep(LoadStore):
    """Mixed into ``ResultsStore``: the embedded judge's calibration on the store's labels (issue 47), one ``cj_meta``
    row per embedded judge."""

    def stored_calibration(self, judge: str) -> dict[str, Any] | None:
        """The calibration of the embedded judge ``judge`` ("local", "local-cross") on this store's labels, as
        ``keep_calibration`` kept it (``engine.store_calibrated`` reads and writes it), or None."""
        with self._guard("read the store's calibration"), self._begin(write=False) as conn:
            row = conn.execute(select(S.meta.c.value).where(S.meta.c.key == CALIBRATION_KEY + judge)).first()
        got = None if row is None else _loads(row[0], None)
        return got if isinstance(got, dict) else None

    def labels_version(self) -> tuple[int, float]:
        """A cheap token that changes when a label is added, changed or withdrawn (``add_labels``, ``give_label``):
        how many cases carry labels in ``cj_labels`` and when the newest of them was written. A worker compares it
        between looks to notice new labels (``engine.store_calibrated`` then refits only if the labels' fingerprint
        changed)."""
        with self._guard("read the labels' version"), self._begin(write=False) as conn:
            n, newest = conn.execute(select(func.count(), func.max(S.labels.c.created_at))).one()
        return int(n or 0), float(newest or 0.0)

    def keep_calibration(self, judge: str, value: dict[str, Any]) -> None:
        """Keep ``value`` as the calibration of ``judge`` on this store's labels (replacing the one kept)."""
        key = CALIBRATION_KEY + judge
        with self._guard("keep the store's calibration"), self._begin() as conn:
            conn.execute(delete(S.meta).where(S.meta.c.key == key))
            conn.execute(S.meta.insert().values(key=key, value=_dumps(value)))


def _key_record(labels: dict[str, Any], key: str, cases: list[Any], given_nodes: Any,
                where: str) -> dict[str, Any]:
    """One record's labels keyed to the nodes they name (see ``add_labels``)."""
    from ..cases.labels import NODE_FIELDS, keyed_labels, node_ref  # noqa: PLC0415
    from ..cases.testcase import LLMTestCase  # noqa: PLC0415

    positional = any(labels.get(f) is not None for f in NODE_FIELDS)
    if given_nodes is not None:
        base = cases[0] if cases else None
        try:
            case = LLMTestCase(input=str(getattr(base, "input", None) or "labels"),
                               expected_output=getattr(base, "expected_output", None),
                               retrieval_context=given_nodes)
        except Exception as exc:  # noqa: BLE001 - a malformed retrieval_context in the file
            raise ConfigurationError(f"{where}: 'retrieval_context' cannot be read ({exc}). Nothing was "
                                     "written.") from exc
        return _keyed(keyed_labels, case, labels, where)
    if not cases:
        return labels
    if positional:
        shapes = {tuple((r["id"], r["hash"]) for r in map(node_ref, c.retrieval_context or [])) for c in cases}
        if len(shapes) > 1:
            raise ConfigurationError(f"{where} gives node labels by rank for case {key!r}, but the runs holding "
                                     "that case retrieved different nodes, so a rank names no node. Pass the run "
                                     "the labels were written for (--run), give the record the "
                                     "'retrieval_context' it labels, or label nodes by text in 'nodes'. Nothing "
                                     "was written.")
    return _keyed(keyed_labels, cases[0], labels, where)

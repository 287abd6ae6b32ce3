"""Goldens: the questions a team expects its app to answer, with the answers it should give.

Capture fills a test case's ``expected_output`` from the golden whose input matches the captured input (after
normalising case, white space and punctuation), or whose id is passed in the run's metadata
(``metadata={"golden_id": ...}``); ``contextjudge.identity.match_golden`` holds those rules, and ``Goldens.match`` is
the look-up it uses. ``load_goldens`` reads a list of dicts, a JSONL file or a CSV file.
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._json import loads as read_json
from ..errors import ContextJudgeError

__all__ = ["Golden", "Goldens", "load_goldens", "normalize_input"]

_INPUT_KEYS = ("input", "question", "query", "user_input")
# the ids of what should be retrieved (ours, then Ragas' ID-based metrics' and LlamaIndex's names)
_EXPECTED_IDS_KEYS = ("expected_context_ids", "reference_context_ids", "relevant_ids", "expected_ids",
                      "expected_doc_ids")
_EXPECTED_KEYS = ("expected_output", "answer", "ground_truth", "reference", "expected_answer")


def normalize_input(text: str) -> str:
    """Lower case, NFKC, punctuation dropped, white space collapsed: "What's the PTO policy?" ~ "whats the pto policy"."""
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = re.sub(r"[^\w\s]", "", text)
    return " ".join(text.split())


@dataclass
class Golden:
    """One expected interaction: the input, and optionally the expected output, an id and extra fields."""

    input: str
    expected_output: str | None = None
    id: str | None = None
    expected_outcome: str | None = None
    retrieval_context: list[str] | None = None
    context: list[str] | None = None
    # for the judge-free ranking metrics: the chunk or source document ids that should be retrieved (a list, or a
    # dict of id -> graded relevance); "expected_context" is read as ``context`` (expected texts)
    expected_context_ids: list[str] | dict[str, float] | None = None
    additional_metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, row: dict[str, Any], where: str = "") -> Golden:
        """A golden from one row of a file or list: its input (``input``, ``question``, ``query`` or
        ``user_input``), expected output (``expected_output``, ``answer``, ``ground_truth``...), id, and the other
        fields kept in ``additional_metadata``; ``where`` names the row in the error of a row without an input."""
        inp = next((row[k] for k in _INPUT_KEYS if row.get(k)), None)
        if not isinstance(inp, str) or not inp.strip():
            raise ContextJudgeError(f"{where}: a golden needs a non-empty 'input' (or 'question'); got keys "
                                    f"{sorted(row)}. Add an 'input' field.")
        exp = next((row[k] for k in _EXPECTED_KEYS if row.get(k)), None)
        known = set(_INPUT_KEYS) | set(_EXPECTED_KEYS) | {"id", "expected_outcome", "retrieval_context", "context",
                                                          *_EXPECTED_IDS_KEYS, "expected_context", "reference_contexts"}
        ids = next((row[k] for k in _EXPECTED_IDS_KEYS if row.get(k) is not None), None)
        return cls(input=inp, expected_output=None if exp is None else str(exp),
                   id=None if row.get("id") in (None, "") else str(row["id"]),
                   expected_outcome=row.get("expected_outcome"), retrieval_context=row.get("retrieval_context"),
                   context=row.get("context") or row.get("expected_context") or row.get("reference_contexts"),
                   expected_context_ids=ids,
                   additional_metadata={k: v for k, v in row.items() if k not in known})


class Goldens:
    """A set of goldens, looked up by id or by normalised input."""

    def __init__(self, goldens: Iterable[Golden | dict[str, Any]] = (), name: str | None = None) -> None:
        self.items: list[Golden] = [g if isinstance(g, Golden) else Golden.from_dict(g, f"goldens[{i}]")
                                    for i, g in enumerate(goldens)]
        self.name = name  # the file the goldens came from (its name, without the folder), when they came from one
        self.declared_hash: str | None = None  # the hash a goldens file's header line gives, when it has one
        self._by_id = {g.id: g for g in self.items if g.id}
        self._by_input: dict[str, Golden] = {}
        for g in self.items:
            self._by_input.setdefault(normalize_input(g.input), g)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def fingerprint(self) -> dict[str, Any] | None:
        """Which goldens these are, for a run to record (``cj_runs.goldens_hash`` / ``goldens_name``): a hash of
        their content (every field of every golden, in order; a file's formatting does not count) and the file's
        name. None for no goldens."""
        if not self.items:
            return None
        import hashlib  # noqa: PLC0415

        def fields(g: Golden) -> dict[str, Any]:
            row = {"input": g.input, "expected_output": g.expected_output, "id": g.id,
                   "expected_outcome": g.expected_outcome, "retrieval_context": g.retrieval_context,
                   "context": g.context, "extra": g.additional_metadata}
            if g.expected_context_ids is not None:  # counted only when set: older goldens keep their hash
                row["expected_context_ids"] = g.expected_context_ids
            return row

        payload = json.dumps([fields(g) for g in self.items],
                             sort_keys=True, default=str, ensure_ascii=False)
        return {"hash": hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16], "name": self.name,
                "goldens": len(self.items)}

    def match(self, input: str | None = None, golden_id: str | None = None) -> Golden | None:
        """The golden with this id, else the one whose normalised input equals ``input``'s; None when none does."""
        if golden_id is not None and str(golden_id) in self._by_id:
            return self._by_id[str(golden_id)]
        if input:
            return self._by_input.get(normalize_input(input))
        return None


HEADER_KEY = "contextjudge_goldens"


def _with_header(goldens: Goldens, header: dict[str, Any] | None, path: Path) -> Goldens:
    """A goldens file's header line (``{"contextjudge_goldens": {"name", "hash", ...}}``, written by
    ``contextjudge goldens``): its name names the set; a hash that no longer matches the content says the file was
    edited since it was written (the run records the content's own hash either way)."""
    if header is None:
        return goldens
    if isinstance(header.get("name"), str) and header["name"].strip():
        goldens.name = header["name"].strip()
    fp = goldens.fingerprint()
    goldens.declared_hash = header.get("hash")
    if fp and header.get("hash") and header["hash"] != fp["hash"]:
        import logging  # noqa: PLC0415

        logging.getLogger("contextjudge").warning(
            "contextjudge: %s was edited since it was written (its header's hash %s, its content's %s); runs record "
            "the content's hash. Rewrite the header with `contextjudge goldens hash %s` to name this version.",
            path, header["hash"], fp["hash"], path)
    return goldens


def load_goldens(source: Any) -> Goldens:
    """Read goldens from a ``Goldens``, a list of dicts/Goldens, or a ``.jsonl``/``.json``/``.csv`` path."""
    if source is None:
        return Goldens()
    if isinstance(source, Goldens):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise ContextJudgeError(f"goldens file {str(path)!r} does not exist: check the path.")
        suffix = path.suffix.lower()
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            return Goldens((Golden.from_dict(r, f"{path}:{i + 2}") for i, r in enumerate(rows)), name=path.name)
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            try:
                data = read_json(text)
            except json.JSONDecodeError as exc:
                raise ContextJudgeError(f"{path}: not valid JSON ({exc}). Fix the file or use JSONL.") from exc
            if isinstance(data, dict):
                data = data.get("goldens", data.get("data", []))
            return Goldens((Golden.from_dict(r, f"{path}[{i}]") for i, r in enumerate(data)), name=path.name)
        goldens = []
        header: dict[str, Any] | None = None
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = read_json(line)
            except json.JSONDecodeError as exc:
                raise ContextJudgeError(f"{path}:{n}: not a JSON object ({exc.msg}). Each line of a goldens JSONL "
                                        "file must be one object like {\"input\": ..., \"expected_output\": ...}.") \
                    from exc
            if not isinstance(row, dict):
                raise ContextJudgeError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}.")
            if HEADER_KEY in row and not any(row.get(k) for k in _INPUT_KEYS):
                header = row[HEADER_KEY] if isinstance(row[HEADER_KEY], dict) else {}
                continue
            goldens.append(Golden.from_dict(row, f"{path}:{n}"))
        return _with_header(Goldens(goldens, name=path.name), header, path)
    if isinstance(source, Iterable):
        return Goldens(source)
    raise ContextJudgeError(f"goldens must be a list of dicts, a Goldens, or a JSONL/CSV path, not "
                            f"{type(source).__name__}.")

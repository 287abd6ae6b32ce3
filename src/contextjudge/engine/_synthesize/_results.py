"""What generating returns (``GenerationResult``), what it would cost (``GenerationEstimate``), and the goldens file
(``write_goldens``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...cases.goldens import Goldens


@dataclass
class GenerationEstimate:
    """What generating would cost, before any call: calls and tokens for writing the questions and for checking
    them, and dollars where the models' prices are known."""

    model: str
    judge: str
    chunks: int
    questions: int
    calls: int
    input_tokens: int
    output_tokens: int
    check_calls: int
    check_input_tokens: int
    check_output_tokens: int
    dollars: float | None
    assumptions: list[str] = field(default_factory=list)
    # the part of check_input_tokens that is the answer schema each check call sends (0 from the embedded judge)
    check_schema_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        money = "dollars unknown" if self.dollars is None else f"${self.dollars:,.4f}"
        free = " (the embedded judge: no tokens billed)" if self.check_output_tokens == 0 else ""
        return (f"Estimate (no model was called): {self.chunks} chunk(s), {self.questions} question(s) asked for\n"
                f"  writing ({self.model}): {self.calls} calls, {self.input_tokens:,} input + "
                f"{self.output_tokens:,} output tokens\n"
                f"  checking ({self.judge}){free}: {self.check_calls} calls, {self.check_input_tokens:,} input + "
                f"{self.check_output_tokens:,} output tokens\n"
                f"  total: {money}" + "".join(f"\n  assumed: {a}" for a in self.assumptions))


@dataclass
class GenerationResult:
    """The goldens kept (rows ready for a JSONL file), those dropped with why, and what generating cost."""

    goldens: list[dict[str, Any]]
    dropped: list[dict[str, Any]]
    usage: dict[str, Any]
    estimate: GenerationEstimate | None = None
    stopped: str | None = None  # why generation stopped early (a budget), else None

    def as_goldens(self, name: str | None = None) -> Goldens:
        return Goldens(self.goldens, name=name)

    def write(self, path: str | Path, name: str | None = None) -> dict[str, Any]:
        """Write the goldens as JSONL with their name and content hash on the first line; returns that header."""
        return write_goldens(path, self.goldens, name=name, made_by={"usage": self.usage})

    def summary(self) -> str:
        why: dict[str, int] = {}
        for d in self.dropped:
            why[d["reason"]] = why.get(d["reason"], 0) + 1
        u = self.usage
        per = (f"; per kept golden: {u['calls'] / len(self.goldens):.2f} calls, "
               f"{(u['input_tokens'] + u['output_tokens']) / len(self.goldens):,.0f} tokens") if self.goldens else ""
        return (f"{len(self.goldens)} golden(s) kept, {len(self.dropped)} dropped"
                + (" (" + ", ".join(f"{n} {r}" for r, n in sorted(why.items())) + ")" if why else "")
                + f"; {u['calls']} calls, {u['input_tokens']:,} input + {u['output_tokens']:,} output tokens{per}"
                + (f"\nstopped early: {self.stopped}" if self.stopped else ""))


def write_goldens(path: str | Path, rows: Sequence[dict[str, Any]], *, name: str | None = None,
                  made_by: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write goldens as JSONL: first a header line ``{"contextjudge_goldens": {"name", "hash", "goldens", ...}}``
    (``load_goldens`` reads it and checks the hash), then one golden per line. The hash is the one a run records
    (``Goldens.fingerprint``)."""
    path = Path(path)
    name = name or path.stem
    fp = Goldens(list(rows), name=name).fingerprint() or {"hash": None, "goldens": 0}
    header = {"name": name, "hash": fp["hash"], "goldens": len(rows), "format": 1, **(made_by or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"contextjudge_goldens": header}, ensure_ascii=False, default=str) + "\n")
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
    return header

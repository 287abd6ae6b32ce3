"""What an app's run over goldens gave (``contextjudge eval --app``, ``AppAdapter.collect``'s items: captured cases
and ``GoldenFailure``s) made the test cases to score, callable from Python (issue 49: front doors hold no domain
work): each golden's gold labels brought to its case, the cases keyed by their golden's id in the goldens' order,
the goldens that gave nothing, and the retrievers the cases went through.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..cases.identity import (
    GoldenEntry,
    attach_golden_labels,
    golden_id_of,
    is_generated_id,
    key_by_golden,
    unmatched_goldens,
)
from ..cases.provenance import RETRIEVER_KEY
from ._case import GoldenFailure

__all__ = ["GoldenCases", "golden_cases", "retriever_names"]


@dataclass
class GoldenCases:
    """``golden_cases``' answer: ``cases`` to score (a golden whose app call raised is an error case among them),
    ``failed`` (those golden failures) and ``missing`` (goldens that gave neither a case nor a failure)."""

    cases: list[Any] = field(default_factory=list)
    failed: list[GoldenFailure] = field(default_factory=list)
    missing: list[Any] = field(default_factory=list)


def golden_cases(goldens: Any, items: list[Any]) -> GoldenCases:
    """The test cases of an app's run over ``goldens``: each captured case gets its golden's gold labels
    (``identity.attach_golden_labels``; an adapter may build cases without matching goldens itself); the cases,
    in the goldens' order, are keyed by their golden's id where that is unique (``identity.key_by_golden``), so runs
    of different app versions pair up; a golden whose app call raised becomes an error case."""
    failed = [x for x in items if isinstance(x, GoldenFailure)]
    captured = [x for x in items if not isinstance(x, GoldenFailure)]
    for item in captured:
        attach_golden_labels(goldens, item.test_case, golden_id_of(item))
    entries = []
    for item in items:
        if isinstance(item, GoldenFailure):  # its case carries its golden's id already
            entries.append(GoldenEntry(item.test_case(), item.golden.id, replaceable=True))
            continue
        tc = item.test_case
        own = getattr(tc, "id", None)
        generated = own is None or own in (item.case_id, item.root_run_id) or is_generated_id(own)
        entries.append(GoldenEntry(tc, golden_id_of(item), replaceable=generated))
    missing = unmatched_goldens(goldens, [(getattr(item, "test_case", None), golden_id_of(item)) for item in captured],
                                seen=[f.golden for f in failed])
    return GoldenCases(key_by_golden(entries), failed, missing)


def retriever_names(test_cases: list[Any], top: int = 2) -> str | None:
    """The retrievers ``test_cases`` went through (``provenance.RETRIEVER_KEY``), the ``top`` most used, comma
    separated (`` ...`` when there were more), or None: what tells two runs of one app apart in a run's name."""
    seen: Counter[str] = Counter()
    for tc in test_cases:
        meta = getattr(tc, "additional_metadata", None) or {}
        value = meta.get(RETRIEVER_KEY) if isinstance(meta, dict) else None
        for name in value if isinstance(value, list) else [value]:
            if name:
                seen[str(name)] += 1
    if not seen:
        return None
    return ", ".join(n for n, _ in seen.most_common(top)) + (" ..." if len(seen) > top else "")

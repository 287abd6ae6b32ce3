"""Which cases a report lists in full when a run is large: every aggregate of the page (means, intervals,
histograms, the comparison) is computed over every case, but a page of 100,000 case cards would not open; past
``max_cases`` the page lists the cases worth reading (those with errors, the lowest-scoring and the most uncertain
per metric, in a comparison those that changed most) and an even sample of the rest, in run order, and says so."""

from __future__ import annotations

from typing import Any

from .._result import EvaluationResult, TestResult

__all__ = ["DEFAULT_MAX_CASES", "shown_cases"]

DEFAULT_MAX_CASES = 1000
_EACH = 50  # per metric: the lowest-scoring, the most uncertain, the most changed


def _uncertainty(m: Any) -> float:
    """How unsure a result is: the spread of its judge repeats when it has one, else how close its score is to
    its threshold (closer is less sure)."""
    if m.score_spread is not None and m.score_spread > 0:
        return 1.0 + float(m.score_spread)
    return 1.0 - min(1.0, abs(float(m.score) - float(m.threshold)))


def shown_cases(result: EvaluationResult, max_cases: int | None, *,
                baseline: dict[int, TestResult] | None = None) -> tuple[list[TestResult], str | None]:
    """(the cases to list, in run order; a note saying what was left out, or None when every case is listed)."""
    cases = result.test_results
    if not max_cases or len(cases) <= max_cases:
        return list(cases), None
    picked: dict[int, str] = {}

    def take(trs: list[TestResult], why: str, limit: int) -> None:
        for tr in trs[:limit]:
            if len(picked) >= max_cases:
                return
            picked.setdefault(tr.index, why)

    take([tr for tr in cases if tr.error or any(m.error for m in tr.metrics_data)], "error", _EACH)
    names: list[str] = []
    for tr in cases:
        for m in tr.metrics_data:
            if m.name not in names:
                names.append(m.name)
    for name in names:
        scored = [(tr, m) for tr in cases for m in tr.metrics_data if m.name == name and m.score is not None]
        take([tr for tr, _ in sorted(scored, key=lambda p: (p[1].score, p[0].index))], "lowest", _EACH)
        take([tr for tr, _ in sorted(scored, key=lambda p: (-_uncertainty(p[1]), p[0].index))], "uncertain", _EACH)
        if baseline is not None:
            moved = []
            for tr, m in scored:
                b = baseline.get(tr.index)
                old = next((x.score for x in b.metrics_data if x.name == name), None) if b is not None else None
                if old is not None:
                    moved.append((abs(float(m.score or 0.0) - float(old)), tr))
            take([tr for _, tr in sorted(moved, key=lambda p: (-p[0], p[1].index))], "changed", _EACH)
    chosen = len(picked)
    room = max_cases - chosen
    rest = [tr for tr in cases if tr.index not in picked]
    if room > 0 and rest:
        step = len(rest) / room
        for k in range(min(room, len(rest))):
            picked.setdefault(rest[int(k * step)].index, "sample")
    shown = [tr for tr in cases if tr.index in picked]
    sampled = len(shown) - chosen
    note = (f"This run has {len(cases):,} cases; this page lists {len(shown):,} of them in full: {chosen:,} worth "
            f"reading (those with an error, and per metric the {_EACH} lowest-scoring and the {_EACH} most uncertain"
            + (f" and the {_EACH} that changed most against the baseline" if baseline is not None else "")
            + f") and an even sample of {sampled:,} of the other {len(rest):,}, in run order. Every figure above "
            "(means, intervals, distributions, the comparison) counts every case. `contextjudge export RUN` writes "
            "every case; `contextjudge report --max-cases 0` lists them all.")
    return shown, note

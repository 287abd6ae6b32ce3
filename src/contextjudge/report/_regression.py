"""What regressed between two runs, named per golden: the goldens that lost their answer document (exact, from the
expected ids or texts they carry), and per gated metric the exact sign test on per-golden wins and losses (no t
interval: with a dozen pairs it cannot tell, where a sign test says exactly how likely the losses are). The runs'
node counts are compared, so a score that rose because fewer nodes came back is said to come from k.

``contextjudge compare`` and ``contextjudge eval --baseline`` print it and gate on it (``--fail-on-regression``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._result import EvaluationResult, TestResult
from .._text import shorten
from ..stats import sign_test
from ._html import _metric_names, _pairs, _score_of

if TYPE_CHECKING:
    from ..store import RunReads

__all__ = ["ALPHA", "LostAnswer", "MetricSignTest", "Regression", "find_regression", "not_gated_names",
           "stored_regression"]

ALPHA = 0.05  # the family-wise level of the sign tests (Bonferroni across the gated metrics tested)


@dataclass
class LostAnswer:
    """A golden whose current run retrieved none of the expected documents its baseline run retrieved."""

    golden: str  # its golden id, else its test case id, else its position
    text: str  # its input
    lost: list[str]  # the expected documents (ids or texts) the baseline retrieved and this run did not

    def words(self) -> str:
        return f"{self.golden} {shorten(self.text, 40)!r}"


@dataclass
class MetricSignTest:
    """One metric's paired wins and losses (current against baseline, per golden; ties left out) and the exact
    one-sided sign test's p-value for a drop."""

    metric: str
    wins: int
    losses: int
    ties: int
    p_value: float
    gated: bool


@dataclass
class Regression:
    """What changed for the worse between two runs (``find_regression``)."""

    pairs: int
    lost: list[LostAnswer] = field(default_factory=list)
    tests: list[MetricSignTest] = field(default_factory=list)
    nodes: tuple[float | None, float | None] = (None, None)  # mean nodes per paired case: baseline, current
    alpha: float = ALPHA

    @property
    def dropped(self) -> list[MetricSignTest]:
        """The gated metrics whose sign test says they dropped (p below ``alpha`` over the metrics tested)."""
        tested = [t for t in self.tests if t.gated and t.wins + t.losses > 0]
        cut = self.alpha / max(1, len(tested))
        return [t for t in tested if t.losses > t.wins and t.p_value < cut]

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.dropped)

    @property
    def k_changed(self) -> bool:
        b, c = self.nodes
        return b is not None and c is not None and abs(b - c) > 1e-9

    def k_words(self) -> str:
        b, c = self.nodes
        return f"k changed: {b:.1f} -> {c:.1f} nodes per case" if b is not None and c is not None else ""

    def verdict(self) -> str:
        """Why a gate on this regression fails (``--fail-on-regression``, ``eval --baseline``), in one line."""
        parts = []
        if self.lost:
            parts.append(f"{len(self.lost)} golden(s) lost every expected document the baseline retrieved ("
                         + ", ".join(g.golden for g in self.lost[:10]) + ")")
        if self.dropped:
            parts.append("dropped on " + ", ".join(f"{t.metric} ({t.losses} worse, {t.wins} better, sign test p = "
                                                    f"{t.p_value:.4f})" for t in self.dropped))
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The regression in words: the goldens that lost their answer document, the metrics that dropped, and the
        change of k."""
        out = []
        if self.lost:
            n = len(self.lost)
            out.append(f"{n} golden{'s' if n != 1 else ''} lost {'their' if n != 1 else 'its'} answer document: "
                       + ", ".join(g.words() for g in self.lost[:10]) + (" ..." if n > 10 else ""))
        for t in self.dropped:
            out.append(f"{t.metric} dropped: worse on {t.losses} golden(s), better on {t.wins}, {t.ties} unchanged "
                       f"(exact sign test p = {t.p_value:.4f})")
        if self.k_changed:
            out.append(f"NOTE: {self.k_words()} (the runs returned different numbers of nodes): a per-node score "
                       "such as contextual relevancy rises when fewer nodes come back, whether or not the answer is "
                       "among them")
        return out


def _golden_of(tr: TestResult) -> str:
    tc = tr.test_case
    meta = getattr(tc, "additional_metadata", None) or {}
    gid = meta.get("golden_id") if isinstance(meta, dict) else None
    if gid:
        return str(gid)
    own = getattr(tc, "id", None)
    if own:
        return str(own).removeprefix("golden-")
    return f"#{tr.index + 1}"


def _found(tr: TestResult) -> set[str] | None:
    """The expected documents the case's retrieval found (ids or texts), or None when it carries none."""
    from ..metrics import ranked_relevance  # noqa: PLC0415

    tc = tr.test_case
    if getattr(tc, "expected_context_ids", None) is None and not getattr(tc, "context", None):
        return None
    try:
        _, _, _, hits = ranked_relevance(tc)
    except Exception:  # noqa: BLE001 - a case that cannot be matched names nothing lost
        return None
    return {h for per_node in hits for h in per_node}


def _nodes(trs: Iterable[TestResult]) -> float | None:
    counts = [len(getattr(tr.test_case, "retrieval_context", None) or []) for tr in trs]
    return sum(counts) / len(counts) if counts else None


def find_regression(current: EvaluationResult, baseline: EvaluationResult, *,
                    gated: Callable[[str], bool] = lambda name: True, alpha: float = ALPHA) -> Regression:
    """Pair the runs' cases (by test case id, else input) and name what got worse: each golden that retrieved none
    of the expected documents its baseline retrieved, and per metric (``gated(name)`` says whether it gates) the
    exact sign test on its per-golden wins and losses."""
    pairs = _pairs(current, baseline)
    out = Regression(pairs=len(pairs), alpha=alpha)
    for b, c in pairs.values():
        before, after = _found(b), _found(c)
        if before and after is not None and not (before & after):
            out.lost.append(LostAnswer(_golden_of(c), str(getattr(c.test_case, "input", "") or ""),
                                       sorted(before)))
    for name in _metric_names(current, baseline):
        wins = losses = ties = 0
        for b, c in pairs.values():
            sb, sc = _score_of(b, name), _score_of(c, name)
            if sb is None or sc is None:
                continue
            if sc > sb + 1e-12:
                wins += 1
            elif sc < sb - 1e-12:
                losses += 1
            else:
                ties += 1
        if wins + losses + ties:
            out.tests.append(MetricSignTest(name, wins, losses, ties, sign_test(losses, wins), gated(name)))
    out.nodes = (_nodes(b for b, _ in pairs.values()), _nodes(c for _, c in pairs.values()))
    return out


def not_gated_names(result: EvaluationResult, config: dict[str, Any] | None) -> set[str]:
    """The metric names of a run that were shown but not gated: as its run recorded them (``contextjudge eval``
    writes ``not_gated``), else by the rule of ``metrics.not_gated`` for the judge its results name (the embedded
    judge, uncalibrated: relevancy, utilization, faithfulness)."""
    recorded = (config or {}).get("not_gated")
    if isinstance(recorded, dict):
        return set(recorded)
    from .._result import is_embedded_judge  # noqa: PLC0415
    from ..metrics import ALWAYS_GATED, BY_KEY, FAMILY_OF_KEY  # noqa: PLC0415

    loose = {BY_KEY[k].name for k in FAMILY_OF_KEY if k not in ALWAYS_GATED}
    out = set()
    for tr in result.test_results:
        for m in tr.metrics_data:
            model = str(m.evaluation_model or "")
            if m.name in loose and is_embedded_judge(model) and not model.endswith("+calibrated"):
                out.add(m.name)
    return out


def stored_regression(store: RunReads, run_id: str, current: EvaluationResult, baseline: EvaluationResult) -> Regression:
    """``find_regression`` of two runs loaded from ``store``, the sign tests gating only the metrics the current run
    (``run_id``) gates on (``not_gated_names`` of its recorded config; an old run without one: the judge's rule)."""
    try:
        config = store.run_info(run_id).config
    except Exception:  # noqa: BLE001 - an old run without a config: the judge's rule decides
        config = None
    loose = not_gated_names(current, config)
    return find_regression(current, baseline, gated=lambda name: name not in loose)

"""The statistics behind every number contextjudge prints with an interval. Standard library only.

- ``mean_interval``: a mean score over cases with its 95% Student-t interval, clipped to the scores' range. When the
  judge was asked ``repeats`` times, each case's spread across repeats is added to the variance. When every score is
  the same (no spread to measure), the interval is the Wilson interval of that value over the cases, so five cases
  that all score 1.0 do not claim certainty.
- ``proportion_interval``: a pass rate (or any share) with its Wilson score interval.
- ``paired_difference``: the mean of paired differences (this run minus a baseline) with its paired-t interval;
  ``significantly_worse`` / ``significantly_better`` read it.
- ``unpaired_difference``: the difference of two means over independent groups of cases (two windows of production
  traffic) with its Welch interval, for ``contextjudge trend --fail-on-drop`` when the windows share too few inputs
  to pair.
- ``ppi_mean``: a prediction-powered (bias-corrected) mean from judge scores on every case and gold scores on some
  (Angelopoulos et al. 2023, with the power tuning of PPI++), with the judge's measured bias and the labelled-only
  interval beside it.
- ``binary_agreement``: accuracy, Cohen's kappa, true-positive and true-negative rates and the base rate of
  yes/no verdicts against labels, each with a 95% percentile-bootstrap interval that resamples whole cases (items of
  one case are not independent).
- ``spearman``, ``mae``: how judged metric scores track gold ones.

Every function is deterministic (bootstrap resampling uses a fixed seed).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

__all__ = ["Agreement", "Interval", "PPIEstimate", "binary_agreement", "bootstrap", "cohen_kappa", "confusion", "mae",
           "mean_interval", "moments_interval", "one_class", "paired_difference", "ppi_mean", "proportion_interval", "sign_test",
           "significantly_better", "significantly_worse", "spearman", "t_quantile", "unpaired_difference"]

LEVEL = 0.95
SEED = 20240601


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval. ``low``/``high`` are None when there are too few values for one."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    level: float = LEVEL
    method: str = ""

    @property
    def width(self) -> float | None:
        """``high - low``, or None without an interval."""
        return None if self.low is None or self.high is None else self.high - self.low

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies inside the interval (False without one)."""
        return self.low is not None and self.high is not None and self.low <= x <= self.high

    def as_list(self) -> list[float] | None:
        """``[low, high]``, or None (the JSON form)."""
        return None if self.low is None or self.high is None else [self.low, self.high]

    def to_dict(self) -> dict[str, Any]:
        """The estimate, bounds, count, level and method, as a dict."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n, "level": self.level,
                "method": self.method}

    def __str__(self) -> str:
        if self.estimate is None:
            return "n/a"
        if self.low is None:
            return f"{self.estimate:.3f}"
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided Student-t critical value for ``df`` degrees of freedom (exact for df 1 and 2, else a
    Cornish-Fisher expansion, within 0.4% at df 3 and 0.01% from df 10)."""
    if df <= 0:
        raise ValueError("df must be positive")
    p = 0.5 + level / 2
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        a = 4 * p * (1 - p)
        return (2 * p - 1) * math.sqrt(2 / a)
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * v ** 4))


def _clean(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _var(xs: Sequence[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    m = sum(xs) / n
    return sum((x - m) ** 2 for x in xs) / (n - 1)


def proportion_interval(successes: int, n: int, level: float = LEVEL) -> Interval:
    """A share with its Wilson score interval (no interval for n = 0).

    6 of 10 -> 0.6 [0.313, 0.832]; 10 of 10 -> 1.0 [0.722, 1.0].
    """
    if n <= 0:
        return Interval(None, None, None, 0, level, "wilson")
    p = successes / n
    z = _z(level)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n, level, "wilson")


def mean_interval(values: Sequence[Any], *, level: float = LEVEL, bounds: tuple[float, float] | None = (0.0, 1.0),
                  within_variances: Sequence[float] | None = None) -> Interval:
    """The mean of ``values`` (Nones skipped) with its Student-t interval over cases.

    ``within_variances``: per case, the variance of its score across judge repeats (0 for a case judged once); their
    mean, over n, is added to the variance of the mean, so a judge that disagrees with itself widens the interval.
    With one value there is no interval. With no spread at all (every value equal and no repeat spread) the interval
    is the Wilson interval of that value over n (see the module's docstring). The interval is clipped to ``bounds``.

    [0.2, 0.4, 0.6, 0.8] -> 0.5 [0.090, 0.910] (t_3 = 3.179 here, 3.182 exactly; s = 0.2582, s / sqrt(4) = 0.1291).
    """
    xs = _clean(values)
    n = len(xs)
    if n == 0:
        return Interval(None, None, None, 0, level, "t")
    m = sum(xs) / n
    if n == 1:
        return Interval(m, None, None, 1, level, "t")
    within = [float(w) for w in (within_variances or []) if w is not None]
    extra = (sum(within) / len(within)) if within else 0.0
    return _t_or_wilson(m, n, _var(xs) + extra, level, bounds)


def moments_interval(n: int, total: Any, total_sq: Any, *, within_mean: Any = 0.0, level: float = LEVEL,
                     bounds: tuple[float, float] | None = (0.0, 1.0)) -> Interval:
    """``mean_interval`` from running sums: ``n`` values, their sum and their sum of squares (and the mean of the
    cases' repeat variances), for a run that keeps totals instead of values. Pass ``fractions.Fraction`` sums to
    get an answer that does not depend on the order the values came in (float sums would); a spread that is exactly
    zero then takes the Wilson branch, as ``mean_interval`` does."""
    if n <= 0:
        return Interval(None, None, None, 0, level, "t")
    m = total / n
    if n == 1:
        return Interval(float(m), None, None, 1, level, "t")
    var = (total_sq - total * total / n) / (n - 1)
    return _t_or_wilson(float(m), n, max(0.0, float(var)) + float(within_mean), level, bounds)


def _t_or_wilson(m: float, n: int, var: float, level: float, bounds: tuple[float, float] | None) -> Interval:
    if var <= 0.0:
        lo_b, hi_b = bounds or (0.0, 1.0)
        if hi_b > lo_b:
            scaled = (m - lo_b) / (hi_b - lo_b)
            w = proportion_interval(round(scaled * n), n, level)
            if w.low is None or w.high is None:  # no cases: no bounds either
                return Interval(m, None, None, n, level, "wilson")
            return Interval(m, lo_b + w.low * (hi_b - lo_b), lo_b + w.high * (hi_b - lo_b), n, level, "wilson")
        return Interval(m, m, m, n, level, "t")
    half = t_quantile(n - 1, level) * math.sqrt(var / n)
    lo, hi = m - half, m + half
    if bounds is not None:
        lo, hi = max(bounds[0], lo), min(bounds[1], hi)
    return Interval(m, lo, hi, n, level, "t")


def paired_difference(pairs: Sequence[tuple[float, float]], *, level: float = LEVEL,
                      bounds: tuple[float, float] | None = (-1.0, 1.0)) -> Interval:
    """The mean of (current - baseline) over paired cases with its paired-t interval, clipped to ``bounds`` (what a
    difference of two scores in [0, 1] can be: -1 to 1; None: not clipped). All differences equal: an interval of
    no width (the runs differ the same way on every case).

    pairs (baseline, current) [(0.5, 0.4), (0.6, 0.4), (0.7, 0.6)] -> -0.133 [-0.277, 0.010]; three cases that each
    drop by 1, 1 and 0 -> -0.667 [-1.000, +0.768], not [-2.101, +0.768].
    """
    diffs = [float(c) - float(b) for b, c in pairs if b is not None and c is not None]
    n = len(diffs)
    if n == 0:
        return Interval(None, None, None, 0, level, "paired-t")
    m = sum(diffs) / n
    if n == 1:
        return Interval(m, None, None, 1, level, "paired-t")
    half = t_quantile(n - 1, level) * math.sqrt(_var(diffs) / n)
    low, high = m - half, m + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Interval(m, low, high, n, level, "paired-t")


def unpaired_difference(baseline: Sequence[Any], current: Sequence[Any], *, level: float = LEVEL) -> Interval:
    """The difference of two means (current - baseline) over two independent groups of cases, with its Welch
    interval (unequal variances; Welch-Satterthwaite degrees of freedom). For production windows whose cases are not
    the same inputs, where ``paired_difference`` has nothing to pair. No interval when a group has fewer than two
    values. Both groups without spread: an interval of no width.

    baseline [0.6, 0.7, 0.8], current [0.3, 0.4, 0.5] -> -0.300 [-0.527, -0.073] (df 4).
    """
    b, c = _clean(baseline), _clean(current)
    nb, nc = len(b), len(c)
    if nb == 0 or nc == 0:
        return Interval(None, None, None, min(nb, nc), level, "welch-t")
    m = sum(c) / nc - sum(b) / nb
    if nb < 2 or nc < 2:
        return Interval(m, None, None, min(nb, nc), level, "welch-t")
    vb, vc = _var(b) / nb, _var(c) / nc
    se2 = vb + vc
    if se2 <= 0.0:
        return Interval(m, m, m, min(nb, nc), level, "welch-t")
    df = se2 ** 2 / ((vb ** 2 / (nb - 1) if vb else 0.0) + (vc ** 2 / (nc - 1) if vc else 0.0))
    half = t_quantile(max(1, int(df)), level) * math.sqrt(se2)
    return Interval(m, max(-1.0, m - half), min(1.0, m + half), min(nb, nc), level, "welch-t")  # scores in [0, 1]


def significantly_worse(diff: Interval) -> bool:
    """Whether a paired difference (current - baseline) is below zero with its whole interval."""
    return diff.high is not None and diff.high < 0


def significantly_better(diff: Interval) -> bool:
    """Whether a difference's interval lies wholly above zero."""
    return diff.low is not None and diff.low > 0


def sign_test(losses: int, wins: int) -> float:
    """The exact one-sided sign test (McNemar's exact test on paired outcomes): the chance of at least ``losses``
    losses among ``losses + wins`` paired cases that changed (ties left out), were a loss and a win equally likely.

    2 losses, 0 wins -> 0.25 (two goldens cannot show a drop); 6 losses, 0 wins -> 0.015625; none changed -> 1.0.
    """
    n = losses + wins
    if n == 0 or losses <= 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(losses, n + 1)) / 2 ** n


# --------------------------------------------------------------------------------------- prediction-powered
@dataclass(frozen=True)
class PPIEstimate:
    """A bias-corrected mean. ``corrected``: the prediction-powered estimate and interval; ``judged``: the judge's
    mean over every case (its interval ignores the judge's bias); ``labelled``: the gold mean of the labelled cases
    alone with its interval; ``bias``: the judge's mean score minus the gold one on the labelled cases, with its
    interval; ``lam``: the power-tuning weight (1 is classic PPI, 0 ignores the judge)."""

    corrected: Interval
    judged: Interval
    labelled: Interval
    bias: Interval
    lam: float
    n_labelled: int
    n_unlabelled: int

    def to_dict(self) -> dict[str, Any]:
        """The estimates and counts as a dict (the JSON form)."""
        return {"corrected": self.corrected.to_dict(), "judged": self.judged.to_dict(),
                "labelled": self.labelled.to_dict(), "bias": self.bias.to_dict(), "lambda": self.lam,
                "labelled_cases": self.n_labelled, "unlabelled_cases": self.n_unlabelled}


def ppi_mean(judged: Sequence[float | None], gold: Sequence[float | None], *, level: float = LEVEL,
             tune: bool = True, bounds: tuple[float, float] | None = (0.0, 1.0)) -> PPIEstimate | None:
    """Prediction-powered mean of a metric over cases.

    ``judged[i]``: the judge's score of case i (None: not scored, the case is left out); ``gold[i]``: its gold-label
    score, or None where the case has no labels. With n labelled cases (f_i, y_i) and N unlabelled judge scores u_j::

        lam   = cov(y, f) / ((1 + n/N) var(f))  clipped to [0, 1]   (1 when tune=False)
        theta = mean(y) + lam * (mean(u) - mean(f))
        var   = lam^2 var(u) / N + var(y - lam f) / n
        interval = theta +- t_{n-1} * sqrt(var)

    The critical value is Student t with n - 1 degrees of freedom (n the labelled cases), as for the labelled-only
    and the bias intervals: the labelled term dominates the variance and is estimated from n cases, and with the
    normal z the interval under-covered with few labels (benchmarks/ppi.py, HotpotQA, 500 draws: 86.4% with 10
    labelled rows, 91.2% with t; 93.4% with 25, 94.0% with t). The interval is for the mean over cases like these, as
    ``mean_interval``'s is; it has no finite-population correction, so against the mean of the run's own cases it is
    conservative when a large share of them is labelled (97.4% coverage with 20% labelled, 100% with half).

    None when fewer than two cases are labelled or none is unlabelled (then there is nothing to correct: the gold mean
    of the labelled cases is the whole answer).
    """
    lab = [(float(f), float(y)) for f, y in zip(judged, gold, strict=False) if f is not None and y is not None]
    unl = [float(f) for f, y in zip(judged, gold, strict=False) if f is not None and y is None]
    n, big_n = len(lab), len(unl)
    if n < 2 or big_n < 1:
        return None
    fs = [f for f, _ in lab]
    ys = [y for _, y in lab]
    mf, my, mu = sum(fs) / n, sum(ys) / n, sum(unl) / big_n
    vf = _var(fs)
    cov = sum((f - mf) * (y - my) for f, y in lab) / (n - 1)
    if tune:
        lam = cov / ((1 + n / big_n) * vf) if vf > 0 else 0.0
        lam = min(1.0, max(0.0, lam))
    else:
        lam = 1.0
    theta = my + lam * (mu - mf)
    resid = [y - lam * f for f, y in lab]
    var = lam * lam * _var(unl) / big_n + _var(resid) / n
    q = t_quantile(n - 1, level)
    half = q * math.sqrt(var)
    lo, hi = theta - half, theta + half
    if bounds is not None:
        lo, hi = max(bounds[0], lo), min(bounds[1], hi)
    corrected = Interval(theta, lo, hi, n + big_n, level, "ppi++" if tune else "ppi")
    half_y = q * math.sqrt(_var(ys) / n)
    labelled = Interval(my, max(bounds[0], my - half_y) if bounds else my - half_y,
                        min(bounds[1], my + half_y) if bounds else my + half_y, n, level, "t")
    diffs = [f - y for f, y in lab]
    md = sum(diffs) / n
    half_d = q * math.sqrt(_var(diffs) / n)
    bias = Interval(md, md - half_d, md + half_d, n, level, "t")
    judged_iv = mean_interval(fs + unl, level=level, bounds=bounds)
    return PPIEstimate(corrected, judged_iv, labelled, bias, lam, n, big_n)


# --------------------------------------------------------------------------------------- agreement
def cohen_kappa(tp: int, fp: int, fn: int, tn: int) -> float | None:
    """Cohen's kappa of yes/no verdicts against yes/no labels, from the confusion counts.

    tp=20, fp=5, fn=10, tn=15 -> po = 0.7, pe = 0.5*0.6 + 0.5*0.4 = 0.5, kappa = 0.4. None with no items; 1.0 when
    judge and labels agree on every item and both say only one thing (pe = 1).
    """
    total = tp + fp + fn + tn
    if total == 0:
        return None
    po = (tp + tn) / total
    p_yes = ((tp + fp) / total) * ((tp + fn) / total)
    p_no = ((fn + tn) / total) * ((fp + tn) / total)
    pe = p_yes + p_no
    if pe >= 1.0:
        return 1.0 if po >= 1.0 else 0.0
    return (po - pe) / (1 - pe)


def one_class(tp: int, fp: int, fn: int, tn: int) -> str | None:
    """Why Cohen's kappa says nothing on these counts, or None when it can: every label, or every verdict, is one
    class ("only yes labels", "only no verdicts"); kappa is then 0 or 1 by arithmetic, not by agreement."""
    if tp + fp + fn + tn == 0:
        return "no items"
    for what, yes, no in (("labels", tp + fn, fp + tn), ("verdicts", tp + fp, fn + tn)):
        if not yes or not no:
            return f"only {'yes' if yes else 'no'} {what}"
    return None


def confusion(pairs: Iterable[tuple[bool, bool]]) -> tuple[int, int, int, int]:
    """(tp, fp, fn, tn) of (verdict, label) pairs."""
    tp = fp = fn = tn = 0
    for verdict, label in pairs:
        if verdict and label:
            tp += 1
        elif verdict:
            fp += 1
        elif label:
            fn += 1
        else:
            tn += 1
    return tp, fp, fn, tn


def _agreement_stats(tp: int, fp: int, fn: int, tn: int) -> dict[str, float | None]:
    total = tp + fp + fn + tn
    return {"accuracy": (tp + tn) / total if total else None, "kappa": cohen_kappa(tp, fp, fn, tn),
            "tpr": tp / (tp + fn) if tp + fn else None, "tnr": tn / (tn + fp) if tn + fp else None,
            "base_rate": (tp + fn) / total if total else None}


@dataclass(frozen=True)
class Agreement:
    """Judge verdicts against labels over the items of some cases: confusion counts and the statistics, each an
    Interval (percentile bootstrap over cases)."""

    cases: int
    items: int
    tp: int
    fp: int
    fn: int
    tn: int
    accuracy: Interval
    kappa: Interval
    tpr: Interval
    tnr: Interval
    base_rate: Interval
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The counts, confusion matrix and each statistic with its interval (the JSON form)."""
        out: dict[str, Any] = {"cases": self.cases, "items": self.items,
                               "confusion": {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn}}
        for name in ("base_rate", "accuracy", "kappa", "tpr", "tnr"):
            iv: Interval = getattr(self, name)
            out[name] = iv.estimate
            out[f"{name}_ci"] = iv.as_list()
        return out


def bootstrap(groups: Sequence[Any], statistic: Any, *, resamples: int = 2000, level: float = LEVEL,
              seed: int = SEED) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of ``statistic(list_of_groups)`` resampling the groups with replacement.
    Resamples where the statistic is None are skipped; (None, None) with fewer than two groups."""
    if len(groups) < 2:
        return None, None
    rng = random.Random(seed)
    stats = []
    k = len(groups)
    for _ in range(resamples):
        value = statistic(rng.choices(groups, k=k))
        if value is not None:
            stats.append(value)
    if len(stats) < 10:
        return None, None
    stats.sort()
    alpha = (1 - level) / 2
    lo = stats[max(0, int(math.floor(alpha * len(stats))))]
    hi = stats[min(len(stats) - 1, int(math.ceil((1 - alpha) * len(stats))) - 1)]
    return lo, hi


def binary_agreement(cases: Sequence[Sequence[tuple[bool, bool]]], *, level: float = LEVEL,
                     resamples: int = 2000, seed: int = SEED) -> Agreement:
    """Agreement of (verdict, label) pairs grouped by case; intervals resample whole cases."""
    groups = [list(c) for c in cases if c]
    flat = [p for g in groups for p in g]
    counts = confusion(flat)
    point = _agreement_stats(*counts)
    conf_by_group = [confusion(g) for g in groups]

    def stat_of(name: str):
        def f(sample: list[tuple[int, int, int, int]]) -> float | None:
            tot = [sum(c[i] for c in sample) for i in range(4)]
            return _agreement_stats(*tot)[name]
        return f

    ivs = {}
    for name in ("accuracy", "kappa", "tpr", "tnr", "base_rate"):
        lo, hi = bootstrap(conf_by_group, stat_of(name), resamples=resamples, level=level, seed=seed)
        ivs[name] = Interval(point[name], lo, hi, len(groups), level, "bootstrap")
    tp, fp, fn, tn = counts
    return Agreement(len(groups), len(flat), tp, fp, fn, tn, accuracy=ivs["accuracy"], kappa=ivs["kappa"],
                     tpr=ivs["tpr"], tnr=ivs["tnr"], base_rate=ivs["base_rate"])


# --------------------------------------------------------------------------------------- score agreement
def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties get average ranks); None when either side has no spread."""
    if len(a) != len(b) or len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return cov / math.sqrt(va * vb)


def mae(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The mean absolute difference of two equal-length sequences, or None when empty or unequal."""
    if not a or len(a) != len(b):
        return None
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)

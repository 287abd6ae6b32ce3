"""The HTML report: one self-contained file that fetches nothing from the network.

Every piece of user text passes through ``_format.e`` before it reaches the page, and a Content-Security-Policy
forbids remote loads and every script but the report's own (``_script``, allowed by its hash) as a second line of
defence. Charts are inline SVG drawn here; the cases' rows and cards come from ``_case``. Everything is rendered:
the script only filters, sorts and searches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._result import EvaluationResult, MetricResult, TestResult
from ..stats import Interval as StatsInterval
from ..stats import paired_difference as paired_t
from ..stats import significantly_better, significantly_worse
from ._bounded import DEFAULT_MAX_CASES, shown_cases
from ._case import CaseContext, case_card, case_row
from ._format import case_input, ci, different_goldens, e, num, pct, short, signed, when
from ._script import CSP, script_tag
from ._stats import Interval, pair_key

__all__ = ["MetricChange", "RunView", "compare_runs", "render_html"]


@dataclass
class RunView:
    """A run to report: its results plus what the store knows about it."""

    result: EvaluationResult
    run_id: str | None = None
    name: str | None = None
    created_at: float | None = None
    judges: list[dict[str, Any]] = field(default_factory=list)
    store: str | None = None
    # past this many cases the page lists the cases worth reading and a sample of the rest (_bounded.py); None: all
    max_cases: int | None = DEFAULT_MAX_CASES
    # a run read without its verdicts (a large run): reads those of the cases given, before the page lists them
    fill: Callable[[list[TestResult]], None] | None = None
    # the golden set the run ran ({"name", "hash"}, as the store records it), else None
    goldens: dict[str, Any] | None = None


# --------------------------------------------------------------------------------------------------- charts
def _histogram(scores: list[float], threshold: float | None, mean: float | None,
               baseline: list[float] | None = None, label: str = "") -> str:
    """Score distribution over [0, 1] in ten bins, with threshold and mean marks; baseline bars behind in grey."""
    w, h, pad_l, pad_b, pad_t = 280, 110, 28, 20, 8
    bins = 10
    plot_w, plot_h = w - pad_l - 6, h - pad_b - pad_t

    def counts(vals: Iterable[float]) -> list[int]:
        c = [0] * bins
        for v in vals:
            c[min(bins - 1, max(0, int(float(v) * bins)))] += 1
        return c

    cur = counts(scores)
    base = counts(baseline) if baseline is not None else None
    top = max(cur + (base or []) + [1])
    bw = plot_w / bins
    parts = [f'<svg class="cj-hist" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{e(label)} score distribution">',
             f"<title>{e(label)}: distribution of {len(scores)} scores</title>",
             f'<line x1="{pad_l}" y1="{pad_t + plot_h}" x2="{pad_l + plot_w}" y2="{pad_t + plot_h}" stroke="#555"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + plot_h}" stroke="#555"/>',
             f'<text x="{pad_l - 4}" y="{pad_t + 8}" font-size="9" text-anchor="end">{top}</text>',
             f'<text x="{pad_l - 4}" y="{pad_t + plot_h}" font-size="9" text-anchor="end">0</text>']
    for i in range(bins):
        x = pad_l + i * bw
        if base is not None and base[i]:
            bh = plot_h * base[i] / top
            parts.append(f'<rect class="cj-bar-base" x="{x + 1:.1f}" y="{pad_t + plot_h - bh:.1f}" '
                         f'width="{bw - 2:.1f}" height="{bh:.1f}" fill="#c7c7c7"><title>baseline {i / 10:.1f}-'
                         f'{(i + 1) / 10:.1f}: {base[i]}</title></rect>')
        if cur[i]:
            bh = plot_h * cur[i] / top
            inset = 4 if base is not None else 1
            parts.append(f'<rect class="cj-bar" x="{x + inset:.1f}" y="{pad_t + plot_h - bh:.1f}" '
                         f'width="{bw - 2 * inset:.1f}" height="{bh:.1f}" fill="#3b6fd8"><title>{i / 10:.1f}-'
                         f'{(i + 1) / 10:.1f}: {cur[i]}</title></rect>')
    for v in (0.0, 0.5, 1.0):
        x = pad_l + v * plot_w
        parts.append(f'<text x="{x:.1f}" y="{h - 6}" font-size="9" text-anchor="middle">{v:g}</text>')
    if threshold is not None:
        x = pad_l + float(threshold) * plot_w
        parts.append(f'<line x1="{x:.1f}" y1="{pad_t}" x2="{x:.1f}" y2="{pad_t + plot_h}" stroke="#c0392b" '
                     f'stroke-dasharray="3,2"><title>threshold {threshold:.2f}</title></line>')
    if mean is not None:
        x = pad_l + float(mean) * plot_w
        parts.append(f'<line x1="{x:.1f}" y1="{pad_t}" x2="{x:.1f}" y2="{pad_t + plot_h}" stroke="#111" '
                     f'stroke-width="1.5"><title>mean {mean:.3f}</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _diff_bar(iv: Interval) -> str:
    """The paired difference and its interval on a [-1, 1] axis."""
    w, h, mid = 220, 26, 110
    if iv.estimate is None:
        return ""
    sx = lambda v: mid + max(-1.0, min(1.0, v)) * 100  # noqa: E731
    parts = [f'<svg class="cj-diff" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="paired difference">',
             '<line x1="10" y1="13" x2="210" y2="13" stroke="#bbb"/>',
             f'<line x1="{mid}" y1="3" x2="{mid}" y2="23" stroke="#555"/>']
    if iv.low is not None and iv.high is not None:
        parts.append(f'<line x1="{sx(iv.low):.1f}" y1="13" x2="{sx(iv.high):.1f}" y2="13" stroke="#3b6fd8" '
                     f'stroke-width="4"/>')
    colour = "#1e8e3e" if iv.estimate > 0 else "#c0392b" if iv.estimate < 0 else "#555"
    parts.append(f'<circle cx="{sx(iv.estimate):.1f}" cy="13" r="4" fill="{colour}"/></svg>')
    return "".join(parts)


# --------------------------------------------------------------------------------------------------- pieces
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d1d1f;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;font-size:13px}.meta code{background:#eee;padding:0 4px;border-radius:3px}
.runname{font-size:16px;margin:2px 0 6px}
table{border-collapse:collapse;background:#fff;margin:6px 0}th,td{border:1px solid #ddd;padding:5px 8px;
vertical-align:top;text-align:left}th{background:#f0f0f3;font-weight:600}td.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#1e7e34;font-weight:600}.fail{color:#b3261e;font-weight:600}.err{color:#8a4b00;font-weight:600}
.chip,.badge{display:inline-block;padding:1px 7px;margin:1px 3px 1px 0;border-radius:10px;font-size:12px;
border:1px solid #ccc;background:#fff}.chip.pass{border-color:#8fd19e;background:#e9f7ec}
.chip.fail{border-color:#f1a9a0;background:#fdecea}.chip.err,.badge.err{border-color:#f0c36d;background:#fff6e0}
.badge.agent{border-color:#9db7ea;background:#eef3fd}.badge.rerank{border-color:#c9b3e6;background:#f5effc}
details.case{background:#fff;border:1px solid #ddd;border-radius:6px;margin:8px 0;padding:6px 10px}
details.case>summary{cursor:pointer}details.case[open]>summary{margin-bottom:8px}
.field{margin:4px 0}.field b{display:inline-block;min-width:130px;margin-right:8px;color:#444}
.text{white-space:pre-wrap;word-break:break-word}.clip{max-height:7.5em;overflow:auto}
td.v-yes{background:#e9f7ec}td.v-no{background:#fdecea}td.v-part{background:#fff8e1}td.v-none{background:#f6f6f6}
td.m-pass{background:#e9f7ec;color:#1e7e34}td.m-fail{background:#fdecea;color:#b3261e}
td.m-err{background:#fff6e0;color:#8a4b00}td.m-na{background:#f6f6f6;color:#777}
.verdict{font-weight:600;white-space:nowrap}.verdict.yes{color:#1e7e34}.verdict.no{color:#b3261e}
.reason{color:#333;font-size:13px}.small{font-size:12px;color:#666}
li.unsupported{background:#fdecea}li.supported{background:#e9f7ec}ul.stmts li{padding:2px 4px;margin:2px 0}
.cj-different-goldens{border:1px solid #f0c36d;background:#fff6e0;color:#5c3a00;padding:6px 10px;border-radius:6px}
.up{color:#1e7e34}.down{color:#b3261e}.dropped{color:#b3261e;font-weight:600}.added{color:#6a3fb5}
.legend span{margin-right:12px}
tr.rk-dropped td{background:#fdecea}tr.rk-added td{background:#f5effc}
.cj-agent{border-left:3px solid #9db7ea;padding:2px 8px;margin:6px 0;background:#f7f9fe}
details.cj-ranking{margin:6px 0}details.cj-ranking>summary{cursor:pointer}
table.cj-baseline-nodes td.base{background:#f7f7f7}
#cj-toolbar{position:sticky;top:0;background:#fafafa;padding:6px 0;z-index:1;border-bottom:1px solid #ddd}
#cj-toolbar button[aria-pressed=true]{background:#3b6fd8;color:#fff;border-color:#3b6fd8}
#cj-toolbar button,th button{font:inherit;border:1px solid #bbb;border-radius:4px;background:#fff;padding:2px 8px;
cursor:pointer}th button{border:none;background:none;padding:0;font-weight:600;text-align:left}
th[aria-sort=ascending] button::after{content:" \u25b2"}th[aria-sort=descending] button::after{content:" \u25bc"}
[hidden]{display:none !important}
"""


def _metric_names(*results: EvaluationResult) -> list[str]:
    names: list[str] = []
    for r in results:
        for n in r.metric_names():
            if n not in names:
                names.append(n)
    return names


def _rows(result: EvaluationResult, name: str) -> list[MetricResult]:
    return [m for tr in result.test_results for m in tr.metrics_data if m.name == name]


def _label(view: RunView, fallback: str) -> str:
    """A run as a person knows it: its name, with its id beside when both exist."""
    rid = view.run_id or view.result.run_id
    if view.name and rid and view.name != rid:
        return f"{view.name} ({rid})"
    return view.name or rid or fallback


def _summary_table(cur: RunView, base: RunView | None) -> str:
    names = _metric_names(cur.result)
    if not names:
        return "<p>No metric results in this run.</p>"
    out = ['<table class="cj-summary"><thead><tr><th>Metric</th><th>Mean</th><th>95% CI</th>'
           "<th>Pass rate</th><th>Pass rate 95% CI</th><th>Scored</th><th>Errors</th><th>Threshold</th>"
           "<th>Score distribution</th></tr></thead><tbody>"]
    for name in names:
        rows = _rows(cur.result, name)
        scores = [m.score for m in rows if m.score is not None]
        iv, pr = cur.result.interval(name), cur.result.pass_rate_interval(name)
        thresholds = sorted({m.threshold for m in rows})
        thr = thresholds[0] if len(thresholds) == 1 else None
        passed = sum(m.success for m in rows)
        errors = sum(m.error is not None for m in rows)
        base_scores = None
        if base is not None:
            base_scores = [m.score for m in _rows(base.result, name) if m.score is not None]
        chart = _histogram(scores, thr, iv.estimate, base_scores, name)
        out.append(
            f"<tr data-metric='{e(name)}'><td>{e(name)}</td><td class='num'>{num(iv.estimate)}</td>"
            f"<td class='num'>{ci(iv)}</td>"
            f"<td class='num'>{pct(pr.estimate)} ({passed}/{len(rows)})</td><td class='num'>{_pct_ci(pr)}</td>"
            f"<td class='num'>{len(scores)}</td><td class='num cj-errors{' err' if errors else ''}'>{errors}</td>"
            f"<td class='num'>{', '.join(f'{t:.2f}' for t in thresholds)}</td><td>{chart}</td></tr>")
    out.append("</tbody></table>")
    legend = ('<p class="small legend"><span>blue bars: this run</span>'
              + ("<span>grey bars: baseline</span>" if base is not None else "")
              + "<span>black line: mean</span><span>red dashed line: threshold</span>"
              + "<span>errors: results that could not be scored (they count as not passing)</span></p>"
              + '<p class="small">Intervals are 95% over cases: the mean\'s is Student t (with judge repeats, each '
              "case's spread across repeats widens it; when every score is equal, the Wilson interval of that value), "
              "the pass rate's is Wilson. They say how far the figure could move on other cases like these, not "
              "how right the judge is: with gold labels on some cases, the bias-corrected means below answer "
              "that.</p>")
    return "".join(out) + legend + _corrected_section(cur.result, names) + _errors_table(cur.result)


def _pct_ci(iv: Interval) -> str:
    return "n/a" if iv.low is None or iv.high is None else f"[{pct(iv.low)}, {pct(iv.high)}]"


def _corrected_section(result: EvaluationResult, names: list[str]) -> str:
    """Per metric with gold labels on some cases: the prediction-powered (bias-corrected) mean with its interval, the
    judge's measured bias and the labelled cases' own mean."""
    rows, short_of = [], []
    for name in names:
        est = result.corrected(name)
        labelled = sum(m.gold_score is not None and m.score is not None for m in _rows(result, name))
        if est is None:
            if labelled:
                short_of.append(f"{name}: {labelled} labelled case(s)")
            continue
        rows.append(f"<tr><td>{e(name)}</td><td class='num'>{num(est.judged.estimate)} {ci(est.judged)}</td>"
                    f"<td class='num'><b>{num(est.corrected.estimate)}</b> {ci(est.corrected)}</td>"
                    f"<td class='num'>{signed(est.bias.estimate)} {ci(est.bias, True)}</td>"
                    f"<td class='num'>{num(est.labelled.estimate)} {ci(est.labelled)}</td>"
                    f"<td class='num'>{est.n_labelled} / {est.n_unlabelled}</td><td class='num'>{est.lam:.2f}</td></tr>")
    if not rows and not short_of:
        return ""
    out = ["<h2 id='cj-corrected'>Bias-corrected means</h2>",
           "<p class='small'>Cases that carry your gold labels correct the judge's mean for its bias "
           "(prediction-powered inference, tuned as in PPI++): the corrected mean's 95% interval is valid whatever "
           "the judge's bias, and narrower than the labelled cases alone give when the judge tracks the labels. "
           "Judge bias: the judge's mean minus the gold mean on the labelled cases. &lambda;: how much the judge's "
           "scores are trusted (0: not at all, 1: fully).</p>"]
    if rows:
        out.append("<table class='cj-corrected'><thead><tr><th>Metric</th><th>Judge's mean</th>"
                   "<th>Bias-corrected mean</th><th>Judge bias</th><th>Labelled cases alone</th>"
                   "<th>Labelled / unlabelled</th><th>&lambda;</th></tr></thead><tbody>" + "".join(rows)
                   + "</tbody></table>")
    if short_of:
        out.append("<p class='small'>No correction yet for " + e("; ".join(short_of)) + ": it needs at least two "
                   "scored cases with labels and one without (`contextjudge label` attaches labels).</p>")
    return "".join(out)


def _errors_table(result: EvaluationResult) -> str:
    """The run's errors grouped by metric and kind, with a first example of each, so a long run's errors are
    read at a glance (each case with an error is marked in the cases below and can be filtered)."""
    groups: dict[tuple[str, str], list[tuple[TestResult, MetricResult]]] = {}
    for tr in result.test_results:
        for m in tr.metrics_data:
            if m.error:
                groups.setdefault((m.name, m.error_type or "error"), []).append((tr, m))
    case_errors = [tr for tr in result.test_results if tr.error]
    if not groups and not case_errors:
        return ""
    out = ["<h3>Errors</h3>", '<table class="cj-error-summary"><thead><tr><th>Metric</th><th>Kind</th>'
           "<th>Cases</th><th>First case</th><th>Message</th></tr></thead><tbody>"]
    for (name, kind), items in groups.items():
        tr, m = items[0]
        out.append(f"<tr><td>{e(name)}</td><td>{e(kind)}</td><td class='num'>{len(items)}</td>"
                   f"<td><a href='#case-{tr.index}'>#{tr.index + 1}</a></td><td class='text'>{e(m.error)}</td></tr>")
    if case_errors:
        tr = case_errors[0]
        out.append(f"<tr><td>(the case)</td><td>error</td><td class='num'>{len(case_errors)}</td>"
                   f"<td><a href='#case-{tr.index}'>#{tr.index + 1}</a></td><td class='text'>{e(tr.error)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _pairs(cur: EvaluationResult, base: EvaluationResult) -> dict[str, tuple[TestResult, TestResult]]:
    seen_b: dict[str, int] = {}
    by_base = {pair_key(tr.test_case, seen_b): tr for tr in base.test_results}
    seen_c: dict[str, int] = {}
    out = {}
    for tr in cur.test_results:
        k = pair_key(tr.test_case, seen_c)
        if k in by_base:
            out[k] = (by_base[k], tr)
    return out


def _k_changed(pairs: dict[str, tuple[TestResult, TestResult]]) -> str | None:
    """"k changed: 3.0 -> 1.0 nodes per case" when the paired cases' mean node counts differ (baseline -> this run)."""
    if not pairs:
        return None
    b, c = ([len(getattr(tr.test_case, "retrieval_context", None) or []) for tr in side]
            for side in zip(*pairs.values(), strict=True))
    nb, nc = sum(b) / len(b), sum(c) / len(c)
    return None if abs(nb - nc) < 1e-9 else f"k changed: {nb:.1f} -> {nc:.1f} nodes per case"


def _score_of(tr: TestResult, name: str) -> float | None:
    for m in tr.metrics_data:
        if m.name == name:
            return m.score
    return None


@dataclass
class CaseChange:
    """One paired case whose score of a metric differs between the two runs."""

    key: str  # how the case was paired: "id:<test case id>" or "in:<normalised input>"
    text: str  # the case as a person knows it: its name, else its input
    index: int  # its position in the current run
    baseline: float
    current: float

    @property
    def difference(self) -> float:
        return self.current - self.baseline


@dataclass
class MetricChange:
    """One metric compared across two runs over their paired cases.

    ``difference``: the mean of (current - baseline) over the cases both runs scored, with its 95% paired-t interval
    (``contextjudge.stats.paired_difference``); ``reading``: "worse" or "better" only when that whole interval is
    below or above zero, "no shared cases" when no case has a score in both runs, "too few cases to tell" when
    fewer than ``FEW_PAIRS`` (10) pairs leave the difference unsettled (gate those on the drop itself:
    ``contextjudge compare --max-drop``), else "no clear change".
    ``top_cases``: the paired cases that changed most (largest |difference| first, unchanged cases left out)."""

    metric: str
    baseline_mean: float | None
    current_mean: float | None
    difference: StatsInterval
    reading: str  # "better", "worse", "no clear change", "too few cases to tell" or "no shared cases"
    top_cases: list[CaseChange] = field(default_factory=list)

    @property
    def significantly_worse(self) -> bool:
        return significantly_worse(self.difference)


FEW_PAIRS = 10
"""Below this many paired cases an unsettled difference reads "too few cases to tell", not "no clear change"."""


def compare_runs(current: EvaluationResult, baseline: EvaluationResult, *, top: int = 5) -> list[MetricChange]:
    """Per metric: both means, the paired difference (current - baseline) over the cases both runs scored, with its
    95% paired-t interval, and the ``top`` cases that changed most. Cases are paired by test case id, else input."""
    pairs = _pairs(current, baseline)
    out = []
    for name in _metric_names(current, baseline):
        paired = [(key, c, sb, sc) for key, (b, c) in pairs.items()
                  if (sb := _score_of(b, name)) is not None and (sc := _score_of(c, name)) is not None]
        iv = paired_t([(sb, sc) for _, _, sb, sc in paired])
        reading = ("no shared cases" if iv.n == 0 else "better" if significantly_better(iv) else
                   "worse" if significantly_worse(iv) else
                   "too few cases to tell" if iv.n < FEW_PAIRS and (iv.width is None or iv.width > 0) else
                   "no clear change")
        moved = sorted((p for p in paired if p[3] != p[2]), key=lambda p: (-abs(p[3] - p[2]), p[0]))
        cases = [CaseChange(key, c.name or case_input(c.test_case), c.index, sb, sc)
                 for key, c, sb, sc in moved[:top]]
        out.append(MetricChange(name, baseline.mean(name) if name in baseline.metric_names() else None,
                                current.mean(name) if name in current.metric_names() else None, iv, reading,
                                cases))
    return out


def _goldens_note(cur: RunView, base: RunView) -> str:
    """The golden sets the two runs ran, where recorded: a warning when they differ (the note ``compare
    --allow-different-goldens`` prints), else the one set both ran."""
    b, c = base.goldens, cur.goldens
    if different_goldens(b, c):
        assert b is not None and c is not None
        return (f"<p class='cj-different-goldens'><b>Different golden sets.</b> The baseline ran "
                f"<b>{e(b.get('name') or 'goldens')}</b> (content hash <code>{e(b.get('hash'))}</code>), this run ran "
                f"<b>{e(c.get('name') or 'goldens')}</b> (content hash <code>{e(c.get('hash'))}</code>): a "
                "difference may come from the changed questions and answers, not only from the app. Rerun the "
                "baseline on this run's goldens to compare the app alone.</p>")
    if b and c:
        return (f"<p class='meta cj-same-goldens'>Both runs ran the goldens <b>{e(b.get('name') or 'goldens')}</b> "
                f"(content hash <code>{e(b.get('hash'))}</code>).</p>")
    return ""


def _compare_section(cur: RunView, base: RunView) -> str:
    pairs = _pairs(cur.result, base.result)
    names = _metric_names(cur.result, base.result)
    by_metric = {c.metric: c for c in compare_runs(cur.result, base.result)}
    k_note = _k_changed(pairs)
    cur_label, base_label = _label(cur, "this run"), _label(base, "baseline")
    out = [f"<h2>Compared with {e(base_label)}</h2>",
           f"<p class='meta cj-compare-runs'>This run: <b>{e(cur_label)}</b> · baseline: <b>{e(base_label)}</b>. "
           f"{len(pairs)} case(s) appear in both runs (matched by test case id, else by input). "
           "The difference is this run minus the baseline, per paired case; the interval is the 95% paired-t "
           "interval of the mean difference. A changed case shows the baseline's ranked nodes beside this run's.</p>",
           _goldens_note(cur, base),
           '<table class="cj-compare"><thead><tr><th>Metric</th><th>Baseline mean</th><th>This run mean</th>'
           "<th>Paired difference</th><th>95% CI</th><th>Pairs</th><th></th><th>Reading</th></tr></thead><tbody>"]
    changes: list[tuple[float, str, str, float, float]] = []
    for name in names:
        for key, (b, c) in pairs.items():
            sb, sc = _score_of(b, name), _score_of(c, name)
            if sb is not None and sc is not None and sc != sb:
                changes.append((sc - sb, key, name, sb, sc))
        ch = by_metric[name]
        iv, mb, mc = ch.difference, ch.baseline_mean, ch.current_mean
        reading = {"better": "<span class='up'>better</span>", "worse": "<span class='down'>worse</span>"}.get(
            ch.reading, ch.reading)
        if k_note and ch.reading in ("better", "worse"):
            reading = f"{'higher' if ch.reading == 'better' else 'lower'} ({e(k_note)})"
        out.append(f"<tr><td>{e(name)}</td><td class='num'>{num(mb)}</td><td class='num'>{num(mc)}</td>"
                   f"<td class='num'>{signed(iv.estimate)}</td><td class='num'>{ci(iv, True)}</td>"
                   f"<td class='num'>{iv.n}</td><td>{_diff_bar(iv)}</td><td>{reading}</td></tr>")
    out.append("</tbody></table>")
    if k_note:
        out.append(f"<p class='meta cj-k-changed'>{e(k_note)}: the runs returned different numbers of nodes, so a "
                   "per-node score such as contextual relevancy rises when fewer nodes come back, whether or not "
                   "the answer is among them.</p>")
    changes.sort(key=lambda c: (-abs(c[0]), c[1], c[2]))
    out.append("<h3>Cases that changed most</h3>")
    if not changes:
        out.append("<p>No paired case changed its score.</p>")
        return "".join(out)
    inputs = {k: c for k, (_, c) in pairs.items()}
    out.append('<table class="cj-changes"><thead><tr><th>Case</th><th>Metric</th><th>Baseline</th><th>This run</th>'
               "<th>Change</th></tr></thead><tbody>")
    for diff, key, name, sb, sc in changes[:15]:
        tr = inputs[key]
        cls = "up" if diff > 0 else "down"
        out.append(f"<tr><td><a href='#case-{tr.index}'>#{tr.index + 1}</a> "
                   f"{e(short(tr.name or case_input(tr.test_case)))}</td><td>{e(name)}</td>"
                   f"<td class='num'>{num(sb)}</td><td class='num'>{num(sc)}</td>"
                   f"<td class='num {cls}'>{signed(diff)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _calibration_words(judge: dict[str, Any]) -> str:
    """A calibrated judge's words per family ("calibrated on N of your labels; kappa X [CI] cross-validated")."""
    cal = judge.get("calibration")
    if not isinstance(cal, dict) or not cal:
        return ""
    return " (<span class='cj-calibration'>" + "; ".join(f"{e(f)}: {e(w)}" for f, w in cal.items()) + "</span>)"


def _header(cur: RunView, base: RunView | None) -> str:
    r = cur.result
    u = r.usage
    judges = ", ".join(e(j.get("name")) + _calibration_words(j) for j in cur.judges if j.get("name")) or "n/a"
    lines = []
    if cur.name:
        lines.append(f"<p class='runname'>Run <b class='cj-run-name'>{e(cur.name)}</b>"
                     + (f" · baseline <b class='cj-baseline-name'>{e(base.name)}</b>" if base and base.name else "")
                     + "</p>")
    bits = [f"run <code>{e(cur.run_id or r.run_id or 'n/a')}</code>"]
    if cur.created_at:
        bits.append(e(when(cur.created_at)))
    bits.append(f"{len(r)} case(s)")
    with_errors = sum(1 for tr in r.test_results if tr.error or any(m.error for m in tr.metrics_data))
    if with_errors:
        bits.append(f"<span class='err'>{with_errors} case(s) with an error</span>")
    bits.append(f"judge {judges}")
    bits.append(f"{u.calls} judge call(s), {u.cache_hits} cache hit(s), {e(r.token_words())}")
    if cur.store:
        bits.append(f"store {e(cur.store)}")
    if base is not None:
        bits.append(f"baseline {e(base.name) + ' ' if base.name else ''}<code>{e(base.run_id or 'n/a')}</code>")
    return "".join(lines) + "<p class='meta'>" + " · ".join(bits) + "</p>"


def _toolbar(metrics: list[str], compared: bool) -> str:
    filters = [("all", "All"), ("failing", "Failing"), ("errors", "Errors"), ("passing", "Passing")]
    if compared:
        filters.append(("changed", "Changed vs baseline"))
    buttons = "".join(f"<button type='button' data-filter='{f}' aria-pressed='{str(f == 'all').lower()}'>{w}</button> "
                      for f, w in filters)
    metric_opts = "".join(f"<option value='{k}'>{e(m)}</option>" for k, m in enumerate(metrics))
    sort_opts = ["<option value=''>run order</option>"]
    for k, m in enumerate(metrics):
        sort_opts.append(f"<option value='m{k}:1'>{e(m)}: worst first</option>")
        sort_opts.append(f"<option value='m{k}:-1'>{e(m)}: best first</option>")
        if compared:
            sort_opts.append(f"<option value='d{k}:1'>{e(m)}: largest drop vs baseline first</option>")
    return (f"<div id='cj-toolbar' hidden>Show {buttons}"
            f"<label>on <select id='cj-filter-metric'><option value=''>any metric</option>{metric_opts}</select>"
            f"</label> · <label>Sort <select id='cj-sort'>{''.join(sort_opts)}</select></label> · "
            "<label>Search <input id='cj-search' type='search' placeholder='input, output, expected, nodes, name'>"
            "</label> <span id='cj-count' class='small'></span></div>"
            "<noscript><p class='small'>Scripts are off: every case is listed in run order (filtering, sorting and "
            "search need scripts).</p></noscript>")


def _cases_section(cur: RunView, base: RunView | None) -> str:
    result = cur.result
    metrics = _metric_names(result)
    paired = None
    if base is not None:
        by_index = {c.index: b for b, c in _pairs(result, base.result).values()}
        paired = by_index
    ctx = CaseContext(metrics, baseline=paired, baseline_label=_label(base, "baseline") if base else "baseline")
    failing = sum(not tr.success for tr in result.test_results)
    errors = sum(1 for tr in result.test_results
                 if tr.error or any(m.error for m in tr.metrics_data))
    shown, note = shown_cases(result, cur.max_cases, baseline=paired)
    if cur.fill is not None:
        cur.fill(shown)
    if base is not None and base.fill is not None and paired is not None:
        base.fill([paired[tr.index] for tr in shown if tr.index in paired])
    head = "".join(f"<th data-col='m{k}'><button type='button' data-sort='m{k}' title='sort by {e(m)}: worst first, "
                   f"click again for best first'>{e(m)}</button></th>" for k, m in enumerate(metrics))
    out = [f"<h2>Cases</h2><p class='meta'>{len(result)} case(s), {failing} with a failing metric, {errors} with an "
           "error. Each metric's cell is coloured by its own result (green: pass, red: fail, amber: error, grey: "
           "the metric did not apply). Sorting by a metric lists scored cases first (worst or best first), then "
           "cases where it errored, then cases it did not apply to. In a case, each per-node metric's verdict is "
           "coloured in its own column (green: useful, red: not useful); open a case for the judge's reasons.</p>",
           f"<p class='meta' id='cj-bounded'>{e(note)}</p>" if note else "",
           _toolbar(metrics, base is not None),
           f'<table class="cj-cases" id="cj-cases"><thead><tr><th data-col=""><button type="button" data-sort="" '
           f'title="run order">#</button></th><th>Case</th>{head}</tr></thead><tbody>']
    out.extend(case_row(tr, ctx) for tr in shown)
    out.append("</tbody></table><div id='cj-case-list'>")
    out.extend(case_card(tr, ctx) for tr in shown)
    out.append("</div>")
    return "\n".join(out)


def render_html(current: RunView, baseline: RunView | None = None, *, title: str | None = None) -> str:
    """The whole report as one HTML string."""
    t = title or "contextjudge report"
    body = [f"<h1>{e(t)}</h1>", _header(current, baseline), "<h2>Metrics</h2>",
            _summary_table(current, baseline)]
    if baseline is not None:
        body.append(_compare_section(current, baseline))
    body.append(_cases_section(current, baseline))
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(t)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + "\n<p class='small'>Generated by contextjudge.</p>" + script_tag()
            + "</body></html>\n")

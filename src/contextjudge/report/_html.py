"""The HTML report: one self-contained file, no scripts, nothing fetched from the network.

Every piece of user text (inputs, outputs, node texts, judge reasons, metadata) passes through ``_e`` before it
reaches the page, and a Content-Security-Policy forbids scripts and remote loads as a second line of defence.
Charts are inline SVG drawn here.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
from dataclasses import dataclass, field
from typing import Any, Iterable

from .._result import EvaluationResult, MetricResult, TestResult
from .._text import shorten
from ..cases.images import has_images, split_images
from ..cases.testcase import ConversationalTestCase
from ._stats import Interval, bootstrap_mean, pair_key, paired_difference

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


def _e(value: Any) -> str:
    text = "" if value is None else str(value)
    if has_images(text):  # show "[image 1: alt]" rather than the (possibly huge) token that carries the image
        text = split_images(text)[0]
    return html.escape(text, quote=True)


def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _ci(iv: Interval, signed: bool = False) -> str:
    if iv.low is None or iv.high is None:
        return "n/a"
    f = _signed if signed else _num
    return f"[{f(iv.low)}, {f(iv.high)}]"


def _when(ts: float | None) -> str:
    if not ts:
        return ""
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{_e(label)} score distribution">',
             f"<title>{_e(label)}: distribution of {len(scores)} scores</title>",
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
table{border-collapse:collapse;background:#fff;margin:6px 0}th,td{border:1px solid #ddd;padding:5px 8px;
vertical-align:top;text-align:left}th{background:#f0f0f3;font-weight:600}td.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#1e7e34;font-weight:600}.fail{color:#b3261e;font-weight:600}.err{color:#8a4b00;font-weight:600}
.chip{display:inline-block;padding:1px 7px;margin:1px 3px 1px 0;border-radius:10px;font-size:12px;
border:1px solid #ccc;background:#fff}.chip.pass{border-color:#8fd19e;background:#e9f7ec}
.chip.fail{border-color:#f1a9a0;background:#fdecea}.chip.err{border-color:#f0c36d;background:#fff6e0}
details.case{background:#fff;border:1px solid #ddd;border-radius:6px;margin:8px 0;padding:6px 10px}
details.case>summary{cursor:pointer}details.case[open]>summary{margin-bottom:8px}
.field{margin:4px 0}.field b{display:inline-block;min-width:130px;margin-right:8px;color:#444}
.text{white-space:pre-wrap;word-break:break-word}
tr.v-yes td{background:#e9f7ec}tr.v-no td{background:#fdecea}tr.v-none td{background:#f6f6f6}
.verdict{font-weight:600;white-space:nowrap}.verdict.yes{color:#1e7e34}.verdict.no{color:#b3261e}
.reason{color:#333;font-size:13px}.small{font-size:12px;color:#666}
li.unsupported{background:#fdecea}li.supported{background:#e9f7ec}ul.stmts li{padding:2px 4px;margin:2px 0}
.up{color:#1e7e34}.down{color:#b3261e}.legend span{margin-right:12px}
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


def _status(m: MetricResult) -> tuple[str, str]:
    if m.error:
        return "err", "error"
    return ("pass", "pass") if m.success else ("fail", "fail")


def _summary_table(cur: RunView, base: RunView | None) -> str:
    names = _metric_names(cur.result)
    if not names:
        return "<p>No metric results in this run.</p>"
    out = ['<table class="cj-summary"><thead><tr><th>Metric</th><th>Mean</th><th>95% CI (bootstrap)</th>'
           "<th>Pass rate</th><th>Scored</th><th>Errors</th><th>Threshold</th><th>Score distribution</th>"
           "</tr></thead><tbody>"]
    for name in names:
        rows = _rows(cur.result, name)
        scores = [m.score for m in rows if m.score is not None]
        iv = bootstrap_mean(scores)
        thresholds = sorted({m.threshold for m in rows})
        thr = thresholds[0] if len(thresholds) == 1 else None
        passed = sum(m.success for m in rows)
        base_scores = None
        if base is not None:
            base_scores = [m.score for m in _rows(base.result, name) if m.score is not None]
        chart = _histogram(scores, thr, iv.estimate, base_scores, name)
        out.append(
            f"<tr><td>{_e(name)}</td><td class='num'>{_num(iv.estimate)}</td><td class='num'>{_ci(iv)}</td>"
            f"<td class='num'>{_pct(passed / len(rows) if rows else None)} ({passed}/{len(rows)})</td>"
            f"<td class='num'>{len(scores)}</td><td class='num'>{sum(m.error is not None for m in rows)}</td>"
            f"<td class='num'>{', '.join(f'{t:.2f}' for t in thresholds)}</td><td>{chart}</td></tr>")
    out.append("</tbody></table>")
    legend = ('<p class="small legend"><span>blue bars: this run</span>'
              + ("<span>grey bars: baseline</span>" if base is not None else "")
              + "<span>black line: mean</span><span>red dashed line: threshold</span></p>")
    return "".join(out) + legend


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


def _score_of(tr: TestResult, name: str) -> float | None:
    for m in tr.metrics_data:
        if m.name == name:
            return m.score
    return None


@dataclass
class MetricChange:
    """One metric compared across two runs over their paired cases."""

    metric: str
    baseline_mean: float | None
    current_mean: float | None
    difference: Interval
    reading: str  # "better", "worse" or "no clear change"


def compare_runs(current: EvaluationResult, baseline: EvaluationResult) -> list[MetricChange]:
    """Per metric: both means and the paired difference (current - baseline) with its 95% bootstrap interval."""
    pairs = _pairs(current, baseline)
    out = []
    for name in _metric_names(current, baseline):
        pv = [(sb, sc) for b, c in pairs.values()
              if (sb := _score_of(b, name)) is not None and (sc := _score_of(c, name)) is not None]
        iv = paired_difference(pv)
        reading = ("better" if iv.low is not None and iv.low > 0 else
                   "worse" if iv.high is not None and iv.high < 0 else "no clear change")
        out.append(MetricChange(name, baseline.mean(name) if name in baseline.metric_names() else None,
                                current.mean(name) if name in current.metric_names() else None, iv, reading))
    return out


def _compare_section(cur: RunView, base: RunView) -> str:
    pairs = _pairs(cur.result, base.result)
    names = _metric_names(cur.result, base.result)
    by_metric = {c.metric: c for c in compare_runs(cur.result, base.result)}
    out = [f"<h2>Compared with {_e(base.run_id or 'baseline')}</h2>",
           f"<p class='meta'>{len(pairs)} case(s) appear in both runs (matched by test case id, else by input). "
           "The difference is this run minus the baseline, per paired case; the interval is a 95% bootstrap "
           "interval of the mean difference.</p>",
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
        out.append(f"<tr><td>{_e(name)}</td><td class='num'>{_num(mb)}</td><td class='num'>{_num(mc)}</td>"
                   f"<td class='num'>{_signed(iv.estimate)}</td><td class='num'>{_ci(iv, True)}</td>"
                   f"<td class='num'>{iv.n}</td><td>{_diff_bar(iv)}</td><td>{reading}</td></tr>")
    out.append("</tbody></table>")
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
        out.append(f"<tr><td><a href='#case-{tr.index}'>#{tr.index + 1}</a> {_e(_short(_case_input(tr.test_case)))}"
                   f"</td><td>{_e(name)}</td><td class='num'>{_num(sb)}</td><td class='num'>{_num(sc)}</td>"
                   f"<td class='num {cls}'>{_signed(diff)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _short(text: str | None, n: int = 110) -> str:
    t = text or ""
    if has_images(t):  # cut the readable form, never a token that carries an image
        t = split_images(t)[0]
    return shorten(t, n)


def _case_input(tc: Any) -> str:
    if isinstance(tc, ConversationalTestCase):
        users = [t.content for t in tc.turns if t.role == "user"]
        return users[0] if users else "(conversation)"
    return getattr(tc, "input", "") or ""


@functools.cache
def _builtin_judges_nodes() -> dict[str, bool]:
    from ..metrics import BY_KEY  # noqa: PLC0415 - loaded on first use, as the package loads its names

    return {cls.name: cls.judges_nodes for cls in BY_KEY.values()}


def _judges_nodes(m: MetricResult) -> bool:
    """Whether ``m``'s verdicts are one per retrieved node, as its metric recorded when it scored (for results
    stored before metrics recorded it, the built-in metric of that name says)."""
    from ..metrics._base import PER_NODE  # noqa: PLC0415

    flag = (m.details or {}).get(PER_NODE)
    if flag is not None:
        return bool(flag)
    return _builtin_judges_nodes().get(m.name, False)


def _node_table(nodes: list[Any], by_rank: dict[str, dict[int, dict[str, Any]]],
                relevancy: dict[int, list[dict[str, Any]]], node_metrics: list[str]) -> str:
    if not nodes:
        return "<p class='small'>No retrieval context.</p>"
    colour_metric = node_metrics[0] if node_metrics else None  # the first per-node metric, in the run's order
    head = "".join(f"<th>{_e(m)}</th>" for m in node_metrics)
    out = [f'<table class="cj-nodes"><thead><tr><th>Rank</th><th>Node</th>{head}'
           + ("<th>Relevant sentences</th>" if relevancy else "") + "</tr></thead><tbody>"]
    for rank, node in enumerate(nodes, start=1):
        v = by_rank.get(colour_metric, {}).get(rank) if colour_metric else None
        if v is None and relevancy.get(rank):
            rel = relevancy[rank]
            v = {"verdict": "yes" if any(x.get("verdict") == "yes" for x in rel) else "no"}
        cls = f"v-{v['verdict']}" if v and v.get("verdict") in ("yes", "no") else "v-none"
        meta = []
        if getattr(node, "id", None):
            meta.append(f"id {_e(node.id)}")
        if getattr(node, "score", None) is not None:
            meta.append(f"retriever score {node.score:.3f}")
        if getattr(node, "metadata", None):
            shown = ", ".join(f"{k}={v2}" for k, v2 in list(node.metadata.items())[:4])
            meta.append(_e(_short(shown, 120)))
        cells = []
        for m in node_metrics:
            mv = by_rank.get(m, {}).get(rank)
            if mv is None:
                cells.append("<td></td>")
            else:
                verdict = str(mv.get("verdict", ""))
                cells.append(f"<td><span class='verdict {_e(verdict)}'>{_e(verdict)}</span> "
                             f"<span class='reason'>{_e(mv.get('reason', ''))}</span></td>")
        rel_cell = ""
        if relevancy:
            rel = relevancy.get(rank, [])
            n_yes = sum(1 for x in rel if x.get("verdict") == "yes")
            irrelevant = [x for x in rel if x.get("verdict") != "yes" and x.get("statement")]
            detail = "".join(f"<li>{_e(x.get('statement'))} <span class='reason'>({_e(x.get('reason', ''))})"
                             f"</span></li>" for x in irrelevant[:5])
            rel_cell = (f"<td>{n_yes}/{len(rel)}" + (f"<ul class='small'>{detail}</ul>" if detail else "") + "</td>")
        out.append(f"<tr class='{cls}'><td class='num'>{rank}</td><td><div class='text'>{_e(node.text)}</div>"
                   f"<div class='small'>{' · '.join(meta)}</div></td>{''.join(cells)}{rel_cell}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _statements(m: MetricResult) -> str:
    items = [v for v in m.verdicts if isinstance(v, dict) and "statement" in v and "supporting_ranks" in v]
    if not items:
        return ""
    unsupported = (m.details or {}).get("unsupported_statements")
    lis = []
    for v in items:
        ok = v.get("verdict") == "yes"
        ranks = ", ".join(str(r) for r in v.get("supporting_ranks") or [])
        where = f" <span class='small'>supported by rank {ranks}</span>" if ok and ranks else ""
        turn = f"<span class='small'>turn {v['turn']}: </span>" if "turn" in v else ""
        lis.append(f"<li class='{'supported' if ok else 'unsupported'}'>{turn}<span class='verdict "
                   f"{'yes' if ok else 'no'}'>{'supported' if ok else 'unsupported'}</span> "
                   f"{_e(v.get('statement'))}{where} <span class='reason'>{_e(v.get('reason', ''))}</span></li>")
    extra = ""
    if unsupported:
        extra = ("<div class='field'><b>Unsupported statements</b><ul class='cj-unsupported'>"
                 + "".join(f"<li>{_e(s)}</li>" for s in unsupported) + "</ul></div>")
    return f"<div class='field'><b>{_e(m.name)}: statements</b><ul class='stmts'>{''.join(lis)}</ul></div>{extra}"


def _retrieval_block(nodes: list[Any], metrics: list[MetricResult], turn: int | None) -> str:
    by_rank: dict[str, dict[int, dict[str, Any]]] = {}
    relevancy: dict[int, list[dict[str, Any]]] = {}
    node_metrics: list[str] = []
    for m in metrics:
        per_node = _judges_nodes(m)
        for v in m.verdicts:
            if not isinstance(v, dict) or not isinstance(v.get("rank"), int):
                continue
            if turn is not None and v.get("turn") != turn:
                continue
            if "statement" in v:  # relevancy: one verdict per sentence of a node
                relevancy.setdefault(v["rank"], []).append(v)
            elif per_node:
                by_rank.setdefault(m.name, {})[v["rank"]] = v
                if m.name not in node_metrics:
                    node_metrics.append(m.name)
    return _node_table(nodes, by_rank, relevancy, node_metrics)


def _case(tr: TestResult) -> str:
    tc = tr.test_case
    chips = []
    for m in tr.metrics_data:
        cls, _ = _status(m)
        chips.append(f"<span class='chip {cls}' title='{_e(m.reason or m.error or '')}'>{_e(m.name)} "
                     f"{_num(m.score, 2)}</span>")
    failed = any(not m.success for m in tr.metrics_data) or tr.error
    title = _e(_short(tr.name or _case_input(tc)))
    parts = [f"<details class='case' id='case-{tr.index}'{' open' if failed and tr.index < 3 else ''}>"
             f"<summary><b>#{tr.index + 1}</b> {title} {''.join(chips)}</summary>"]
    if isinstance(tc, ConversationalTestCase):
        for i, turn in enumerate(tc.turns):
            parts.append(f"<div class='field'><b>{_e(turn.role)} (turn {i})</b><span class='text'>"
                         f"{_e(turn.content)}</span></div>")
            if turn.retrieval_context:
                parts.append(_retrieval_block(turn.retrieval_context, tr.metrics_data, i))
        if tc.expected_outcome:
            parts.append(f"<div class='field'><b>Expected outcome</b><span class='text'>{_e(tc.expected_outcome)}"
                         "</span></div>")
    else:
        for label, val in (("Input", tc.input), ("Actual output", tc.actual_output),
                           ("Expected output", tc.expected_output)):
            if val is not None:
                parts.append(f"<div class='field'><b>{label}</b><span class='text'>{_e(val)}</span></div>")
        parts.append(_retrieval_block(tc.retrieval_context or [], tr.metrics_data, None))
    if tr.error:
        parts.append(f"<div class='field err'>{_e(tr.error)}</div>")
    for m in tr.metrics_data:
        cls, word = _status(m)
        parts.append(f"<div class='field'><b>{_e(m.name)}</b><span class='{cls}'>{word}</span> "
                     f"score {_num(m.score)} / threshold {_num(m.threshold, 2)}"
                     + (f" · judge {_e(m.evaluation_model)}" if m.evaluation_model else "")
                     + (f"<div class='reason'>{_e(m.reason)}</div>" if m.reason else "")
                     + (f"<div class='reason err'>{_e(m.error)}</div>" if m.error else "") + "</div>")
        parts.append(_statements(m))
    parts.append("</details>")
    return "".join(parts)


def _header(cur: RunView, base: RunView | None) -> str:
    r = cur.result
    u = r.usage
    judges = ", ".join(_e(j.get("name")) for j in cur.judges if j.get("name")) or "n/a"
    bits = [f"run <code>{_e(cur.run_id or r.run_id or 'n/a')}</code>"]
    if cur.name:
        bits.append(f"name {_e(cur.name)}")
    if cur.created_at:
        bits.append(_e(_when(cur.created_at)))
    bits.append(f"{len(r)} case(s)")
    bits.append(f"judge {judges}")
    bits.append(f"{u.calls} judge call(s), {u.cache_hits} cache hit(s), {u.input_tokens + u.output_tokens} tokens")
    if u.cost is not None:
        bits.append(f"cost {u.cost:.4f}")
    if cur.store:
        bits.append(f"store {_e(cur.store)}")
    if base is not None:
        bits.append(f"baseline <code>{_e(base.run_id or 'n/a')}</code>")
    return "<p class='meta'>" + " · ".join(bits) + "</p>"


def render_html(current: RunView, baseline: RunView | None = None, *, title: str | None = None) -> str:
    """The whole report as one HTML string."""
    t = title or "contextjudge report"
    failing = sum(not tr.success for tr in current.result.test_results)
    body = [f"<h1>{_e(t)}</h1>", _header(current, baseline), "<h2>Metrics</h2>",
            _summary_table(current, baseline)]
    if baseline is not None:
        body.append(_compare_section(current, baseline))
    body.append(f"<h2>Cases</h2><p class='meta'>{len(current.result)} case(s), {failing} with a failing metric. "
                "Nodes are coloured by the judge's verdict (green: useful, red: not useful); open a case for the "
                "judge's reasons.</p>")
    body.extend(_case(tr) for tr in current.result.test_results)
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{_e(t)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + "\n<p class='small'>Generated by contextjudge.</p></body></html>\n")

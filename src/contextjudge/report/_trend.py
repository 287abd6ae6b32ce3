"""The trend page (``contextjudge trend --html``): one self-contained file, one chart per metric.

Each chart is inline SVG: the windows along x, the score (0 to 1) up y; the 95% interval of each window's mean as a
shaded band, the means as a line with a dot per window, a window with too few judged cases as a hollow grey mark at
the bottom (no mean is drawn for it: it would be noise), and a change of judge as a dashed vertical line with the
judges before and after. Under each chart, a table with the same figures, so every number can be read and copied.
With a drop check the latest window is marked and the drop's figures and worst cases are listed. Every piece of
text passes through ``_format.e``; the page carries the report's Content-Security-Policy and no script at all.
"""

from __future__ import annotations

from typing import Any

from ._format import e, num
from ._script import CSP

__all__ = ["render_trend"]

_W, _H = 760, 240
_L, _R, _T, _B = 48, 16, 16, 44
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
padding:0 16px;color:#1f2328}h2{margin-top:28px}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:tabular-nums}
.small{color:#57606a;font-size:12px}.drop{color:#b42318;font-weight:600}.judge{color:#8250df}
svg text{font:11px system-ui,sans-serif;fill:#57606a}.few{color:#8c959f}
.warn{border:1px solid #f0c36d;background:#fff6e0;color:#5c3a00;padding:6px 10px;border-radius:6px}
code{background:#eee;padding:0 4px;border-radius:3px}
"""


def _x(i: int, n: int) -> float:
    span = _W - _L - _R
    return _L + (span / 2 if n <= 1 else span * i / (n - 1))


def _y(v: float) -> float:
    return _T + (1.0 - max(0.0, min(1.0, v))) * (_H - _T - _B)


def _chart(metric: str, windows: list[dict[str, Any]], changes: list[dict[str, Any]], drop: dict[str, Any] | None
           ) -> str:
    n = len(windows)
    parts = [f"<svg class='cj-trend-chart' data-metric='{e(metric)}' viewBox='0 0 {_W} {_H}' width='{_W}' "
             f"height='{_H}' role='img' aria-label='{e(metric)} by window'>"]
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):  # the grid and the y axis
        parts.append(f"<line x1='{_L}' x2='{_W - _R}' y1='{_y(v):.1f}' y2='{_y(v):.1f}' stroke='#eaeef2'/>"
                     f"<text x='{_L - 6}' y='{_y(v) + 4:.1f}' text-anchor='end'>{v:g}</text>")
    segments: list[list[tuple[float, float, float, float]]] = [[]]
    for i, w in enumerate(windows):
        mw = (w.get("metrics") or {}).get(metric)
        mean = (mw or {}).get("mean") if mw and mw.get("enough_cases") else None
        if mean and mean.get("estimate") is not None:
            lo = mean["low"] if mean.get("low") is not None else mean["estimate"]
            hi = mean["high"] if mean.get("high") is not None else mean["estimate"]
            segments[-1].append((_x(i, n), mean["estimate"], lo, hi))
        elif segments[-1]:
            segments.append([])  # a window without a mean breaks the line and the band
    for seg in segments:
        if not seg:
            continue
        if len(seg) == 1:
            x, m, lo, hi = seg[0]
            parts.append(f"<rect class='cj-band' x='{x - 6:.1f}' y='{_y(hi):.1f}' width='12' "
                         f"height='{max(1.0, _y(lo) - _y(hi)):.1f}' fill='#0969da' fill-opacity='0.18'/>")
        else:
            top = " ".join(f"{x:.1f},{_y(hi):.1f}" for x, _, _, hi in seg)
            bottom = " ".join(f"{x:.1f},{_y(lo):.1f}" for x, _, lo, _ in reversed(seg))
            parts.append(f"<polygon class='cj-band' points='{top} {bottom}' fill='#0969da' fill-opacity='0.18'/>")
            line = " ".join(f"{x:.1f},{_y(m):.1f}" for x, m, _, _ in seg)
            parts.append(f"<polyline class='cj-mean' points='{line}' fill='none' stroke='#0969da' "
                         "stroke-width='2'/>")
    for i, w in enumerate(windows):
        mw = (w.get("metrics") or {}).get(metric)
        x = _x(i, n)
        if mw and mw.get("enough_cases") and (mw.get("mean") or {}).get("estimate") is not None:
            m = mw["mean"]
            parts.append(f"<circle class='cj-point' cx='{x:.1f}' cy='{_y(m['estimate']):.1f}' r='3.5' "
                         f"fill='#0969da'><title>{e(w['label'])}: {num(m['estimate'])} [{num(m.get('low'))}, "
                         f"{num(m.get('high'))}], {int(mw['judged'])} cases</title></circle>")
        elif mw is not None:
            parts.append(f"<circle class='cj-few' cx='{x:.1f}' cy='{_y(0.0) - 6:.1f}' r='4' fill='none' "
                         f"stroke='#8c959f'><title>{e(w['label'])}: {int(mw['judged'])} judged case(s), too few "
                         "for a mean</title></circle>")
        if n <= 14 or i % max(1, n // 10) == 0 or i == n - 1:
            parts.append(f"<text x='{x:.1f}' y='{_H - _B + 16}' text-anchor='middle'>{e(_short_label(w['label']))}"
                         "</text>")
    labels = [w["label"] for w in windows]
    for ch in changes:
        if ch.get("metric") != metric or ch.get("window") not in labels:
            continue
        i = labels.index(ch["window"])
        x = (_x(i, n) + _x(i - 1, n)) / 2 if i > 0 else _x(i, n)
        what = f"judge: {', '.join(ch.get('before') or [])} \u2192 {', '.join(ch.get('after') or [])}"
        parts.append(f"<g class='cj-judge-change'><line x1='{x:.1f}' x2='{x:.1f}' y1='{_T}' y2='{_H - _B}' "
                     f"stroke='#8250df' stroke-dasharray='4 3'/><text x='{x + 4:.1f}' y='{_T + 10}' "
                     f"fill='#8250df'>{e(what)}</text></g>")
    if drop is not None and drop.get("status") == "drop" and n:
        x = _x(n - 1, n)
        parts.append(f"<g class='cj-drop-mark'><rect x='{x - 10:.1f}' y='{_T}' width='20' height='{_H - _T - _B}' "
                     "fill='#b42318' fill-opacity='0.10'/><text x='{0:.1f}' y='{1}' text-anchor='end' "
                     "fill='#b42318'>drop</text></g>".format(x - 12, _T + 10))
    parts.append("</svg>")
    return "".join(parts)


def _short_label(label: str) -> str:
    return label[5:] if len(label) == 10 and label[4] == "-" else label.replace("week of ", "")


def _table(metric: str, windows: list[dict[str, Any]]) -> str:
    rows = []
    for w in windows:
        mw = (w.get("metrics") or {}).get(metric)
        if mw is None:
            continue
        judges = ", ".join(f"{k} ({v})" for k, v in (mw.get("judges") or {}).items()) or "-"
        if mw.get("enough_cases"):
            m, p = mw["mean"], mw["pass_rate"]
            mean = f"{num(m['estimate'])} [{num(m.get('low'))}, {num(m.get('high'))}]"
            rate = f"{num(p['estimate'])} [{num(p.get('low'))}, {num(p.get('high'))}]"
            cls = ""
        else:
            mean, rate, cls = "too few cases", "-", " class='few'"
        rows.append(f"<tr{cls}><td>{e(w['label'])}</td><td class='num'>{int(mw['judged'])}</td>"
                    f"<td class='num'>{e(mean)}</td><td class='num'>{e(rate)}</td>"
                    f"<td class='num'>{int(mw.get('errors') or 0)}</td><td>{e(judges)}</td></tr>")
    return ("<table class='cj-trend-table'><thead><tr><th>Window</th><th>Judged</th><th>Mean [95% CI]</th>"
            "<th>Pass rate [95% CI]</th><th>Errors</th><th>Judge</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table>")


def _drop_section(drop: dict[str, Any]) -> str:
    iv = drop.get("difference") or {}
    status = drop.get("status")
    if status == "drop":
        head = (f"<p class='drop cj-drop'>Significant drop: {num(drop.get('baseline_mean'))} \u2192 "
                f"{num(drop.get('latest_mean'))}, difference {num(iv.get('estimate'))} [{num(iv.get('low'))}, "
                f"{num(iv.get('high'))}] ({e(drop.get('method'))}, {100 * float(drop.get('level') or 0):.1f}% "
                "interval).</p>")
        worst = "".join(f"<tr><td>{e(w.get('input'))}</td><td class='num'>{num(w.get('score'))}</td>"
                        f"<td>{e(w.get('retriever') or '-')}</td></tr>" for w in drop.get("worst_cases") or [])
        if worst:
            head += ("<table class='cj-worst'><thead><tr><th>Worst case of the latest window</th><th>Score</th>"
                     f"<th>Retriever</th></tr></thead><tbody>{worst}</tbody></table>")
        return head
    if status == "judge changed":
        return (f"<p class='judge cj-judge-drift'>The judge changed ({e(', '.join(drop.get('judges_before') or []))} "
                f"\u2192 {e(', '.join(drop.get('judges_after') or []))}): not tested, since a difference would "
                "measure the judge, not the retriever.</p>")
    if status == "no drop":
        return (f"<p class='cj-no-drop'>No significant drop: difference {num(iv.get('estimate'))} "
                f"[{num(iv.get('low'))}, {num(iv.get('high'))}] ({e(drop.get('method'))}).</p>")
    return "<p class='small'>Not tested: too few judged cases in the latest window or its baseline.</p>"


def render_trend(trend: dict[str, Any], *, title: str = "contextjudge trend", drops: list[dict[str, Any]] | None = None,
                 drop_info: dict[str, Any] | None = None, store_label: str = "") -> str:
    """The page for ``Trend.to_dict()`` (and, with a drop check, its drops)."""
    windows = trend.get("windows") or []
    changes = trend.get("judge_changes") or []
    by_metric = {d["metric"]: d for d in drops or []}
    filters = ", ".join(f"{k}={v}" for k, v in (trend.get("filters") or {}).items())
    body = [f"<h1>{e(title)}</h1>",
            f"<p class='small'>{e(store_label)} · by {e(trend.get('by'))} (UTC, by the time the case was "
            f"{'captured' if trend.get('at') == 'captured' else 'judged'}) · {len(windows)} window(s)"
            + (f" · filters: {e(filters)}" if filters else "")
            + f" · a window with fewer than {int(trend.get('min_cases') or 0)} judged cases of a metric gives no "
            "mean. Bands are the 95% interval of each window's mean.</p>"]
    if drop_info:
        body.append(f"<p class='small cj-drop-info'>Drop check: the latest window ({e(drop_info['latest']['label'])})"
                    f" against {e(drop_info['baseline']['words'])}; {int(drop_info['metrics_tested'])} metric(s) "
                    f"tested, each at {100 * float(drop_info['adjusted_level']):.1f}% (Bonferroni), so the chance "
                    "of any false alarm stays at 5%.</p>")
    unplaced = int(trend.get("unplaced") or 0)
    if unplaced:
        # what `contextjudge trend` prints as its "left out:" line (``Trend.unplaced``)
        body.append(f"<p class='warn cj-unplaced'>Left out: {unplaced} result(s) without a capture time, written "
                    "by an older contextjudge after the store was upgraded; they are in no window below. Opening the "
                    "store for writing with this version (a worker, <code>contextjudge score</code>) fills them "
                    "in.</p>")
    for ch in trend.get("goldens_changes") or []:
        a, b = ch.get("goldens_before") or {}, ch.get("goldens_after") or {}
        body.append(f"<p class='warn cj-goldens-change'>The goldens changed between run {e(ch.get('before'))} and "
                    f"run {e(ch.get('after'))}: {e(a.get('name') or 'goldens')} (content hash "
                    f"<code>{e(a.get('hash'))}</code>) → {e(b.get('name') or 'goldens')} (content hash "
                    f"<code>{e(b.get('hash'))}</code>); windows on either side judged different questions.</p>")
    if not windows:
        body.append("<p>No results in this range.</p>")
    for metric in trend.get("metrics") or []:
        body.append(f"<h2>{e(metric)}</h2>")
        body.append(_chart(metric, windows, changes, by_metric.get(metric)))
        if metric in by_metric:
            body.append(_drop_section(by_metric[metric]))
        body.append(_table(metric, windows))
    if changes:
        body.append("<h2>Judge changes</h2><ul class='cj-changes'>" + "".join(
            f"<li class='judge'>{e(c['window'])}, {e(c['metric'])}: {e(', '.join(c.get('before') or []))} \u2192 "
            f"{e(', '.join(c.get('after') or []))}</li>" for c in changes) + "</ul>"
            "<p class='small'>A change of judge (model, parameters or calibration) moves scores by itself: compare "
            "windows on either side of it with care.</p>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(title)}</title><style>{_CSS}</style></head><body>" + "\n".join(body)
            + "\n<p class='small'>Generated by contextjudge.</p></body></html>\n")

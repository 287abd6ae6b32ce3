"""The calibration page: a judge's verdicts against a user's gold labels, as ``contextjudge calibrate`` reports them.

Per verdict family: the agreement figures with their intervals, the confusion counts, the fitted threshold (or why
none was fitted) and every item where judge and labels disagree; per metric, the judged mean against the gold mean.
Every piece of text from the report (inputs, node texts, reasons, names) is escaped; the page carries the same
Content-Security-Policy as the run report and no script at all.
"""

from __future__ import annotations

from typing import Any

from ._format import e, num
from ._script import CSP

__all__ = ["render_calibration"]

_STATS = (("base_rate", "Base rate (share labelled yes)"), ("accuracy", "Accuracy"), ("kappa", "Cohen's kappa"),
          ("tpr", "True-positive rate"), ("tnr", "True-negative rate"))
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
padding:0 16px;color:#1f2328}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:tabular-nums}
.small{color:#57606a;font-size:12px}.conf td{min-width:70px}.miss{background:#fff1f0}.text{max-width:520px}
"""


def _ci(value: Any, interval: Any) -> str:
    if value is None:
        return "n/a"
    if not interval:
        return num(value)
    return f"{num(value)} [{num(interval[0])}, {num(interval[1])}]"


def _confusion(c: dict[str, Any]) -> str:
    return ("<table class='conf'><thead><tr><th></th><th>label yes</th><th>label no</th></tr></thead><tbody>"
            f"<tr><th>judge yes</th><td class='num'>{int(c.get('tp', 0))}</td>"
            f"<td class='num miss'>{int(c.get('fp', 0))}</td></tr>"
            f"<tr><th>judge no</th><td class='num miss'>{int(c.get('fn', 0))}</td>"
            f"<td class='num'>{int(c.get('tn', 0))}</td></tr></tbody></table>")


def _threshold(fit: Any) -> str:
    if not isinstance(fit, dict):
        return ""
    if "lambda" in fit:  # the embedded judge: its weights refitted on the labels
        if not fit.get("fitted"):
            why = fit.get("why")
            return f"<p>The judge keeps its own weights{': ' + e(why) if why else ''}.</p>"
        how = ((f"Weights fitted on {int(fit.get('items') or 0)} labelled items of {int(fit.get('cases') or 0)} "
                f"cases (shrunk toward the shipped ones, strength {num(fit.get('lambda'))})")
               if fit.get("lambda") is not None else
               f"The shipped weights kept, {int(fit.get('items') or 0)} labelled items of "
               f"{int(fit.get('cases') or 0)} cases")
        if fit.get("memory_kept"):
            how += ", and a memory of them (a close question on the same node leans on its labels)"
        return (f"<p>{how}: kappa "
                f"{num(fit.get('kappa_before'))} before, {num(fit.get('kappa_cv'))} cross-validated "
                f"({int(fit.get('folds') or 0)} folds over cases), {num(fit.get('kappa_after'))} on these labels "
                "(in-sample, which flatters).</p>")
    if not fit.get("fitted"):
        why = fit.get("why")
        return f"<p>No threshold fitted{': ' + e(why) if why else ''}.</p>"
    cv = fit.get("kappa_after_cv")
    return (f"<p>Fitted threshold <b>{num(fit.get('threshold'))}</b> (a verdict is yes when the judge's confidence "
            f"reaches it): kappa {num(fit.get('kappa_before'))} before, {num(fit.get('kappa_after'))} after on these "
            "labels (in-sample, which flatters)"
            + (f", {num(cv)} cross-validated over cases ({int(fit.get('folds') or 0)} folds)" if cv is not None
               else "") + ".</p>")


def _disagreements(items: list[dict[str, Any]], show: int) -> str:
    if not items:
        return "<p>Judge and labels agree on every item.</p>"
    rows = []
    for it in items[:show]:
        conf = it.get("confidence")
        rows.append(f"<tr><td>{e(it.get('case'))}</td><td class='text'>{e(it.get('input'))}</td>"
                    f"<td>{e(it.get('item'))}</td><td class='text'>{e(it.get('text'))}</td>"
                    f"<td>{'yes' if it.get('label') else 'no'}</td><td>{'yes' if it.get('verdict') else 'no'}</td>"
                    f"<td class='num'>{'' if conf is None else num(conf)}</td>"
                    f"<td class='text'>{e(it.get('reason'))}</td></tr>")
    more = (f"<p class='small'>... and {len(items) - show} more (the JSON output, <code>calibrate --json</code>, "
            "lists them all).</p>" if len(items) > show else "")
    return ("<table><thead><tr><th>Case</th><th>Input</th><th>Item</th><th>Text</th><th>Label</th><th>Judge</th>"
            "<th>Confidence</th><th>Judge's reason</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + more)


def _jurors(fam: dict[str, Any]) -> str:
    """Each juror's agreement with the labels on the same items, beside the jury's (a jury's calibration only)."""
    jurors = fam.get("jurors") or {}
    if not jurors:
        return ""
    rows = "".join(f"<tr><td>{e(name)}</td>" + "".join(f"<td class='num'>{_ci(j.get(k), j.get(f'{k}_ci'))}</td>"
                                                        for k in ("accuracy", "kappa", "tpr", "tnr")) + "</tr>"
                   for name, j in jurors.items() if isinstance(j, dict))
    jury = "".join(f"<td class='num'>{_ci(fam.get(k), fam.get(f'{k}_ci'))}</td>" for k in ("accuracy", "kappa", "tpr",
                                                                                          "tnr"))
    return ("<h3>Each juror and the jury</h3><table class='cj-jurors'><thead><tr><th>Judge</th><th>Accuracy</th>"
            f"<th>Kappa</th><th>TPR</th><th>TNR</th></tr></thead><tbody>{rows}<tr><td><b>the jury</b></td>{jury}</tr>"
            "</tbody></table>")


def _family_words(name: str) -> str | None:
    """A calibration key of a registered verdict family in words ("node_usefulness.actual_output": "Node usefulness
    for the answer"), or None when no registered family has that key."""
    from ..judges import families  # noqa: PLC0415

    for fam in families():
        keys = fam.calibration_keys()
        if name in keys:  # the first is the family's own key, a second its key against the app's answer
            return keys[0].replace("_", " ").capitalize() + (" for the answer" if name != keys[0] else "")
    return None


def _family_title(name: str) -> str:
    """"Node usefulness (contextual precision)": the family's words and the metrics whose labels it checks (each
    metric's ``family`` and ``label_field``); the family's own name where no registered family has it."""
    from ..metrics import registered_metrics  # noqa: PLC0415

    words = _family_words(name)
    if words is None:
        return name
    names = [cls.name.lower() for cls in registered_metrics() if cls.label_field and cls.calibration_key() == name]
    return f"{words} ({', '.join(names)})" if names else words


def _family(name: str, fam: dict[str, Any], show: int) -> str:
    stats = "".join(f"<tr><th>{label}</th><td class='num'>{_ci(fam.get(key), fam.get(f'{key}_ci'))}</td></tr>"
                    for key, label in _STATS)
    items = fam.get("disagreements") or []
    return (f"<h2>{e(_family_title(name))}</h2>"
            f"<p>{int(fam.get('items', 0))} item(s) in {int(fam.get('cases', 0))} case(s); 95% intervals "
            "resample whole cases.</p>"
            f"<table><tbody>{stats}</tbody></table>" + _confusion(fam.get("confusion") or {}) + _jurors(fam)
            + _threshold(fam.get("threshold"))
            + f"<h3>Where judge and labels disagree ({len(items)})</h3>" + _disagreements(items, show))


def render_calibration(calibration: dict[str, Any], *, title: str | None = None, show: int = 200) -> str:
    """A self-contained HTML page of a calibration report (the dict ``contextjudge calibrate --json`` prints): per
    verdict family the agreement with its intervals, the confusion counts, the fitted threshold and the items where
    judge and labels disagree (the first ``show``); per metric the judged mean against the gold mean."""
    t = title or "contextjudge calibration"
    fams = [k for k, v in calibration.items() if isinstance(v, dict) and "confusion" in v]
    body = [f"<h1>{e(t)}</h1>",
            f"<p>Judge <b>{e(calibration.get('judge'))}</b> on {e(calibration.get('cases', '?'))} labelled case(s)."
            + (f" {e(calibration.get('note'))}" if calibration.get("note") else "") + "</p>"]
    if not fams:
        body.append("<p>No verdict family was calibrated: the labels file gave no label lists.</p>")
    body.extend(_family(name, calibration[name], show) for name in fams)
    metrics = calibration.get("metrics") or {}
    if metrics:
        rows = "".join(f"<tr><td>{e(m.get('metric', key))}</td><td class='num'>{int(m.get('cases') or 0)}</td>"
                       f"<td class='num'>{num(m.get('judged_mean'))}</td><td class='num'>{num(m.get('gold_mean'))}</td>"
                       f"<td class='num'>{num(m.get('mae'))}</td><td class='num'>{num(m.get('spearman'))}</td></tr>"
                       for key, m in metrics.items() if isinstance(m, dict))
        body.append("<h2>Metrics: judged against gold</h2><table><thead><tr><th>Metric</th><th>Cases</th>"
                    "<th>Judged mean</th><th>Gold mean</th><th>MAE</th><th>Spearman</th></tr></thead>"
                    f"<tbody>{rows}</tbody></table>")
    advice = [a for a in calibration.get("advice") or [] if isinstance(a, dict)]
    if advice:
        body.append("<h2>Advice</h2><ul class='cj-advice'>" + "".join(
            f"<li><b>{e(a.get('metric'))}</b>: {e(a.get('advice'))} ({e(a.get('why'))})"
            + (" <span class='small'>Too few labelled items for a stable threshold: label more cases.</span>"
               if a.get("too_few") else "") + "</li>" for a in advice) + "</ul>")
    thresholds = calibration.get("thresholds") or {}
    if thresholds:
        body.append("<p>Fitted thresholds: " + e(", ".join(f"{k} {v}" for k, v in thresholds.items()))
                    + ". Use them with <code>--model @contextjudge-calibration.json</code> (or the file you saved).</p>")
    if calibration.get("learned"):
        body.append("<p>Weights fitted for: " + e(", ".join(calibration["learned"]))
                    + ". Use them with <code>--model @contextjudge-calibration.json</code> (or the file you saved); a "
                    "store's own labels are used by itself.</p>")
    errors = calibration.get("errors") or []
    if errors:
        body.append(f"<h2>Judge errors ({len(errors)})</h2><ul>"
                    + "".join(f"<li>{e(x.get('case'))} ({e(x.get('family'))}): {e(x.get('error'))}</li>"
                              for x in errors[:show] if isinstance(x, dict)) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(t)}</title><style>{_CSS}</style></head><body>" + "\n".join(body)
            + "\n<p class='small'>Generated by contextjudge.</p></body></html>\n")

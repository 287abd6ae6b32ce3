"""Does a jury of judges beat its best member? Measured with judges that run here, no API key.

    python benchmarks/jury.py --builtin [--limit 300]
    python benchmarks/jury.py --data-dir ../shared/data [--limit 150]

Jurors:
- ``local``: the embedded judge.
- ``overlap``: a word-overlap judge (``FakeJudge(default="overlap")``: yes when the item shares enough words with the
  reference or the question), a cheap judge of another kind.
- ``biased``: the embedded judge deliberately biased towards yes (a ``CalibratedJudge`` whose threshold is 0.25 in
  every family instead of 0.5).

Juries: ``majority`` of the three, and ``weighted`` with weights from each juror's agreement with the labels
(``Jury.weights_from``) fitted on the first half of the items and measured on the second half. Every figure is
measured on that second half (cases alternate between the halves), through ``calibrate`` as a user runs it:
Cohen's kappa per verdict family with its 95% bootstrap interval over cases.

Sources: ``--builtin`` is the judge check that ships with the package (``contextjudge calibrate --builtin``; every
``k``-th line so that ``--limit`` lines are used, balanced across its three families); ``--data-dir`` is the
gold-labelled development data (HotpotQA: precision, a node's label is its gold ``relevant`` flag).

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from contextjudge.cases.labels import with_labels  # noqa: E402
from contextjudge.engine._calibrate import calibrate, read_labels_file  # noqa: E402
from contextjudge.judges import FAMILIES, Jury, resolve_model  # noqa: E402
from contextjudge.judges._calibration import CalibratedJudge, Calibration  # noqa: E402
from contextjudge.testing import FakeJudge  # noqa: E402


def builtin_cases(limit: int) -> list[Any]:
    from contextjudge.cli._trust import builtin_check_path

    cases = read_labels_file(builtin_check_path())
    step = max(1, len(cases) // limit)
    return cases[::step][:limit]


def hotpotqa_cases(data_dir: str, limit: int) -> list[Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from agreement import hotpotqa_case, load

    out = []
    for r in load(data_dir, "hotpotqa", limit):
        passages = r["passages"]
        tc = hotpotqa_case(r, passages)
        tc.id = str(r.get("id") or len(out))
        out.append(with_labels(tc, {"labels": [bool(p.get("relevant")) for p in passages]}))
    return out


def jurors() -> dict[str, Any]:
    local = resolve_model("local")
    biased = CalibratedJudge(judge=local, calibration=Calibration(judge="local", thresholds={f: 0.25 for f in FAMILIES},
                                                                  judge_name="contextjudge-local"))
    return {"local": local, "overlap": FakeJudge(default="overlap", model_name="word-overlap"), "biased": biased}


def kappas(report: dict[str, Any]) -> dict[str, Any]:
    return {f: {"kappa": report[f]["kappa"], "kappa_ci": report[f]["kappa_ci"], "items": report[f]["items"]}
            for f in FAMILIES if isinstance(report.get(f), dict)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builtin", action="store_true")
    ap.add_argument("--data-dir")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    if bool(args.builtin) == bool(args.data_dir):
        ap.error("give --builtin or --data-dir")
    cases = builtin_cases(args.limit) if args.builtin else hotpotqa_cases(args.data_dir, args.limit)
    fit, test = cases[0::2], cases[1::2]
    js = jurors()
    t0 = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    fitted = []
    for name, judge in js.items():
        fitted.append(calibrate(fit, judge, resamples=50))
        rows[name] = kappas(calibrate(test, judge, resamples=args.resamples))
    weights = Jury.weights_from(fitted)
    rows["jury majority"] = kappas(calibrate(test, Jury(list(js.values())), resamples=args.resamples))
    rows["jury weighted"] = kappas(calibrate(test, Jury(list(js.values()), aggregate="weighted", weights=weights),
                                             resamples=args.resamples))
    fams = [f for f in FAMILIES if any(f in r for r in rows.values())]
    load = os.getloadavg()[0]
    src = "builtin judge check" if args.builtin else "HotpotQA dev"
    print(f"{src}: {len(test)} measured cases (and {len(fit)} for the weights); kappa [95% CI]; "
          f"{time.perf_counter() - t0:.0f}s, load average {load:.1f}")
    print("| judge | " + " | ".join(fams) + " |")
    print("|---|" + "---|" * len(fams))
    for name, r in rows.items():
        cells = []
        for f in fams:
            k = r.get(f)
            cells.append("-" if not k or k["kappa"] is None else
                         f"{k['kappa']:.3f} [{k['kappa_ci'][0]:.2f}, {k['kappa_ci'][1]:.2f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for f in fams:
        best = max((n for n in js if rows[n].get(f)), key=lambda n: rows[n][f]["kappa"] or -1)
        for jury in ("jury majority", "jury weighted"):
            d = (rows[jury][f]["kappa"] or 0) - (rows[best][f]["kappa"] or 0)
            print(f"{f}: {jury} vs its best member ({best}): {d:+.3f}")
    print(json.dumps({"source": src, "cases": len(test), "weights": weights, "kappa": rows, "load": load}))


if __name__ == "__main__":
    main()

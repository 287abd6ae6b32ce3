"""Bias-corrected (prediction-powered) means against gold labels: does the interval cover, and is it narrower?

    python benchmarks/ppi.py --data-dir ../shared/data [--draws 500] [--share 0.2] [--seed 16] [--limit N]
                             [--scores FILE]

The embedded judge (model="local") scores contextual precision on every HotpotQA development row, building the test
cases as benchmarks/agreement.py does (the question, the gold answer as expected output, the ten passages in their
fixed order). Each row's gold precision is the same formula on the passages' gold ``relevant`` labels. The truth is
the gold mean over all rows.

Then, ``--draws`` times: a random ``--share`` of the rows is "labelled" (their gold score is known), the rest have the
judge's score only, and ``contextjudge.stats.ppi_mean`` gives the bias-corrected interval; beside it, the
labelled-only interval (the gold mean of the labelled rows alone) and the judge-only interval (every row's judge
score, no labels). Printed: for each, how often its 95% interval covers the all-rows gold mean, its mean width, and
how often the bias-corrected interval is narrower than the labelled-only one; also the judge's bias over all rows.
The last line is one JSON object with the same figures.

``--scores FILE`` keeps the judge's per-row scores in FILE (JSON; written when missing, read when present), so the
draws can be re-run without judging again. Delete the file after changing the judge.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import hotpotqa_case, load  # noqa: E402

from contextjudge import evaluate  # noqa: E402
from contextjudge.judges._local import LocalJudge  # noqa: E402
from contextjudge.metrics import ContextualPrecisionMetric, weighted_cumulative_precision  # noqa: E402
from contextjudge.stats import mean_interval, ppi_mean  # noqa: E402

TARGET_COVERAGE = 0.93


def judge_scores(rows: list[dict[str, Any]]) -> tuple[list[float], float]:
    """The embedded judge's contextual precision of every row (in row order) and the seconds it took."""
    metric = ContextualPrecisionMetric(model=LocalJudge())
    t0 = time.perf_counter()
    res = evaluate([hotpotqa_case(r, r["passages"]) for r in rows], [metric], show_progress=False,
                   raise_exceptions=True)
    scores = [tr.metric(metric.name).score for tr in res.test_results]
    if any(s is None for s in scores):
        raise SystemExit("the embedded judge left a row unscored; see the run's errors")
    return [float(s) for s in scores], time.perf_counter() - t0


def gold_scores(rows: list[dict[str, Any]]) -> list[float]:
    """Each row's contextual precision on its gold labels."""
    return [float(weighted_cumulative_precision([bool(p["relevant"]) for p in r["passages"]])) for r in rows]


def cached_judge_scores(rows: list[dict[str, Any]], path: str | None) -> tuple[list[float], float | None]:
    ids = [r["id"] for r in rows]
    if path and Path(path).exists():
        saved = json.loads(Path(path).read_text("utf-8"))
        if saved.get("ids") != ids:
            raise SystemExit(f"{path} holds scores of other rows (another --limit or data set); delete it to re-judge")
        return [float(s) for s in saved["scores"]], None
    scores, secs = judge_scores(rows)
    if path:
        Path(path).write_text(json.dumps({"ids": ids, "scores": scores}), "utf-8")
    return scores, secs


def draws(judged: list[float], gold: list[float], *, n_draws: int, share: float, seed: int) -> dict[str, Any]:
    """Coverage and width of the bias-corrected, labelled-only and judge-only intervals over random labelled subsets."""
    rows = len(judged)
    k = round(share * rows)
    if not 2 <= k < rows:
        raise SystemExit(f"--share {share} labels {k} of {rows} rows; it must label at least 2 and leave one unlabelled")
    truth = statistics.fmean(gold)
    judge_only = mean_interval(judged)
    rng = random.Random(seed)
    cover = {"ppi": 0, "labelled": 0}
    widths: dict[str, list[float]] = {"ppi": [], "labelled": []}
    narrower, lams, errors = 0, [], {"ppi": [], "labelled": []}
    for _ in range(n_draws):
        labelled = set(rng.sample(range(rows), k))
        est = ppi_mean(judged, [g if i in labelled else None for i, g in enumerate(gold)])
        if est is None:
            raise SystemExit("ppi_mean gave no estimate (too few labelled rows)")
        for name, iv in (("ppi", est.corrected), ("labelled", est.labelled)):
            cover[name] += iv.contains(truth)
            widths[name].append(iv.width)
            errors[name].append(iv.estimate - truth)
        narrower += est.corrected.width < est.labelled.width
        lams.append(est.lam)

    def rmse(xs: list[float]) -> float:
        return (sum(x * x for x in xs) / len(xs)) ** 0.5

    return {
        "rows": rows, "labelled_rows": k, "draws": n_draws, "share": share, "seed": seed,
        "gold_mean": truth, "judge_mean": judge_only.estimate, "judge_bias": judge_only.estimate - truth,
        "judge_only": {"coverage": float(judge_only.contains(truth)), "width": judge_only.width},
        "ppi": {"coverage": cover["ppi"] / n_draws, "width": statistics.fmean(widths["ppi"]),
                "rmse": rmse(errors["ppi"])},
        "labelled": {"coverage": cover["labelled"] / n_draws, "width": statistics.fmean(widths["labelled"]),
                     "rmse": rmse(errors["labelled"])},
        "ppi_narrower": narrower / n_draws,
        "width_ratio": statistics.fmean(widths["ppi"]) / statistics.fmean(widths["labelled"]),
        "mean_lambda": statistics.fmean(lams),
    }


def table(f: dict[str, Any]) -> str:
    head = f"{'interval':<24} {'coverage':>9} {'mean width':>11} {'RMSE':>7}"
    lines = [f"HotpotQA dev, contextual precision: {f['rows']} rows, {f['labelled_rows']} labelled per draw "
             f"({f['share']:.0%}), {f['draws']} draws, seed {f['seed']}",
             f"all-rows gold mean {f['gold_mean']:.4f}; embedded judge's mean {f['judge_mean']:.4f} "
             f"(bias {f['judge_bias']:+.4f})", head, "-" * len(head),
             f"{'bias-corrected (PPI++)':<24} {f['ppi']['coverage']:>9.1%} {f['ppi']['width']:>11.4f} "
             f"{f['ppi']['rmse']:>7.4f}",
             f"{'labelled rows only':<24} {f['labelled']['coverage']:>9.1%} {f['labelled']['width']:>11.4f} "
             f"{f['labelled']['rmse']:>7.4f}",
             f"{'judge only (no labels)':<24} {f['judge_only']['coverage']:>9.1%} {f['judge_only']['width']:>11.4f} "
             f"{abs(f['judge_bias']):>7.4f}",
             f"bias-corrected narrower than labelled-only in {f['ppi_narrower']:.1%} of draws "
             f"(mean width ratio {f['width_ratio']:.3f}); mean lambda {f['mean_lambda']:.3f}"]
    missed = [name for name, ok in (("coverage", f["ppi"]["coverage"] >= TARGET_COVERAGE),
                                    ("narrower", f["width_ratio"] < 1)) if not ok]
    lines.append("targets (coverage >= 93%, narrower than labelled-only): "
                 + ("met" if not missed else "MISSED " + ", ".join(missed)))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with hotpotqa_dev.jsonl")
    ap.add_argument("--draws", type=int, default=500, help="random labelled subsets (default: 500)")
    ap.add_argument("--share", type=float, default=0.2, help="share of rows labelled in each draw (default: 0.2)")
    ap.add_argument("--seed", type=int, default=16, help="seed of the draws (default: 16)")
    ap.add_argument("--limit", type=int, default=None, help="use the first N rows")
    ap.add_argument("--scores", metavar="FILE", help="keep the judge's per-row scores in FILE (reused when present)")
    args = ap.parse_args()
    if args.draws < 1:
        ap.error("--draws must be at least 1")
    rows = load(args.data_dir, "hotpotqa", args.limit)
    judged, secs = cached_judge_scores(rows, args.scores)
    figures = draws(judged, gold_scores(rows), n_draws=args.draws, share=args.share, seed=args.seed)
    figures["judge_seconds"] = None if secs is None else round(secs, 1)
    figures["missed"] = figures["ppi"]["coverage"] < TARGET_COVERAGE or figures["width_ratio"] >= 1
    print(table(figures), flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

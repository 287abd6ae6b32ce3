"""The MCP tools' work from Python (``engine.StoreWorkspace``, ``score_one``, ``judge_check``; issue 49), with no MCP
SDK and no server: the same data the tools answer, which the door only pages and bounds."""

from __future__ import annotations

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.cli._mcp_tools import Tools
from contextjudge.engine import (
    StoreWorkspace,
    ToolArgumentError,
    metric_gates,
    read_labels_file,
    score_one,
    stratified,
)
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, from_keys
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am."]


@pytest.fixture
def store_path(tmp_path):
    path = str(tmp_path / "res.db")
    cases = [LLMTestCase(id=f"c{i}", input=f"Question {i}?", actual_output="25 days.",
                         expected_output="Employees get 25 vacation days per year.",
                         retrieval_context=NODES if i % 2 else list(reversed(NODES))) for i in range(4)]
    judge = FakeJudge(default="overlap")
    for run in ("base", "cur"):
        evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)], store=path,
                 run_id=run, show_progress=False)
    return path


def test_the_workspace_gives_what_the_tools_answer(store_path, tmp_path):
    store = open_store(store_path)
    view = StoreWorkspace(store)
    tools = Tools(store_path, root=str(tmp_path))
    try:
        assert [r["run_id"] for r in view.runs()] == [r["run_id"] for r in tools.runs()["runs"]] == ["cur", "base"]
        summary = view.run_summary("cur")
        assert summary == tools.run_summary(run="cur")
        gates = metric_gates(view.load("cur"), None)
        assert [m["metric"] for m in summary["metrics"]] == list(gates)
        assert all(m["gate"] == ("fail: " + "; ".join(gates[m["metric"]].fails) if gates[m["metric"]].fails
                                 else "pass") for m in summary["metrics"])
        names, items = view.worst_cases("cur", "Contextual Precision")
        assert names == ["Contextual Precision"]
        scores = [-1.0 if i["score"] is None else i["score"] for i in items]
        assert scores == sorted(scores) and len(items) == 4
        assert tools.worst_cases(run="cur", metric="Contextual Precision")["cases"] == items
        told = tools.compare_runs(baseline="base", run="cur")
        # the tool adds the door's goldens check to the workspace's figures
        assert told.pop("goldens") == {"baseline": None, "run": None} and told.pop("note") is None
        assert view.compare_runs("base", "cur") == told
        with pytest.raises(ToolArgumentError, match="has no result in this run"):
            view.worst_cases("cur", "Faithfulness")
    finally:
        tools.close()


def test_one_case_scored_and_the_builtin_labels_sampled_from_python():
    judge = FakeJudge()
    got = score_one(input="How many vacation days?", nodes=NODES, output="25.", expected_output=None,
                    metrics=from_keys(["contextual_relevancy"], model=judge), judge="fake")
    assert [s["metric"] for s in got["scores"]] == ["Contextual Relevancy"] and got["error"] is None
    with pytest.raises(ToolArgumentError, match="not valid"):
        score_one(input="q", nodes=[{"not": "a node"}], output=None, expected_output=None,  # type: ignore[list-item]
                  metrics=from_keys(["contextual_relevancy"], model=judge), judge="fake")
    from contextjudge.engine import builtin_check_path

    cases = read_labels_file(builtin_check_path())
    some = stratified(cases, 12)
    assert len(some) == 12 and len({id(c) for c in some}) == 12

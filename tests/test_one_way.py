"""Issue 27, point 4: one way to build metrics from keys (``metrics.from_keys``), ``evaluate``'s options object beside
its keywords, and the CLI package without an import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from contextjudge import ConfigurationError, EvaluationOptions, LLMTestCase, evaluate
from contextjudge.metrics import (
    BY_KEY,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextUtilizationMetric,
    from_keys,
)
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

CLI = Path(__file__).resolve().parents[1] / "src" / "contextjudge" / "cli"


# ------------------------------------------------------------------------------------------------ from_keys
def test_from_keys_builds_each_metric_in_order_with_its_judge_and_thresholds():
    judge = FakeJudge()
    ms = from_keys(["contextual_precision", "Context-Utilization", "contextual_recall"], model=judge,
                   thresholds={"contextual_recall": 0.8, "contextual_precision": None})
    assert [type(m) for m in ms] == [ContextualPrecisionMetric, ContextUtilizationMetric, ContextualRecallMetric]
    assert [m.threshold for m in ms] == [0.5, 0.5, 0.8]  # None and a key left out: the metric's own
    assert all(m.model is judge for m in ms)
    every = from_keys(list(BY_KEY), thresholds=0.3, options={"contextual_recall": {"strict_mode": True}})
    assert [m.key for m in every] == list(BY_KEY)
    assert {m.key: m.threshold for m in every}["contextual_recall"] == 1.0  # strict mode: pass only at 1
    assert all(m.threshold == 0.3 for m in every if m.key != "contextual_recall")


@pytest.mark.parametrize("call", [
    lambda: from_keys(["contextual_precision", "precison"]),
    lambda: from_keys(["contextual_precision"], thresholds={"recal": 0.7}),
    lambda: from_keys(["contextual_precision"], options={"nope": {}}),
])
def test_from_keys_refuses_an_unknown_key_naming_the_known_ones(call):
    with pytest.raises(ConfigurationError) as info:
        call()
    assert "unknown metric" in str(info.value)
    assert all(key in str(info.value) for key in BY_KEY)


def test_the_worker_and_estimate_build_through_from_keys():
    from contextjudge.engine._estimate import estimate
    from contextjudge.engine._worker import metrics_for_run

    config = {"metrics": [{"class": "ContextualRecallMetric", "threshold": 0.6, "strict_mode": False},
                          {"class": "ContextualPrecisionMetric", "threshold": 0.9}]}
    ms = metrics_for_run(config, thresholds={"contextual_precision": 0.4})
    assert [(m.key, m.threshold) for m in ms] == [("contextual_recall", 0.6), ("contextual_precision", 0.4)]
    assert [m.key for m in metrics_for_run({}, threshold=0.2)] == ["contextual_precision", "contextual_recall",
                                                                   "contextual_relevancy", "context_utilization",
                                                                   "faithfulness", "turn_contextual_relevancy"]
    with pytest.raises(ConfigurationError, match="unknown metric 'bogus'"):
        estimate([_case(0)], ["bogus"], model="gpt-4o-mini")


# ------------------------------------------------------------------------------------------------ options
def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"How long is the refund window {i}?", actual_output="30 days.",
                       expected_output="Refunds are accepted within 30 days.",
                       retrieval_context=["Refunds are accepted within 30 days.", "The office is in Lyon."])


def _run(store_path: Path, **how):
    seen = []
    result = evaluate([_case(i) for i in range(3)], [ContextualPrecisionMetric(), ContextualRecallMetric()],
                      model=FakeJudge(), show_progress=False, on_result=seen.append, **how)
    with open_store(str(store_path)) as store:
        info = store.run_info(result.run_id)
        stored = sorted((r["case_key"], r["metric"], r["score"]) for r in store.iter_records(result.run_id))
    return result, info, stored, seen


def test_the_options_object_gives_the_same_run_as_the_keywords(tmp_path):
    kw = {"store": str(tmp_path / "a.db"), "run_id": "nightly", "run_name": "nightly", "max_concurrency": 2,
          "run_config": {"app": "rag"}, "case_keys": ["a", "b", "c"]}
    by_kw = _run(tmp_path / "a.db", **kw)
    opts = EvaluationOptions(**{**kw, "store": str(tmp_path / "b.db")})
    by_opts = _run(tmp_path / "b.db", options=opts)
    for (r1, i1, s1, seen1), (r2, i2, s2, seen2) in [(by_kw, by_opts)]:
        assert r1.run_id == r2.run_id == "nightly" and i1.name == i2.name == "nightly"
        assert i1.config.get("app") == i2.config.get("app") == "rag"
        assert s1 == s2 and {k for k, _, _ in s1} == {"a", "b", "c"}
        assert r1.summary() == r2.summary() and len(seen1) == len(seen2) == 3
    # a keyword beside the object wins over its field; the object itself is left as it was
    r3, i3, _, _ = _run(tmp_path / "b.db", options=opts, run_id="nightly-2", run_name="retry")
    assert (r3.run_id, i3.name, opts.run_id) == ("nightly-2", "retry", "nightly")


def test_a_misspelt_keyword_or_a_wrong_options_object_says_what_is_accepted():
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_concurency'.*max_concurrency"):
        evaluate([_case(0)], [ContextualPrecisionMetric(model=FakeJudge())], max_concurency=2)
    with pytest.raises(TypeError, match="takes an EvaluationOptions, got a dict"):
        evaluate([_case(0)], [ContextualPrecisionMetric(model=FakeJudge())], options={"store": "x.db"})


# ------------------------------------------------------------------------------------------------ the CLI package
def _imports(path: Path) -> set[str]:
    """The sibling modules of the CLI package that ``path`` imports (at the top or inside a function)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module)
            else:
                out.update(a.name for a in node.names)
    return out


def test_the_cli_package_has_no_import_circle():
    graph = {p.stem: _imports(p) for p in CLI.glob("*.py")}
    assert graph["_shared"] == set(), "the helpers import no command module"
    assert {"_eval", "_score", "_runs", "_trust", "_estimate", "_worker", "_trend"} <= graph["_main"]

    def visit(node: str, path: tuple[str, ...]) -> None:
        for nxt in graph.get(node, ()):
            assert nxt not in path, f"import circle: {' -> '.join((*path, nxt))}"
            visit(nxt, (*path, nxt))

    for module in graph:
        visit(module, (module,))
    assert not any(p.name.startswith("_cli") for p in CLI.parent.glob("_cli*.py")), "the old modules are gone"

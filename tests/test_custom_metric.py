"""A metric of your own is one place: a toy metric defined here, and only here, reuses a verdict family and a label
field, and every door knows it: ``evaluate()`` scores it, its gold score comes from the labels, ``contextjudge
calibrate`` reports it, the gates read its family, ``--metrics`` and ``from_keys`` take its key, the report shows it.
No product file names it (docs/custom-metrics.md is the user's page for this).

Also: the tables read from the registry give, for the built-in metrics, exactly what the hand-written tables of 0.3
gave (no behaviour change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.cases.labels import LABEL_FIELDS, with_labels
from contextjudge.engine._calibrate import _taught, calibrate, read_labels_file
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import (
    ALWAYS_GATED,
    BY_KEY,
    FAMILY_OF_KEY,
    BaseMetric,
    ContextualPrecisionMetric,
    Outcome,
    fill_gold_scores,
    from_keys,
    gold_score,
    metric_aliases,
    metric_class,
    metrics_of_field,
    not_gated,
    register_metric,
    registered_metrics,
    unregister_metric,
    weighted_cumulative_precision,
)
from contextjudge.report import render_calibration, render_report
from contextjudge.report._calibration import _family_title
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge


class TopThreePrecision(ContextualPrecisionMetric):
    """Contextual precision of the first three nodes only. Its family ("node_usefulness") and label field
    ("labels") are inherited: the same question to the judge, the same labels."""

    name = "Top-3 Precision"
    key = "top3_precision"
    aliases = ("top3",)

    @classmethod
    def score_labels(cls, labels: list[bool]) -> float:
        return weighted_cumulative_precision(labels[:3])

    async def compute(self, test_case, judge):
        top = test_case.model_copy(update={"retrieval_context": test_case.retrieval_context[:3]})
        return await super().compute(top, judge)


@pytest.fixture
def toy():
    register_metric(TopThreePrecision)
    yield TopThreePrecision
    unregister_metric(TopThreePrecision)


RULES = {"good": "yes", "trap": "yes", "plain": "no", "missed": "no"}
ROWS = [
    {"id": "a", "input": "alpha question", "expected_output": "Alpha answer.", "actual_output": "Alpha.",
     "retrieval_context": ["plain one", "good one", "trap one", "good four"], "labels": [0, 1, 0, 1]},
    {"id": "b", "input": "beta question", "expected_output": "Beta answer.", "actual_output": "Beta.",
     "retrieval_context": ["missed one", "good two", "plain two", "plain three"], "labels": [1, 1, 0, 0]},
]


def _case(row: dict) -> LLMTestCase:
    tc = LLMTestCase(**{k: row[k] for k in ("input", "actual_output", "expected_output", "retrieval_context")})
    return with_labels(tc, {"labels": row["labels"]})


def test_evaluate_scores_it_with_its_own_formula_and_asks_only_what_it_judges(toy):
    judge = FakeJudge(rules=RULES, style="json")
    result = evaluate([_case(ROWS[0])], [toy(model=judge)], show_progress=False)
    (m,) = result.test_results[0].metrics_data
    # judged: plain no, good yes, trap yes -> precision of [n, y, y]; the fourth node is never sent
    assert m.name == "Top-3 Precision" and m.error is None
    assert m.score == pytest.approx(weighted_cumulative_precision([False, True, True]))
    assert [v["id"] for v in m.verdicts] == ["n1", "n2", "n3"]
    assert {i for c in judge.calls for i in c["ids"]} == {"n1", "n2", "n3"}


class AnswerBrevity(BaseMetric):
    """A metric from scratch through the public hook: no family, no labels, no judge call."""

    name = "Answer Brevity"
    key = "answer_brevity"
    required_params = ("actual_output",)

    async def compute(self, test_case, judge):
        words = len(test_case.actual_output.split())
        return Outcome(1.0 if words <= 10 else 10 / words, [], f"{words} words.", judged=False)


def test_a_metric_written_from_scratch_overrides_compute_and_gets_thresholds_and_strict_mode():
    judge = FakeJudge()
    long = LLMTestCase(input="q", actual_output=" ".join(["word"] * 20))
    result = evaluate([LLMTestCase(input="q", actual_output="Short."), long],
                      [AnswerBrevity(model=judge, threshold=0.8), AnswerBrevity(model=judge, strict_mode=True)],
                      show_progress=False)
    short_r, long_r = ([(m.score, m.success, m.reason) for m in tr.metrics_data] for tr in result.test_results)
    assert short_r == [(1.0, True, "1 words."), (1.0, True, "1 words.")]
    assert long_r == [(0.5, False, "20 words."), (0.0, False, "20 words.")]
    assert judge.calls == []
    with pytest.raises(Exception, match="actual_output"):
        AnswerBrevity(model=judge).measure(LLMTestCase(input="q"))


def test_its_gold_score_comes_from_its_label_field(toy):
    case = _case(ROWS[0])
    assert metric_class("Top-3 Precision") is toy and metric_class("top3_precision") is toy
    assert toy in metrics_of_field("labels") and ContextualPrecisionMetric in metrics_of_field("labels")
    # gold labels [0, 1, 0, 1]: the toy reads the first three, precision all four
    assert gold_score("Top-3 Precision", case) == pytest.approx(weighted_cumulative_precision([False, True, False]))
    assert gold_score("Contextual Precision", case) == pytest.approx(
        weighted_cumulative_precision([False, True, False, True]))
    result = fill_gold_scores(evaluate([case], [toy(model=FakeJudge(rules=RULES, style="json"))],
                                       show_progress=False))
    assert result.test_results[0].metrics_data[0].gold_score == pytest.approx(0.5)


def test_calibrate_reports_it_and_counts_each_labelled_item_once(toy, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", "utf-8")
    judge = FakeJudge(rules=RULES, style="json")
    report = calibrate(read_labels_file(path), judge)
    # the family's agreement: the 8 labelled nodes, each once (precision judged all four, the toy three of them)
    assert report["node_usefulness"]["items"] == 8
    assert report["node_usefulness"]["confusion"] == {"tp": 3, "fp": 1, "fn": 1, "tn": 3}
    toy_fig = report["metrics"]["top3_precision"]
    assert toy_fig["metric"] == "Top-3 Precision" and toy_fig["cases"] == 2
    # judged a: [n, y, y]; b: [n, y, n]. gold a: [0, 1, 0]; b: [1, 1, 0]
    wcp = weighted_cumulative_precision
    assert toy_fig["judged_mean"] == pytest.approx((wcp([False, True, True]) + wcp([False, True, False])) / 2)
    assert toy_fig["gold_mean"] == pytest.approx((wcp([False, True, False]) + wcp([True, True, False])) / 2)
    assert "contextual_precision" in report["metrics"]
    assert [a["metric"] for a in report["advice"]] == ["Contextual Precision", "Top-3 Precision"]
    page = render_calibration(report)  # the calibration page names it beside its family
    assert "Node usefulness (contextual precision, top-3 precision)" in page and "Top-3 Precision" in page


def test_gates_keys_and_the_command_line_know_it(toy):
    assert FAMILY_OF_KEY["top3_precision"] == "node_usefulness" and "top3_precision" in ALWAYS_GATED
    assert not_gated(["top3_precision"], "local") == {}  # node usefulness gates whatever the judge, as precision
    (m,) = from_keys(["top3-precision"], model="local", thresholds={"top3_precision": 0.7})
    assert isinstance(m, toy) and m.threshold == 0.7
    assert metric_aliases()["top3"] == "top3_precision"
    from contextjudge.cli._shared import _metric_keys

    assert _metric_keys(["top3,precision"], []) == ["top3_precision", "contextual_precision"]


def test_the_report_shows_it(toy, tmp_path):
    db = str(tmp_path / "runs.db")
    judge = FakeJudge(rules=RULES, style="json")
    evaluate([_case(r) for r in ROWS], [toy(model=judge)], store=db, run_id="r1", show_progress=False)
    page = render_report(store=db, run="r1")
    assert "Top-3 Precision" in page
    with open_store(db) as store:
        loaded = fill_gold_scores(store.load_run("r1"))
    golds = sorted(m.gold_score for tr in loaded.test_results for m in tr.metrics_data)
    assert golds == pytest.approx(sorted([0.5, 1.0]))


def test_once_unregistered_it_is_gone(toy):
    unregister_metric(toy)
    assert "top3_precision" not in BY_KEY and toy not in registered_metrics()
    assert metric_class("Top-3 Precision") is None and "top3_precision" not in FAMILY_OF_KEY
    with pytest.raises(ConfigurationError, match="unknown metric"):
        from_keys(["top3_precision"])


def test_registering_refuses_what_would_collide_or_mislead(toy):
    register_metric(toy)  # the same class again: nothing happens
    clash = type("Clash", (ContextualPrecisionMetric,), {"key": "top3_precision", "name": "Clash"})
    with pytest.raises(ConfigurationError, match="Top"):
        register_metric(clash)
    with pytest.raises(ConfigurationError, match="label_field"):
        register_metric(type("Odd", (ContextualPrecisionMetric,), {"key": "odd", "label_field": "gut_feeling"}))
    with pytest.raises(ConfigurationError, match="answer_relevance"):  # not a verdict family
        register_metric(type("NoFam", (ContextualPrecisionMetric,), {"key": "no_fam", "family": "usefulness"}))
    with pytest.raises(ConfigurationError, match="calibration keys"):  # labels of a family no calibration keys
        register_metric(type("Rub", (ContextualPrecisionMetric,), {"key": "rub", "family": "rubric_recall"}))
    with pytest.raises(ConfigurationError, match="alias"):
        register_metric(type("Alias", (ContextualPrecisionMetric,), {"key": "alias_clash", "aliases": ("recall",)}))
    with pytest.raises(ConfigurationError, match="key of its own"):
        register_metric(type("NoKey", (ContextualPrecisionMetric,), {"key": "Bad Key"}))
    assert {"clash", "odd", "no_fam", "rub", "alias_clash"}.isdisjoint(BY_KEY)


# ---------------------------------------------------------------------------------------------- no behaviour change
# The tables as 0.3 wrote them by hand, in four layers; the registry must give the same for the built-in metrics.
OLD_METRIC_OF_FIELD = {"labels": "Contextual Precision", "relevance_labels": "Contextual Relevancy",
                       "utilization_labels": "Context Utilization", "statement_labels": "Contextual Recall",
                       "answer_statement_labels": "Faithfulness"}
OLD_FAMILY_OF_FIELD = {"labels": "node_usefulness", "utilization_labels": "node_usefulness.actual_output",
                       "relevance_labels": "sentence_relevance", "statement_labels": "statement_support",
                       "answer_statement_labels": "statement_support.actual_output"}
OLD_FAMILY_OF_KEY = {"contextual_precision": "node_usefulness", "contextual_recall": "statement_support",
                     "contextual_relevancy": "sentence_relevance",
                     "context_utilization": "node_usefulness.actual_output",
                     "faithfulness": "statement_support.actual_output", "turn_contextual_relevancy": "sentence_relevance"}
OLD_ALIASES = {"precision": "contextual_precision", "recall": "contextual_recall",
               "relevancy": "contextual_relevancy", "utilization": "context_utilization",
               "turn_precision": "turn_contextual_precision", "turn_recall": "turn_contextual_recall",
               "turn_relevancy": "turn_contextual_relevancy", "rubric_recall": "rubric_context_recall",
               "groundedness": "faithfulness", "answer_relevance": "answer_relevancy",
               "response_relevancy": "answer_relevancy", "hit": "hit_rate", "hitrate": "hit_rate",
               "precision@k": "precision_at_k", "recall@k": "recall_at_k", "ndcg@k": "ndcg",
               "mean_reciprocal_rank": "mrr"}


def test_the_registry_gives_the_tables_0_3_wrote_by_hand():
    taught = _taught()
    assert {c.label_field: c.name for c in taught} == OLD_METRIC_OF_FIELD
    # calibration's order (families, advice, metrics) is the old table's
    assert [(c.label_field, c.calibration_key()) for c in taught] == list(OLD_FAMILY_OF_FIELD.items())
    assert set(OLD_METRIC_OF_FIELD) == set(LABEL_FIELDS)
    assert metric_aliases() == OLD_ALIASES
    # the judged metrics that waited for a trusted judge, and those that gated whatever the judge, are the same
    loose = {k for k in FAMILY_OF_KEY if k not in ALWAYS_GATED}
    assert loose == {k for k in OLD_FAMILY_OF_KEY if k not in {"contextual_precision", "contextual_recall"}}
    assert {k: FAMILY_OF_KEY[k] for k in OLD_FAMILY_OF_KEY} == OLD_FAMILY_OF_KEY
    for key in set(BY_KEY) - set(OLD_FAMILY_OF_KEY):
        assert not_gated([key], "local") == {}, key
    assert not_gated(list(OLD_FAMILY_OF_KEY), "local") == {
        k: f for k, f in OLD_FAMILY_OF_KEY.items() if k not in {"contextual_precision", "contextual_recall"}}
    # the calibration page's family headings, in words read off the registered families (0.3's hand-written table
    # had none for faithfulness's key, shown bare); a key no family has is shown as it is
    assert [_family_title(f) for f in OLD_FAMILY_OF_FIELD.values()] == [
        "Node usefulness (contextual precision)", "Node usefulness for the answer (context utilization)",
        "Sentence relevance (contextual relevancy)", "Statement support (contextual recall)",
        "Statement support for the answer (faithfulness)"]
    assert _family_title("no_such_family") == "no_such_family"
    # results name utilization "Context Utilization": its gold score is found by that name (0.3 needed a setdefault)
    assert metric_class("Context Utilization").label_field == "utilization_labels"


def test_no_product_file_names_the_toy():
    src = Path(__file__).resolve().parents[1] / "src"
    assert not [p for p in src.rglob("*.py") if "top3_precision" in p.read_text("utf-8")]

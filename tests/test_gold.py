"""Gold scores: the metrics' own formulas over the labels, and the checks that say when labels do not line up."""

from __future__ import annotations

import pytest

from contextjudge.cases.labels import with_labels
from contextjudge.cases.testcase import LLMTestCase
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.metrics._gold import gold_score, label_problems
from contextjudge.testing import FakeJudge


def _case(**kw):
    base = dict(input="Where is the Eiffel Tower?", expected_output="It is in Paris. It opened in 1889.",
                actual_output="Paris.", retrieval_context=["The tower is in Paris. It is tall.", "Cats purr.",
                                                           "It opened in 1889."], id="c1")
    base.update(kw)
    return LLMTestCase(**base)


def test_precision_and_utilization_use_weighted_cumulative_precision():
    tc = _case()
    # [yes, no, yes] -> (1/1 + 2/3) / 2
    assert gold_score("Contextual Precision", tc, {"labels": [1, 0, 1]}) == pytest.approx(5 / 6)
    assert gold_score("context_utilization", tc, {"utilization_labels": [0, 0, 1]}) == pytest.approx(1 / 3)
    assert gold_score("Contextual Precision", tc, {"labels": [0, 0, 0]}) == 0.0


def test_relevancy_counts_a_node_label_once_per_sentence():
    tc = _case()
    # node 1 has two sentences (yes), node 2 one (no), node 3 one (yes): 3 of 4
    assert gold_score("Contextual Relevancy", tc, {"relevance_labels": [1, 0, 1]}) == pytest.approx(3 / 4)
    assert gold_score("Contextual Relevancy", tc, {"relevance_labels": [1, 1, 0]}) == pytest.approx(3 / 4)
    assert gold_score("Contextual Relevancy", tc, {"relevance_labels": [0, 1, 0]}) == pytest.approx(1 / 4)


def test_recall_is_the_share_of_supported_statements():
    tc = _case()
    assert gold_score("Contextual Recall", tc, {"statement_labels": [1, 0]}) == 0.5
    own = {"statement_labels": [1, 1, 0], "statements": ["in Paris", "opened", "opened in 1889"]}
    assert gold_score("Contextual Recall", tc, own) == pytest.approx(2 / 3)


def test_a_case_without_labels_or_a_metric_without_a_gold_form_gives_none():
    tc = _case()
    assert gold_score("Contextual Precision", tc) is None
    assert gold_score("Contextual Recall", tc, {"labels": [1, 0, 1]}) is None
    assert gold_score("Rubric Context Recall", tc, {"labels": [1, 0, 1]}) is None
    with_labels(tc, {"labels": ["yes", "no", "no"]})
    assert gold_score("Contextual Precision", tc) == 1.0  # read from the case's own metadata


def test_no_retrieval_scores_zero_like_the_metrics():
    tc = _case(retrieval_context=[])
    assert gold_score("Contextual Precision", tc, {"labels": []}) == 0.0


def test_counts_that_do_not_match_give_none_or_a_message_naming_the_case():
    tc = _case()
    assert gold_score("Contextual Precision", tc, {"labels": [1, 0]}) is None
    with pytest.raises(ConfigurationError, match=r"case 'c1': 2 labels for 3 retrieved nodes"):
        gold_score("Contextual Precision", tc, {"labels": [1, 0]}, strict=True)
    with pytest.raises(ConfigurationError) as info:
        gold_score("Contextual Recall", tc, {"statement_labels": [1, 0, 1]}, strict=True)
    msg = str(info.value)
    assert "3 statement_labels" in msg and "2 statements" in msg
    assert "'It is in Paris.'" in msg and "'It opened in 1889.'" in msg and "'statements'" in msg
    # a bad field does not hide a good one
    assert gold_score("Contextual Precision", tc, {"labels": [1, 0, 0], "statement_labels": [1]}) == 1.0
    assert len(label_problems(tc, {"labels": [1], "relevance_labels": [1], "statement_labels": [1]})) == 3


@pytest.mark.parametrize("metric_cls,field,labels", [
    (ContextualPrecisionMetric, "labels", [0, 1, 1]),
    (ContextualPrecisionMetric, "labels", [1, 0, 1]),
    (ContextualRelevancyMetric, "relevance_labels", [1, 0, 1]),
])
def test_gold_equals_the_metric_score_when_the_judge_answers_the_labels(metric_cls, field, labels):
    tc = _case()
    if field == "labels":
        rules = {f"n{k}": "yes" if lab else "no" for k, lab in enumerate(labels, 1)}
    else:  # sentence ids n<k>.s<j>: one rule per sentence, from its node's label
        rules = {"n1.s1": "yes", "n1.s2": "yes", "n2.s1": "no", "n3.s1": "yes"}
    metric = metric_cls(model=FakeJudge(rules=rules, default="no"))
    metric.measure(tc)
    assert gold_score(metric.name, tc, {field: labels}) == pytest.approx(metric.score)


def test_a_strict_metric_gets_a_strict_gold_score_so_the_correction_compares_like_with_like():
    # labels [1, 0, 1] give precision (1 + 2/3) / 2 = 0.833; a strict metric scores 1 or 0, so its gold score is 0
    # (not 0.833), or the bias-corrected mean would report the strictness as the judge's bias
    from contextjudge import evaluate

    labelled = with_labels(_case(id="lab"), {"labels": [1, 0, 1]})
    metric = ContextualPrecisionMetric(model=FakeJudge(rules={"n1": "yes", "n2": "no", "n3": "yes"}, default="no"),
                                       strict_mode=True)
    result = evaluate([labelled], [metric], show_progress=False)
    m = result.test_results[0].metrics_data[0]
    assert m.score == 0.0
    assert m.gold_score == 0.0
    plain = evaluate([labelled], [ContextualPrecisionMetric(model=FakeJudge(rules={"n1": "yes", "n3": "yes"},
                                                                              default="no"))], show_progress=False)
    assert plain.test_results[0].metrics_data[0].gold_score == pytest.approx(5 / 6)

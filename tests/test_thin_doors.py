"""What the front doors used to work out themselves, callable from Python (issue 49): metric names read as keys
(``metrics.metric_keys``), the judge a ``--model`` means with its line (``engine.choose_judge``), and an app's run
over goldens made test cases (``capture.golden_cases``). The CLI and the MCP tools only print or return these."""

from __future__ import annotations

import pytest

from contextjudge import LLMTestCase
from contextjudge.capture import CapturedCase, GoldenFailure, golden_cases, retriever_names
from contextjudge.cases.goldens import Goldens
from contextjudge.cases.labels import labels_of, resolve_labels
from contextjudge.cases.provenance import RETRIEVER_KEY
from contextjudge.engine import choose_judge
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import metric_keys
from contextjudge.testing import FakeJudge


def test_metric_keys_reads_names_aliases_class_names_and_cut_offs():
    assert metric_keys(["precision, Recall", "ContextualPrecisionMetric", "Answer Relevancy", "NDCG@5"]) == [
        "contextual_precision", "contextual_recall", "answer_relevancy", "ndcg@5"]
    assert metric_keys(None, ["faithfulness"]) == metric_keys([" "], ["faithfulness"]) == ["faithfulness"]
    assert metric_keys("groundedness") == ["faithfulness"]
    with pytest.raises(ConfigurationError, match=r"unknown metric 'bogus'\. Choose from: .*contextual_precision"):
        metric_keys(["bogus"])
    with pytest.raises(ConfigurationError, match="only the ranking metrics"):
        metric_keys(["contextual_precision@3"])


def test_choose_judge_says_which_judge_and_why_the_default(monkeypatch):
    judge, line = choose_judge("fake")
    assert isinstance(judge, FakeJudge) and line.startswith("judge: FakeJudge, the scripted test double")
    judge, line = choose_judge("local")
    assert "the embedded offline judge (free, no API calls)" in line and "(no --model" not in line
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("CONTEXTJUDGE_MODEL", "local")
    _, line = choose_judge(None)
    assert line.endswith("(no --model: $CONTEXTJUDGE_MODEL; pass --model to choose)")


def test_golden_cases_keys_cases_by_golden_and_names_what_gave_nothing():
    goldens = Goldens([{"id": "g1", "input": "How many vacation days?", "expected_output": "25 days.",
                        "nodes": [{"text": "Employees get 25 days.", "useful": True}]},
                       {"id": "g2", "input": "When does parking open?"},
                       {"id": "g3", "input": "Who is the CEO?"}])
    captured = CapturedCase(test_case=LLMTestCase(input="How many vacation days?", actual_output="25.",
                                                  retrieval_context=["Employees get 25 days."],
                                                  additional_metadata={RETRIEVER_KEY: "hr"}), golden_id="g1")
    failed = GoldenFailure(goldens.items[1], 1, RuntimeError("down"))
    got = golden_cases(goldens, [captured, failed])
    assert [tc.id for tc in got.cases] == ["golden-g1", "golden-g2"]
    view, unused = resolve_labels(got.cases[0], labels_of(got.cases[0]))  # the golden's gold labels came to its case
    assert view["labels"] == [True] and unused == []
    assert got.failed == [failed] and [g.id for g in got.missing] == ["g3"]
    assert retriever_names(got.cases) == "hr" and retriever_names([]) is None


def test_the_llm_call_that_read_a_retrieval_is_the_first_whose_prompt_holds_a_document():
    from contextjudge.capture import prompt_snippets, reader_of  # noqa: PLC0415

    docs = ["  Employees get 25 vacation days per year.  ", "short", "The parking garage opens at 6am."]
    snippets = prompt_snippets(docs)
    assert snippets == ["Employees get 25 vacation days per year.", "The parking garage opens at 6am."]
    calls = [("rewrite", "Rewrite the question."), ("answer", "Context: The parking garage opens at 6am. Q: ...")]
    assert reader_of(calls, snippets, lambda c: c[1])[0] == "answer"
    assert reader_of(calls[:1], snippets, lambda c: c[1])[0] == "rewrite"  # none holds one: the first after it
    assert reader_of([], snippets, lambda c: c[1]) is None

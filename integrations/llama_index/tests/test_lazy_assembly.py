"""Test cases are assembled off the request path, from what the call's nodes were when it ran."""

from __future__ import annotations

import copy
import gc
import logging
import pickle
import threading

import pytest
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import ImageNode, NodeWithScore, TextNode

import contextjudge_llama_index as cj
from contextjudge.capture import CapturedCase
from contextjudge.capture._background import BackgroundScoring
from contextjudge.errors import CaptureError
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge_llama_index import _lazy_case, _record

QUESTION = "How many vacation days do employees get?"


class FreshRetriever(BaseRetriever):
    """Three new nodes on every call, so a test may change them without touching any other test's data."""

    def _retrieve(self, query_bundle):
        texts = ["Employees get 25 vacation days per year.", "Contractors invoice monthly.",
                 "The office opens at 8am."]
        return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"rank": i}), score=1.0 - i / 10)
                for i, t in enumerate(texts)]


class RewriteAndReverse(BaseNodePostprocessor):
    """Changes the retrieved nodes in place (text, metadata, score), then reverses them, as some postprocessors do."""

    @classmethod
    def class_name(cls) -> str:
        return "RewriteAndReverse"

    def _postprocess_nodes(self, nodes, query_bundle=None):
        for n in nodes:
            n.node.set_content(n.node.get_content() + " (rewritten)")
            n.node.metadata["rank"] = "changed"
            n.score = 0.0
        return list(reversed(nodes))


def _counting_assembly(monkeypatch) -> list[str]:
    """Record the thread each test case is assembled on."""
    threads: list[str] = []
    real = _lazy_case.record_to_case

    def counted(record):
        threads.append(threading.current_thread().name)
        return real(record)

    monkeypatch.setattr(_lazy_case, "record_to_case", counted)
    return threads


def test_nodes_changed_after_retrieval_are_recorded_as_retrieved(llm):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm, node_postprocessors=[RewriteAndReverse()])
    response = engine.query(QUESTION)
    for n in response.source_nodes:  # the app changes the nodes after the call: the case keeps them as they were
        n.node.set_content("changed by the app")
        n.node.metadata["rank"] = "app"
        n.score = -1.0

    [case] = scorer.cases
    tc = case.test_case  # assembled only now
    retrieved = tc.additional_metadata["retriever_ranking"]
    assert [n["id"] for n in retrieved] == ["n0", "n1", "n2"]
    assert retrieved[0]["text"] == "Employees get 25 vacation days per year."
    assert [n["metadata"] for n in retrieved] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
    assert [n["score"] for n in retrieved] == [1.0, 0.9, 0.8]
    assert tc.additional_metadata["reranked"] is True
    # the list that went to the LLM: as the postprocessor left it, not as the app changed it afterwards
    assert [n.id for n in tc.retrieval_context] == ["n2", "n1", "n0"]
    assert tc.retrieval_context[2].text == "Employees get 25 vacation days per year. (rewritten)"
    assert {n.metadata["rank"] for n in tc.retrieval_context} == {"changed"}
    assert {n.score for n in tc.retrieval_context} == {0.0}


def test_assembly_happens_off_the_request_path_once(llm, monkeypatch):
    threads = _counting_assembly(monkeypatch)
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None,
                           goldens=[{"id": "g-1", "input": QUESTION, "expected_output": "25 vacation days a year."}])
    engine = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm)
    engine.query(QUESTION)
    [case] = scorer.cases
    assert threads == [], "nothing is assembled while the app's call runs"
    assert case.test_case.expected_output == "25 vacation days a year."  # goldens matched at assembly
    assert case.golden_id == "g-1"
    assert scorer.test_cases[0] is case.test_case
    assert threads == [threading.current_thread().name], "assembled once, by the first reader"


def test_background_mode_assembles_on_the_scorer_thread(llm, judge, monkeypatch):
    threads = _counting_assembly(monkeypatch)
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge), ContextualPrecisionMetric(model=judge)],
                           goldens=[{"input": QUESTION, "expected_output": "25 vacation days a year."}])
    engine = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm)
    engine.query(QUESTION)
    assert scorer.flush(10)
    assert threads == ["contextjudge-loop"]  # the process-wide loop the scorer runs on, not the app's thread
    [case] = scorer.cases
    assert {r.name for r in case.results} == {"Contextual Relevancy", "Contextual Precision"}  # golden applied
    assert case.test_case.expected_output == "25 vacation days a year."


def test_image_node_changed_after_the_call_keeps_its_image(llm):
    image = ImageNode(text="The Eiffel Tower at night.", image_url="https://example.com/e.jpg", id_="img-1")

    class OnePhoto(BaseRetriever):
        def _retrieve(self, query_bundle):
            return [NodeWithScore(node=image, score=0.9)]

    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    RetrieverQueryEngine.from_args(OnePhoto(), llm=llm).query("Which landmark is in the photo?")
    image.image_url = "https://example.com/other.jpg"
    image.metadata["caption"] = "changed"
    [node] = scorer.test_cases[0].retrieval_context
    assert node.images and "https://example.com/e.jpg" in str(node.images[0].url)
    assert "caption" not in node.metadata


def test_a_captured_case_copies_and_pickles_as_a_plain_captured_case(llm):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm).query(QUESTION)
    [case] = scorer.cases
    for other in (copy.copy(case), pickle.loads(pickle.dumps(case))):
        assert type(other) is CapturedCase
        assert other == case and case == other
        assert other.case_id == case.case_id and other.test_case.input == QUESTION
    assert "test_case=LLMTestCase(" in repr(case)


def test_a_case_that_fails_to_assemble_is_logged_and_dropped_when_read(llm, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("injected assembly failure")

    monkeypatch.setattr(_record, "to_nodes", boom)
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    response = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm).query(QUESTION)
    assert str(response) == "Employees get 25 vacation days per year."
    [case] = scorer.cases
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        assert scorer.test_cases == []
    assert "injected assembly failure" in caplog.text
    assert scorer.cases == []
    assert "capture failed" in repr(case)
    with pytest.raises(CaptureError):
        _ = case.test_case


def test_text_replaced_in_place_by_a_postprocessor_is_what_is_scored(llm):
    """A sentence-window postprocessor swaps each node's text for its window, in place: the LLM sees the window."""

    class Window(BaseNodePostprocessor):
        @classmethod
        def class_name(cls) -> str:
            return "Window"

        def _postprocess_nodes(self, nodes, query_bundle=None):
            for n in nodes:
                n.node.set_content(f"Before. {n.node.get_content()} After.")
            return nodes

    scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    response = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm, node_postprocessors=[Window()]).query(QUESTION)
    tc = scorer.test_cases[0]
    assert [n.text for n in tc.retrieval_context] == [n.node.get_content() for n in response.source_nodes]
    assert tc.retrieval_context[0].text == "Before. Employees get 25 vacation days per year. After."
    assert [n.id for n in tc.retrieval_context] == ["n0", "n1", "n2"]


def test_background_cases_reach_the_worker_in_one_batch_and_flush_does_not_wait_for_it(llm, judge, monkeypatch):
    wakes: list[int] = []
    real = BackgroundScoring.schedule_wake

    def counted(self):
        wakes.append(len(self._queue))
        real(self)

    monkeypatch.setattr(BackgroundScoring, "schedule_wake", counted)
    scorer = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge)], handoff_delay=60.0)
    engine = RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm)
    for _ in range(5):
        engine.query(QUESTION)
    # kept at once; the worker's wake-up scheduled once, for the whole batch, 60 s out
    assert len(scorer.cases) == 5 and wakes == [1] and scorer.pending == 5
    assert scorer.flush(10), "flush hands the batch over without waiting for its delay"
    assert all(c.results for c in scorer.cases)


def test_a_case_read_after_its_scorer_is_dropped_still_gets_its_golden(llm):
    scorer = cj.instrument(metrics=[], mode="off", max_kept=None, goldens=[{"input": QUESTION, "expected_output": "25 days."}])
    RetrieverQueryEngine.from_args(FreshRetriever(), llm=llm).query(QUESTION)
    cases = scorer.cases
    cj.uninstrument()
    del scorer
    gc.collect()
    assert cases[0].test_case.expected_output == "25 days."

"""The app adapter `contextjudge eval --app` uses: runs goldens through an engine with capture in mode "off"."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import contextjudge_llama_index as cj
from contextjudge.capture import GoldenFailure
from contextjudge.cases.provenance import app_error_of
from contextjudge.goldens import load_goldens

GOLDENS = [
    {"id": "g1", "input": "How many vacation days do employees get per year?",
     "expected_output": "Employees get 25 vacation days per year."},
    {"id": "g2", "input": "When must expense reports be filed?", "expected_output": "Within 30 days of purchase."},
    {"input": "Who do I report lost laptops to?", "expected_output": "Security, within one hour."},
]


def _adapter():
    [ep] = [e for e in entry_points(group="contextjudge.apps") if e.name == "llama_index"]
    return ep.load()


def test_entry_point_is_registered_and_matches_llama_index_objects(index, llm):
    adapter = _adapter()
    assert adapter.name == "llama_index"
    assert adapter.matches(index.as_query_engine(llm=llm))
    assert adapter.matches(index.as_chat_engine(chat_mode="context", llm=llm))
    assert adapter.matches(index.as_retriever())
    assert adapter.matches(cj.EvaluatedQueryEngine(index.as_query_engine(llm=llm), metrics=[], mode="off", max_kept=None))
    assert not adapter.matches(object())
    assert not adapter.matches(lambda q: q)


def test_collect_runs_every_golden_through_a_query_engine(index, llm, judge):
    global_scorer = cj.instrument(metrics=[], mode="off", max_kept=None)
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    cases = _adapter().collect(engine, load_goldens(GOLDENS), concurrency=3)
    assert [c.test_case.input for c in cases] == [g["input"] for g in GOLDENS]
    assert [c.test_case.expected_output for c in cases] == [g["expected_output"] for g in GOLDENS]
    assert [c.golden_id for c in cases] == ["g1", "g2", None]
    assert all(c.test_case.retrieval_context and c.test_case.actual_output for c in cases)
    assert all(c.results == [] for c in cases), "mode off: capture only"
    assert global_scorer.cases == [], "the run's calls do not leak into the global capture"


def test_collect_with_a_chat_engine_and_a_retriever(index, llm):
    chat = index.as_chat_engine(chat_mode="condense_plus_context", llm=llm, similarity_top_k=2)
    cases = _adapter().collect(chat, GOLDENS)
    assert [c.test_case.input for c in cases] == [g["input"] for g in GOLDENS]  # fresh session each: no rewrite
    assert cases[0].test_case.actual_output == "Employees get 25 vacation days per year."
    retrieved = _adapter().collect(index.as_retriever(similarity_top_k=2), GOLDENS)
    assert len(retrieved) == 3 and all(c.test_case.actual_output is None for c in retrieved)


def test_a_failing_golden_is_an_error_case_and_progress_is_called_per_golden(index, llm):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    original = engine.query

    def query(q):
        if "expense" in str(q):
            raise RuntimeError("down")
        return original(q)

    engine.query = query
    ticks = []
    got = _adapter().collect(engine, GOLDENS, concurrency=2, progress=lambda: ticks.append(1))
    assert len(ticks) == 3
    assert [isinstance(c, GoldenFailure) for c in got] == [False, True, False]
    failure = got[1]
    assert isinstance(failure, GoldenFailure) and failure.index == 1 and str(failure.error) == "down"
    tc = failure.test_case()
    assert tc.input == GOLDENS[1]["input"] and app_error_of(tc) == {"type": "RuntimeError", "message": "down"}


def test_accepts_says_what_it_runs():
    assert "FunctionAgent" in _adapter().accepts and "query engine" in _adapter().accepts


def test_importing_the_package_does_not_import_llama_index():
    code = ("import sys, contextjudge_llama_index, contextjudge_llama_index._adapter as a; "
            "assert a.adapter.name == 'llama_index'; print('llama_index.core' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "False"


def test_public_names():
    assert cj.__all__ == sorted(cj.__all__)
    for name in cj.__all__:
        assert getattr(cj, name) is not None

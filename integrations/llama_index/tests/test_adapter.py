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


# ---------------------------------------------------------------------------------------------- agents and workflows
AGENT_GOLDENS = [
    {"id": "pto", "input": "Hi! How many vacation days do I get?", "expected_output": "25 days a year."},
    {"id": "broken", "input": "Make the model fail", "expected_output": "-"},
    {"id": "hello", "input": "Hello!", "expected_output": "Hi."},
    {"id": "laptop", "input": "I lost my laptop, what now?", "expected_output": "Tell security within an hour."},
]
AGENT_SCRIPT = {
    "Hi! How many vacation days do I get?": [[("policy_search", {"input": "vacation days employees"})],
                                             "You get 25 vacation days a year."],
    "Hello!": ["Hi! Ask me about HR policies."],  # no tool call: no retrieval
    "I lost my laptop, what now?": [[("policy_search", {"input": "lost laptops"})],
                                    "Report it to security within one hour."],
}


def _scripted(user, results):
    if user == "Make the model fail":
        raise RuntimeError("the model is down")
    steps = AGENT_SCRIPT.get(user, ["I don't know."])
    return steps[0] if not results and not isinstance(steps[0], str) else steps[-1]


def build_agent(index=None, llm=None):
    """The agent the CLI test loads with --app module:build_agent()."""
    import warnings

    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import QueryEngineTool

    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding, ScriptedAgentLLM

    warnings.simplefilter("ignore")
    if index is None:
        from conftest import DOCS  # noqa: PLC0415

        docs = [Document(text=text, id_=doc_id, metadata={"topic": doc_id}) for doc_id, text in DOCS]
        index = VectorStoreIndex.from_documents(docs, embed_model=KeywordEmbedding())
    engine = index.as_query_engine(llm=llm or ExtractiveLLM(), similarity_top_k=2)
    tool = QueryEngineTool.from_defaults(engine, name="policy_search", description="Search the HR policies.")
    return FunctionAgent(tools=[tool], llm=ScriptedAgentLLM(_scripted), name="hr")


def test_collect_runs_goldens_through_a_function_agent(index, llm):
    agent = build_agent(index, llm)
    assert _adapter().matches(agent)
    ticks = []
    got = _adapter().collect(agent, AGENT_GOLDENS, concurrency=3, progress=lambda: ticks.append(1))
    assert len(ticks) == 4
    assert [(c.index if isinstance(c, GoldenFailure) else c.metadata["golden_index"]) for c in got] == [0, 1, 2, 3]
    pto, broken, hello, laptop = got
    assert pto.test_case.input == AGENT_GOLDENS[0]["input"]
    assert pto.test_case.actual_output == "You get 25 vacation days a year."
    assert pto.test_case.expected_output == "25 days a year." and pto.golden_id == "pto"
    assert pto.test_case.additional_metadata["agent"]["tool_input"] == "vacation days employees"
    assert pto.test_case.retrieval_context[0].metadata["topic"] == "vacation"
    assert isinstance(broken, GoldenFailure) and "the model is down" in str(broken.error)
    # a golden whose run retrieved nothing is still a case (its context metrics then say what is missing)
    assert hello.test_case.retrieval_context is None and hello.test_case.actual_output.startswith("Hi!")
    assert hello.golden_id == "hello"
    assert laptop.test_case.retrieval_context[0].metadata["topic"] == "security"


async def test_collect_from_inside_a_running_loop_with_a_workflow(index, llm):
    from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step

    engine = index.as_query_engine(llm=llm, similarity_top_k=2)

    class Ask(StartEvent):
        question: str

    class RagFlow(Workflow):
        @step
        async def answer(self, ev: Ask) -> StopEvent:
            if "fail" in ev.question:
                raise ValueError("bad question")
            return StopEvent(result=str(await engine.aquery(ev.question)))

    goldens = [GOLDENS[0], {"input": "please fail", "expected_output": "-"}]
    got = _adapter().collect(RagFlow(timeout=30), goldens)
    assert got[0].test_case.input == GOLDENS[0]["input"]
    assert got[0].test_case.actual_output == "Employees get 25 vacation days per year."
    assert got[0].test_case.additional_metadata["agent"]["tool"] == "answer"
    assert isinstance(got[1], GoldenFailure) and "bad question" in str(got[1].error)


def test_an_object_the_adapter_cannot_run_gets_an_error_naming_it(index):
    import pytest

    from contextjudge.errors import ConfigurationTypeError

    with pytest.raises(ConfigurationTypeError, match="builtins.object is not something"):
        _adapter().collect(object(), GOLDENS)


def test_cli_eval_runs_an_agent_and_a_failing_golden_exits_non_zero(tmp_path, monkeypatch, capsys):
    import json
    import shutil
    from pathlib import Path

    from contextjudge.cli import main

    here = Path(__file__).parent
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "agentapp.py").write_text(
        f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom test_adapter_app import build_agent\n"
        "agent = build_agent()\n")
    shutil.copy(Path(__file__), tmp_path / "test_adapter_app.py")
    goldens = tmp_path / "goldens.jsonl"
    goldens.write_text("".join(json.dumps(g) + "\n" for g in AGENT_GOLDENS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["eval", "--app", "agentapp:agent", "--goldens", str(goldens), "--model", "fake",
                 "--store", str(tmp_path / "r.db"), "--no-progress", "--metrics", "contextual_relevancy"])
    out = capsys.readouterr()
    assert code != 0, out.out
    assert "the model is down" in out.out + out.err

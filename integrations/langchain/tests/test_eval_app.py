"""``contextjudge eval --app`` on a LangChain agent: the adapter runs graphs and agents, reports progress per golden,
and turns a golden whose call raised into an error case (in goldens order), which makes ``eval`` exit non-zero."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("langchain.agents", reason="agent capture tests need the langchain package (pip install langchain)")
pytest.importorskip("langgraph", reason="agent capture tests need langgraph (pip install langgraph)")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools.retriever import create_retriever_tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from contextjudge.capture import CapturedCase, GoldenFailure  # noqa: E402
from contextjudge.cases.provenance import agent_of, app_error_of  # noqa: E402
from contextjudge_langchain._adapter import LangChainAppAdapter, adapter, golden_input  # noqa: E402
from contextjudge_langchain.testing import ScriptedAgentModel  # noqa: E402

AGENT_MODULE = '''
"""An HR agent as a user would write it: create_agent, a retriever tool, an offline scripted model."""
import json
from importlib.resources import files

from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.tools.retriever import create_retriever_tool
from langchain_core.vectorstores import InMemoryVectorStore

from contextjudge_langchain.testing import BagOfWordsEmbeddings, ScriptedAgentModel

docs = json.loads((files("contextjudge") / "data/demo_corpus/docs.json").read_text("utf-8"))["documents"]
store = InMemoryVectorStore(BagOfWordsEmbeddings())
store.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"]}) for d in docs])
search = create_retriever_tool(store.as_retriever(search_kwargs={"k": 3}), "search_policies",
                               "Search the company's policies.")


def plan(message):
    if "crash" in message:
        raise RuntimeError("the model provider is down")
    return [("search_policies", {"query": message})]


agent = create_agent(ScriptedAgentModel(plan=plan), [search], name="hr_agent")
'''


def plan(message: str):
    if "crash" in message:
        raise RuntimeError("the model provider is down")
    return [("search_policies", {"query": message})]


@pytest.fixture()
def agent(retriever):
    tool = create_retriever_tool(retriever, "search_policies", "Search the company's policies.")
    return create_agent(ScriptedAgentModel(plan=plan), [tool], name="hr_agent")


def test_adapter_accepts_graphs_and_agents(agent):
    assert adapter.matches(agent) and "create_agent" in LangChainAppAdapter.accepts
    assert "LangGraph" in LangChainAppAdapter.accepts
    assert golden_input(agent, "How many PTO days?") == {"messages": [{"role": "user",
                                                                        "content": "How many PTO days?"}]}


def test_collect_returns_cases_and_failures_in_goldens_order(agent, goldens):
    picked = [goldens[0], {"id": "boom", "input": "please crash now"}, goldens[4], goldens[14]]
    ticks: list[int] = []
    out = adapter.collect(agent, picked, concurrency=3, progress=lambda: ticks.append(1))
    assert len(ticks) == len(picked)  # once per golden finished, failed or not
    assert [type(x).__name__ for x in out] == ["CapturedCase", "GoldenFailure", "CapturedCase", "CapturedCase"]
    assert [x.golden.id if isinstance(x, GoldenFailure) else x.golden_id for x in out] == ["g01", "boom", "g05",
                                                                                              "g15"]
    failure = out[1]
    assert isinstance(failure.error, RuntimeError) and failure.index == 1
    error_case = failure.test_case()
    assert app_error_of(error_case)["message"] == "the model provider is down"
    for x, g in zip((out[0], out[2], out[3]), (goldens[0], goldens[4], goldens[14]), strict=True):
        assert isinstance(x, CapturedCase)
        tc = x.test_case
        assert tc.input == g["input"] and tc.expected_output == g["expected_output"] and tc.actual_output
        assert agent_of(tc)["tool"] == "search_policies" and tc.retrieval_context


def test_collect_gives_a_checkpointed_agent_one_thread_per_golden(retriever, goldens):
    tool = create_retriever_tool(retriever, "search_policies", "Search the company's policies.")
    agent = create_agent(ScriptedAgentModel(), [tool], checkpointer=InMemorySaver())  # needs a thread_id per call
    out = adapter.collect(agent, goldens[:3])
    assert [x.golden_id for x in out] == ["g01", "g02", "g03"]
    assert len({agent_of(x.test_case)["thread_id"] for x in out}) == 3  # no golden sees another's history


def _write_app(tmp_path, monkeypatch, goldens, extra=()):
    (tmp_path / "hr_agent_app.py").write_text(textwrap.dedent(AGENT_MODULE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "goldens.jsonl"
    path.write_text("\n".join(json.dumps(g) for g in [*goldens, *extra]), encoding="utf-8")
    return path


def test_cli_eval_runs_an_agent_and_a_failing_golden_is_an_error(tmp_path, monkeypatch, goldens, capsys):
    from contextjudge.cli import main

    path = _write_app(tmp_path, monkeypatch, goldens[:3], [{"id": "broken", "input": "please crash now"}])
    db = tmp_path / "results.db"
    code = main(["eval", "--app", "hr_agent_app:agent", "--goldens", str(path), "--model", "fake",
                 "--store", str(db), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 3, out  # a golden whose app call raised: an error case, and the gate fails
    assert "the model provider is down" in out and "please crash now" in out

    code = main(["eval", "--app", "hr_agent_app:agent", "--goldens", str(path), "--model", "fake",
                 "--store", str(tmp_path / "allowed.db"), "--no-progress", "--allow-errors"])
    assert code in (0, 1)  # the errors are allowed; the scored cases decide


def test_cli_eval_agent_with_the_local_judge(tmp_path, monkeypatch, goldens, capsys):
    from contextjudge.cli import main

    path = _write_app(tmp_path, monkeypatch, goldens[:4])
    db = tmp_path / "results.db"
    code = main(["eval", "--app", "hr_agent_app:agent", "--goldens", str(path), "--model", "local",
                 "--store", str(db), "--no-progress"])
    out = capsys.readouterr().out
    assert code in (0, 1), out  # no error case: every golden matched its agent case (on the user's message)
    for name in ("Contextual Precision", "Contextual Recall"):
        assert name in out
    assert "0 with an error" in out


def test_cli_eval_goldens_with_chunk_ids_give_ranking_metrics_without_a_judge(tmp_path, monkeypatch, goldens, capsys):
    """A golden file whose rows name the chunks that should come back (``relevant_ids``): hit rate, MRR and NDCG in
    the printed summary, the store and the HTML report, and no judge anywhere."""
    from contextjudge.cli import main
    from contextjudge.store import open_store

    monkeypatch.delenv("CONTEXTJUDGE_MODEL", raising=False)
    path = _write_app(tmp_path, monkeypatch, goldens[:4])
    db, report = tmp_path / "results.db", tmp_path / "report.html"
    code = main(["eval", "--app", "hr_agent_app:agent", "--goldens", str(path), "--metrics", "hit_rate,mrr,ndcg@3",
                 "--store", str(db), "--report", str(report), "--no-progress"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    for name in ("Hit Rate", "MRR", "NDCG@3"):
        assert name in out and name in report.read_text()
    rows = list(open_store(str(db), read_only=True).results())
    assert len(rows) == 12 and all(r["judge"] is None and r["error"] is None for r in rows)
    by_golden = {(r["metric"], r["case_key"]): r["score"] for r in rows}
    assert any(s == 1.0 for (m, _), s in by_golden.items() if m == "Hit Rate")

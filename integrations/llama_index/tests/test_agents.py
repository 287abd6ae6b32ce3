"""Agent-aware capture: a retrieval inside an agent's tool call is a case of the user's message and the agent's answer.

Real LlamaIndex agents (FunctionAgent, ReActAgent, AgentWorkflow) and workflows, driven by a scripted function-calling
model (``ScriptedAgentLLM``), over the real index of the shared fixtures.
"""

from __future__ import annotations

import warnings

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.tools import FunctionTool, QueryEngineTool
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step

import contextjudge_llama_index as cj
from contextjudge import ConversationalTestCase, LLMTestCase
from contextjudge.cases.provenance import agent_of, match_inputs_of, short
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge_llama_index.testing import ScriptedAgentLLM

USER = "Hi! I'm new here. How many vacation days do I get?"
FINAL = "Welcome! You get 25 vacation days a year."
SCRIPT = {
    USER: [[("policy_search", {"input": "vacation days employees"})], FINAL],
    "Do contractors get vacation, and when does the office open?": [
        [("policy_search", {"input": "contractors vacation"})],
        [("policy_search", {"input": "office opening hours"})],
        "Contractors get no paid vacation; the office opens at 8am.",
    ],
    "And what about remote work?": [[("policy_search", {"input": "remote work days"})], "Two days a week."],
}


@pytest.fixture(autouse=True)
def _quiet_workflows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the workflow runtime warns about unserializable context keys
        yield


def _tool(index, llm, **kw):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2, **kw)
    return QueryEngineTool.from_defaults(engine, name="policy_search", description="Search the HR policies.")


def _session(**kw):
    return cj.instrument(metrics=[], mode="off", max_kept=None, **kw)


async def test_function_agent_case_carries_the_users_message_and_the_final_answer(index, llm):
    session = _session()
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT), name="hr")
    answer = await agent.run(user_msg=USER)
    assert str(answer) == FINAL
    [case] = session.ready_cases()
    tc = case.test_case
    assert isinstance(tc, LLMTestCase)
    assert tc.input == USER and tc.actual_output == FINAL
    assert tc.retrieval_context[0].metadata["topic"] == "vacation"
    assert agent_of(tc) == {"tool": "policy_search", "tool_input": "vacation days employees",
                            "tool_output": "Employees get 25 vacation days per year.", "call": 1, "agent": "hr",
                            "framework": "llama_index"}
    assert tc.name == f"policy_search: {USER}"
    assert "vacation days employees" in match_inputs_of(tc)


async def test_two_tool_calls_in_one_run_give_two_cases(index, llm):
    session = _session()
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT))
    q = "Do contractors get vacation, and when does the office open?"
    await agent.run(user_msg=q)
    cases = [c.test_case for c in session.ready_cases()]
    assert len(cases) == 2
    assert {tc.input for tc in cases} == {q}
    assert {tc.actual_output for tc in cases} == {"Contractors get no paid vacation; the office opens at 8am."}
    by_call = {agent_of(tc)["call"]: tc for tc in cases}
    assert by_call[1].name == f"policy_search: {short(q, 60)}"
    assert by_call[2].name.startswith("policy_search #2: ")
    assert agent_of(by_call[1])["tool_input"] == "contractors vacation"
    assert agent_of(by_call[2])["tool_input"] == "office opening hours"
    assert by_call[2].retrieval_context[0].metadata["topic"] == "office"


async def test_parallel_tool_calls_and_a_retriever_function_tool_in_an_agent_workflow(index, llm):
    session = _session()
    retriever = index.as_retriever(similarity_top_k=2)

    def search_docs(query: str) -> str:
        """Search the HR documents."""
        return "\n".join(n.get_content() for n in retriever.retrieve(query))

    script = {"Expenses and laptops?": [[("search_docs", {"query": "expense reports"}),
                                         ("policy_search", {"input": "lost laptops security"})],
                                        "File expenses in 30 days; report lost laptops within an hour."]}
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(search_docs), _tool(index, llm)],
                          llm=ScriptedAgentLLM(script), name="helpdesk", description="Answers staff questions.")
    workflow = AgentWorkflow(agents=[agent])
    await workflow.run(user_msg="Expenses and laptops?")
    cases = {agent_of(c.test_case)["tool"]: c.test_case for c in session.ready_cases()}
    assert set(cases) == {"search_docs", "policy_search"}
    for tc in cases.values():
        assert tc.input == "Expenses and laptops?"
        assert tc.actual_output == "File expenses in 30 days; report lost laptops within an hour."
        assert agent_of(tc)["agent"] == "helpdesk"
    docs = cases["search_docs"]
    assert docs.retrieval_context[0].metadata["topic"] == "expenses"
    assert agent_of(docs)["tool_input"] == "expense reports"
    assert agent_of(docs)["tool_output"].startswith("Expense reports must be filed")
    assert sorted(agent_of(tc)["call"] for tc in cases.values()) == [1, 2]


async def test_react_agent(index, llm):
    session = _session()
    agent = ReActAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT, react=True))
    answer = await agent.run(user_msg=USER)
    assert str(answer) == FINAL
    [case] = session.ready_cases()
    tc = case.test_case
    assert tc.input == USER and tc.actual_output == FINAL
    assert agent_of(tc)["tool"] == "policy_search" and agent_of(tc)["tool_input"] == "vacation days employees"
    assert tc.retrieval_context[0].metadata["topic"] == "vacation"


async def test_goldens_match_the_users_message_or_the_tools_query(index, llm):
    goldens = [{"id": "pto", "input": USER, "expected_output": "25 days."},
               {"id": "office", "input": "office opening hours", "expected_output": "8am on weekdays."}]
    session = _session(goldens=goldens)
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT))
    await agent.run(user_msg=USER)
    await agent.run(user_msg="Do contractors get vacation, and when does the office open?")
    got = {(agent_of(c.test_case)["tool_input"], c.golden_id, c.test_case.expected_output)
           for c in session.ready_cases()}
    assert got == {("vacation days employees", "pto", "25 days."),
                   ("contractors vacation", None, None),
                   ("office opening hours", "office", "8am on weekdays.")}


async def test_a_golden_id_tag_names_the_golden(index, llm):
    session = _session(goldens=[{"id": "g-17", "input": "something else", "expected_output": "25"}])
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT))
    with cj.instrument_tags(golden_id="g-17"):
        await agent.run(user_msg=USER)
    [case] = session.ready_cases()
    assert case.golden_id == "g-17" and case.test_case.expected_output == "25"


async def test_an_agent_run_that_raises_gives_no_case(index, llm):
    session = _session()

    def boom(user, results):
        if results:
            raise RuntimeError("the model is down")
        return [("policy_search", {"input": "vacation"})]

    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(boom))
    with pytest.raises(Exception, match="the model is down"):
        await agent.run(user_msg=USER)
    assert session.ready_cases() == []
    # and the next run is captured as usual
    await FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT)).run(user_msg=USER)
    assert len(session.ready_cases()) == 1


async def test_runs_sharing_a_memory_form_a_conversation(index, llm, judge):
    from contextjudge.metrics import TurnContextualRelevancyMetric

    session = cj.instrument(metrics=[TurnContextualRelevancyMetric(model=judge)], mode="off", max_kept=None)
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT))
    memory = ChatMemoryBuffer.from_defaults()
    await agent.run(user_msg=USER, memory=memory)
    await agent.run(user_msg="And what about remote work?", memory=memory)
    await agent.run(user_msg=USER)  # no memory: not part of it
    assert session.flush(10)
    cases = session.ready_cases()
    convs = [c.test_case for c in cases if isinstance(c.test_case, ConversationalTestCase)]
    assert len(cases) == 4 and len(convs) == 1  # three single-turn agent cases, one conversation
    [conv] = convs
    assert [t.content for t in conv.turns] == [USER, FINAL, "And what about remote work?", "Two days a week."]
    assert conv.turns[1].retrieval_context[0].metadata["topic"] == "vacation"
    assert conv.turns[3].retrieval_context[0].metadata["topic"] == "remote"
    assert conv.turns[3].additional_metadata["tool_calls"][0]["tool_input"] == "remote work days"
    assert session.flush(60) and len(session.ready_cases()) == 4  # not submitted again without new turns
    scored = session.score_deferred()
    turn_results = [tr for tr in scored.test_results if tr.metrics_data
                    and tr.metrics_data[0].name == "Turn Contextual Relevancy"]
    assert len(turn_results) == 1 and turn_results[0].metrics_data[0].error is None


async def test_a_context_reused_with_a_conversation_id_tag_is_one_conversation(index, llm):
    session = _session()
    agent = FunctionAgent(tools=[_tool(index, llm)], llm=ScriptedAgentLLM(SCRIPT))
    ctx = Context(agent)
    with cj.instrument_tags(conversation_id="user-42"):
        await agent.run(user_msg=USER, ctx=ctx)
        await agent.run(user_msg="And what about remote work?", ctx=ctx)
    session.flush(10)
    [conv] = [c for c in session.ready_cases() if isinstance(c.test_case, ConversationalTestCase)]
    assert len(conv.test_case.turns) == 4 and conv.metadata["session_id"] == "user-42"


async def test_a_workflow_step_that_queries_an_engine(index, llm):
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)

    class RagFlow(Workflow):
        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            response = await engine.aquery(f"{ev.query} (employees)")
            return StopEvent(result=f"In short: {response}")

    session = _session()
    result = await RagFlow(timeout=30).run(query="vacation days")
    [case] = session.ready_cases()
    tc = case.test_case
    assert tc.input == "vacation days" and tc.actual_output == result
    assert agent_of(tc)["tool"] == "answer" and agent_of(tc)["tool_input"] == "vacation days (employees)"


async def test_a_postprocessor_that_leaves_no_node_gives_an_empty_context(index, llm, judge):
    session = cj.instrument(metrics=[ContextualRelevancyMetric(model=judge), ContextualPrecisionMetric(model=judge)],
                            mode="off", max_kept=None,
                            goldens=[{"input": "How many vacation days do employees get?", "expected_output": "25"},
                                     {"input": USER, "expected_output": "25"}])
    engine = index.as_query_engine(llm=llm, similarity_top_k=2,
                                   node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.999)])
    engine.query("How many vacation days do employees get?")
    agent = FunctionAgent(tools=[QueryEngineTool.from_defaults(engine, name="policy_search", description="HR")],
                          llm=ScriptedAgentLLM(SCRIPT))
    await agent.run(user_msg=USER)
    cases = session.ready_cases()
    assert len(cases) == 2
    for case in cases:
        tc = case.test_case
        assert tc.retrieval_context == []  # what the LLM saw: nothing
        ranking = tc.additional_metadata["retriever_ranking"]
        assert [n["metadata"]["topic"] for n in ranking][:1] == ["vacation"]  # the retriever's ranking is kept beside it
    result = session.score_deferred()
    for tr in result.test_results:
        for m in tr.metrics_data:
            assert m.error is None and m.score == 0.0, m  # the empty-context rule: 0 with a reason, no crash
            assert m.reason


def test_non_agent_query_capture_is_unchanged(index, llm):
    session = _session()
    index.as_query_engine(llm=llm, similarity_top_k=2).query("How many vacation days do employees get?")
    [case] = session.ready_cases()
    tc = case.test_case
    assert tc.input == "How many vacation days do employees get?"
    assert tc.actual_output == "Employees get 25 vacation days per year."
    assert agent_of(tc) is None and tc.name == tc.input  # named after its question, as LangChain cases are


def test_instrument_tags_is_importable_and_tags_a_golden(index, llm):
    from contextjudge_llama_index import instrument_tags

    session = _session(goldens=[{"id": "g-1", "input": "unrelated", "expected_output": "25 days"}])
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    with instrument_tags(golden_id="g-1"):
        engine.query("How many vacation days do employees get?")
    with instrument_tags({"golden_id": "g-1"}):  # the dict form of LlamaIndex's own instrument_tags
        engine.query("How many vacation days do employees get?")
    engine.query("How many vacation days do employees get?")
    cases = session.ready_cases()
    assert [c.golden_id for c in cases] == ["g-1", "g-1", None]
    assert cases[0].test_case.expected_output == "25 days"

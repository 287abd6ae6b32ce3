"""Agent-aware capture: a real ``create_agent`` agent and real LangGraph graphs, driven by the scripted model.

A retrieval inside an agent's tool gives a case whose input is the user's message and whose output is the agent's
final answer, with the tool's name, query and answer beside them; each tool call of a turn gives its own case; a
retriever in a graph node gives a case named after the node; a thread gives a conversation for the turn metrics.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langchain.agents", reason="agent capture tests need the langchain package (pip install langchain)")
pytest.importorskip("langgraph", reason="agent capture tests need langgraph (pip install langgraph)")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.tools.retriever import create_retriever_tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from contextjudge import ConversationalTestCase, LLMTestCase  # noqa: E402
from contextjudge.cases.provenance import agent_of  # noqa: E402
from contextjudge.metrics import TurnContextualRelevancyMetric  # noqa: E402
from contextjudge_langchain import ContextJudgeCallbackHandler  # noqa: E402
from contextjudge_langchain.testing import ExtractiveChatModel, ScriptedAgentModel  # noqa: E402

PTO = "Hi! I'm new here. How many days of PTO do I get?"


def off(**kwargs) -> ContextJudgeCallbackHandler:
    return ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None, **kwargs)


def ask(agent, text: str, handler, **config):
    return agent.invoke({"messages": [{"role": "user", "content": text}]},
                        config={"callbacks": [handler], **config})


@pytest.fixture()
def search_tool(retriever):
    return create_retriever_tool(retriever, "search_policies", "Search the company's HR and IT policies.")


def test_create_agent_case_has_the_users_message_and_the_final_answer(search_tool):
    model = ScriptedAgentModel(plan=lambda user: [("search_policies", {"query": "paid time off days per year"})])
    agent = create_agent(model, [search_tool], name="hr_assistant")
    handler = off()
    out = ask(agent, PTO, handler)
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and not final.tool_calls and "25 days" in final.content

    [case] = handler.cases
    tc = case.test_case
    assert isinstance(tc, LLMTestCase)
    assert tc.input == PTO  # the user's message, not the tool's query
    assert tc.actual_output == final.content  # the agent's final answer, not the tool's output
    assert tc.retrieval_context[0].id == "pto-001"
    assert tc.name == f"search_policies: {PTO}"
    agent_meta = agent_of(tc)
    assert agent_meta["tool"] == "search_policies" and agent_meta["call"] == 1
    assert agent_meta["tool_input"] == "paid time off days per year"
    assert agent_meta["tool_output"].startswith("Full-time employees accrue 25 days")  # the tool's own answer
    assert agent_meta["agent"] == "hr_assistant" and agent_meta["framework"] == "langchain"
    assert "thread_id" not in agent_meta
    assert tc.additional_metadata["retriever"] == "policy_retriever"
    assert tc.additional_metadata["retriever_query"] == "paid time off days per year"


def test_two_tool_calls_in_one_turn_give_one_case_each(search_tool, retriever):
    @tool
    def travel_rules(topic: str) -> str:
        """Look up the travel policy on a topic."""
        return "\n\n".join(d.page_content for d in retriever.invoke(f"business travel {topic}"))

    plan = [("search_policies", {"query": "paid time off days"}), ("travel_rules", {"topic": "per diem meals"}),
            ("search_policies", {"query": "remote work days per week"})]
    agent = create_agent(ScriptedAgentModel(plan=lambda user: plan), [search_tool, travel_rules])
    handler = off()
    question = "How much PTO do I get, what is the per diem, and how often can I work from home?"
    out = ask(agent, question, handler)
    cases = sorted(handler.cases, key=lambda c: agent_of(c.test_case)["call"])
    assert len(cases) == 3  # the tools ran in parallel; each call is ordered as the model asked for it
    metas = [agent_of(c.test_case) for c in cases]
    assert [(m["tool"], m["call"]) for m in metas] == [("search_policies", 1), ("travel_rules", 2),
                                                       ("search_policies", 3)]
    assert [m["tool_input"] for m in metas] == ["paid time off days", "per diem meals", "remote work days per week"]
    names = [c.test_case.name.split(": ")[0] for c in cases]
    assert names == ["search_policies", "travel_rules", "search_policies #2"]
    final = out["messages"][-1].content
    assert all(c.test_case.input == question and c.test_case.actual_output == final for c in cases)
    # each case keeps what its own call retrieved
    assert cases[0].test_case.retrieval_context[0].id == "pto-001"
    assert cases[2].test_case.retrieval_context[0].id.startswith("remote")
    assert metas[1]["tool_output"] and "per diem" in metas[1]["tool_output"].lower()


class RagState(TypedDict):
    messages: Annotated[list, add_messages]
    context: list[Document]


def test_langgraph_retriever_node(retriever):
    model = ExtractiveChatModel()

    def retrieve(state: RagState) -> dict:
        question = state["messages"][-1].content
        return {"context": retriever.invoke(question)}

    def generate(state: RagState) -> dict:
        context = "\n\n".join(d.page_content for d in state["context"])
        prompt = f"Context:\n{context}\n\nQuestion: {state['messages'][-1].content}"
        return {"messages": [model.invoke([HumanMessage(prompt)])]}

    graph = StateGraph(RagState)
    graph.add_node("retrieve", retrieve)
    graph.add_node("generate", generate)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "generate")
    graph.add_edge("generate", END)
    app = graph.compile(name="rag_graph")

    handler = off()
    question = "How many days a week can I work remotely?"
    out = ask(app, question, handler)
    [case] = handler.cases
    tc = case.test_case
    assert tc.input == question and tc.actual_output == out["messages"][-1].content
    meta = agent_of(tc)
    # not a tool: tool is None, the node says where the retrieval ran
    assert meta["tool"] is None and meta["node"] == "retrieve" and meta["agent"] == "rag_graph"
    assert meta["tool_input"] == question and meta["call"] == 1
    assert tc.name == f"retrieve: {question}"


def test_langgraph_tool_node_graph(search_tool):
    model = ScriptedAgentModel(plan=lambda user: [("search_policies", {"query": "report phishing email"})])
    bound = model.bind_tools([search_tool])

    def call_model(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", call_model)
    graph.add_node("tools", ToolNode([search_tool]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()

    handler = off()
    question = "I got a weird email asking for my password. What do I do?"
    out = ask(app, question, handler)
    [case] = handler.cases
    assert case.test_case.input == question and case.test_case.actual_output == out["messages"][-1].content
    meta = agent_of(case.test_case)
    assert meta["tool"] == "search_policies" and meta["tool_input"] == "report phishing email"
    assert case.test_case.retrieval_context[0].id.startswith("sec")


def test_thread_id_gives_a_conversation_for_the_turn_metrics(search_tool, judge):
    model = ScriptedAgentModel()  # one search per message, with the message as the query
    agent = create_agent(model, [search_tool], checkpointer=InMemorySaver())
    handler = ContextJudgeCallbackHandler(metrics=[TurnContextualRelevancyMetric(model=judge)], max_kept=None)
    first = ["How many days of paid time off do full-time employees get each year?",
             "How many days a week can I work remotely?"]
    answers = [ask(agent, q, handler, configurable={"thread_id": "ana"})["messages"][-1].content for q in first]
    other = ask(agent, "How do I report a phishing email?", handler, configurable={"thread_id": "ben"})
    assert handler.flush(60)

    convs = {c.source: c.test_case for c in handler.cases if isinstance(c.test_case, ConversationalTestCase)}
    assert set(convs) == {"thread:ana", "thread:ben"}
    ana = convs["thread:ana"]
    assert [t.content for t in ana.turns if t.role == "user"] == first
    assistant = [t for t in ana.turns if t.role == "assistant"]
    assert [t.content for t in assistant] == answers  # each turn's final answer, not the whole history's last
    assert all(t.retrieval_context for t in assistant)
    assert assistant[0].additional_metadata["agent_calls"][0]["tool"] == "search_policies"
    assert [t.content for t in convs["thread:ben"].turns] == ["How do I report a phishing email?",
                                                             other["messages"][-1].content]
    singles = [c for c in handler.cases if isinstance(c.test_case, LLMTestCase)]
    assert len(singles) == 3 and {agent_of(c.test_case)["thread_id"] for c in singles} == {"ana", "ben"}
    scored = [r for c, r in handler.results if c.source == "thread:ana"]
    assert [r.name for r in scored] == ["Turn Contextual Relevancy"] and scored[0].score is not None


def test_goldens_match_the_users_message_or_the_tool_query(search_tool, goldens):
    by_id = {g["id"]: g for g in goldens}
    user_golden, tool_golden = by_id["g01"], by_id["g05"]
    plan = {user_golden["input"]: [("search_policies", {"query": "paid time off"})],
            "And working from home?": [("search_policies", {"query": tool_golden["input"]})]}
    agent = create_agent(ScriptedAgentModel(plan=lambda user: plan.get(user, [])), [search_tool])
    handler = off(goldens=goldens)
    ask(agent, user_golden["input"], handler)  # the golden is the user's question itself
    ask(agent, "And working from home?", handler)  # only the tool's query matches a golden
    first, second = (c.test_case for c in handler.cases)
    assert first.input == user_golden["input"] and first.expected_output == user_golden["expected_output"]
    assert second.input == "And working from home?"
    assert second.expected_output == tool_golden["expected_output"]


def test_agent_with_no_tool_call_gives_no_case(search_tool):
    agent = create_agent(ScriptedAgentModel(plan=lambda user: []), [search_tool])
    handler = off()
    out = ask(agent, "Hello!", handler)
    assert out["messages"][-1].content and handler.cases == []


async def test_streamed_and_async_agents_give_the_same_cases(search_tool):
    plan = [("search_policies", {"query": "paid time off"}), ("search_policies", {"query": "remote work"})]
    agent = create_agent(ScriptedAgentModel(plan=lambda user: plan), [search_tool])
    handler = off()
    inputs = {"messages": [{"role": "user", "content": PTO}]}
    config = {"callbacks": [handler]}
    final = (await agent.ainvoke(inputs, config=config))["messages"][-1].content
    list(agent.stream(inputs, config=config, stream_mode="updates"))
    async for _ in agent.astream(inputs, config=config, stream_mode="messages"):
        pass
    cases = handler.cases
    assert len(cases) == 6
    assert all(c.test_case.input == PTO and c.test_case.actual_output == final for c in cases)
    assert sorted(agent_of(c.test_case)["call"] for c in cases) == [1, 1, 1, 2, 2, 2]

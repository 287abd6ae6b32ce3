"""How run trees become test cases: several retrievers, nested ones, tools, goldens, conversations, failures."""

from __future__ import annotations

import logging

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import tool

from contextjudge import ConversationalTestCase
from contextjudge.cases.provenance import agent_of
from contextjudge.metrics import TurnContextualRelevancyMetric
from contextjudge_langchain import ContextJudgeCallbackHandler
from contextjudge_langchain import _roots as roots_module
from contextjudge_langchain.testing import ExtractiveChatModel

PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])


def fmt(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def off() -> ContextJudgeCallbackHandler:
    return ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)


def test_two_retrievers_one_case_each(store):
    policies = store.as_retriever(search_kwargs={"k": 2}).with_config(run_name="policies")
    travel = store.as_retriever(search_kwargs={"k": 1, "filter": lambda d: d.metadata["category"] == "travel"}) \
        .with_config(run_name="travel_only")
    prompt = ChatPromptTemplate.from_messages(
        [("human", "Context:\n{a}\n\n{b}\n\nQuestion: {question}")])
    chain = ({"a": policies | fmt, "b": travel | fmt, "question": RunnablePassthrough()} | prompt
             | ExtractiveChatModel() | StrOutputParser())
    handler = off()
    q = "Who has to approve a business trip to Singapore?"
    out = chain.invoke(q, config={"callbacks": [handler]})
    by_name = {c.source: c.test_case for c in handler.cases}
    assert set(by_name) == {"policies", "travel_only"}
    assert len(by_name["policies"].retrieval_context) == 2
    assert [n.id for n in by_name["travel_only"].retrieval_context] == ["travel-002"]
    assert all(tc.input == q and tc.actual_output == out for tc in by_name.values())
    # named after the question, the retriever's name beside it; not an agent case
    assert all(tc.name == q and tc.additional_metadata["retriever"] == n for n, tc in by_name.items())
    assert all(agent_of(tc) is None for tc in by_name.values())


class _Fused(BaseRetriever):
    """An ensemble-like retriever: asks two retrievers, interleaves their results."""

    first: BaseRetriever
    second: BaseRetriever

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        a = self.first.invoke(query, config={"callbacks": run_manager.get_child()})
        b = self.second.invoke(query, config={"callbacks": run_manager.get_child()})
        seen, out = set(), []
        for d in [x for pair in zip(a, b, strict=False) for x in pair]:
            if d.id not in seen:
                seen.add(d.id)
                out.append(d)
        return out


def test_nested_retrievers_give_one_case_for_the_outer(store):
    fused = _Fused(first=store.as_retriever(search_kwargs={"k": 2}),
                   second=store.as_retriever(search_kwargs={"k": 3}))
    chain = {"context": fused | fmt, "question": RunnablePassthrough()} | PROMPT | ExtractiveChatModel()
    handler = off()
    chain.invoke("Can I accept a gift from a supplier?", config={"callbacks": [handler]})
    [case] = handler.cases
    assert case.source == "_Fused"
    assert [d["name"] for d in case.metadata["sub_retrievals"]] == ["VectorStoreRetriever"] * 2


def test_retriever_inside_an_agent_tool(retriever):
    @tool
    def search_policies(query: str) -> str:
        """Search the company policies."""
        return fmt(retriever.invoke(query))

    model = ExtractiveChatModel()

    def agent(question: str) -> str:
        # one hand-rolled agent step: the "model" decides to call the tool, then answers from its output
        call = AIMessage("", tool_calls=[{"name": "search_policies", "args": {"query": "report stolen laptop"},
                                          "id": "call-1"}])
        result = search_policies.invoke(call.tool_calls[0])
        messages = [HumanMessage(question), call, ToolMessage(result.content, tool_call_id="call-1")]
        prompt = f"Context:\n{result.content}\n\nQuestion: {question}"
        return model.invoke(messages[:-1] + [HumanMessage(prompt)]).content

    handler = off()
    out = RunnableLambda(agent).invoke("What should I do if my laptop is stolen?", config={"callbacks": [handler]})
    [case] = handler.cases
    tc = case.test_case
    assert case.source == "policy_retriever"
    assert tc.input == "What should I do if my laptop is stolen?"  # the user's question, not the tool query
    assert case.metadata["retriever_query"] == "report stolen laptop"
    assert tc.retrieval_context[0].id == "sec-002"
    assert tc.actual_output == out  # the agent's final answer
    meta = agent_of(tc)
    assert meta["tool"] == "search_policies" and meta["tool_input"] == "report stolen laptop" and meta["call"] == 1
    assert meta["tool_output"] == fmt(retriever.invoke("report stolen laptop")) and meta["agent"] == "agent"
    assert tc.name == "search_policies: What should I do if my laptop is stolen?"


def test_answer_falls_back_to_root_output(retriever):
    chain = retriever | RunnableLambda(lambda docs: f"{len(docs)} documents")
    handler = off()
    chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler]})
    [case] = handler.cases
    assert case.test_case.actual_output == "3 documents" and case.metadata["answer_source"] == "root_output"


def test_bare_retriever_and_dict_input(retriever, chain):
    handler = off()
    retriever.invoke("How do I report a phishing email?", config={"callbacks": [handler]})
    dict_chain = RunnableLambda(lambda x: x["question"]) | chain
    dict_chain.invoke({"question": "Can I bring my dog to the office?", "user": "ana"},
                      config={"callbacks": [handler]})
    first, second = handler.cases
    assert first.test_case.input == "How do I report a phishing email?" and first.test_case.actual_output is None
    assert first.test_case.name == "How do I report a phishing email?"
    assert second.test_case.input == "Can I bring my dog to the office?"


def test_goldens_by_input_and_by_id(chain, goldens):
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None, goldens=goldens)
    chain.invoke("how MANY days of paid time off do full-time employees get each year", config={"callbacks": [handler]})
    chain.invoke("Something phrased differently", config={"callbacks": [handler], "metadata": {"golden_id": "g15"}})
    chain.invoke("A question with no golden", config={"callbacks": [handler]})
    a, b, c = (x.test_case for x in handler.cases)
    assert a.expected_output == goldens[0]["expected_output"]
    assert b.expected_output == goldens[14]["expected_output"] and handler.cases[1].golden_id == "g15"
    assert c.expected_output is None


def test_goldens_from_jsonl(chain, goldens, tmp_path):
    import json

    path = tmp_path / "goldens.jsonl"
    path.write_text("\n".join(json.dumps(g) for g in goldens), encoding="utf-8")
    handler = ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None, goldens=str(path))
    chain.invoke(goldens[3]["input"], config={"callbacks": [handler]})
    assert handler.cases[0].test_case.expected_output == goldens[3]["expected_output"]


def test_conversation_grouped_by_thread_id(chain, judge):
    metric = TurnContextualRelevancyMetric(model=judge)
    handler = ContextJudgeCallbackHandler(metrics=[metric])
    turns = ["How many days a week can I work remotely?", "Can I work from another country for a few weeks?",
             "What is the per diem for meals on a business trip outside Europe?"]
    for q in turns:
        chain.invoke(q, config={"callbacks": [handler], "metadata": {"thread_id": "t-1"}})
    chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler],
                                                             "configurable": {"session_id": "t-2"}})
    chain.invoke("How do I report a phishing email?", config={"callbacks": [handler]})  # no thread
    assert handler.flush(60)
    convs = {c.source: c for c in handler.cases if isinstance(c.test_case, ConversationalTestCase)}
    assert set(convs) == {"thread:t-1", "thread:t-2"}
    tc = convs["thread:t-1"].test_case
    assert [t.content for t in tc.turns if t.role == "user"] == turns
    assert all(t.retrieval_context for t in tc.turns if t.role == "assistant")
    results = [r for c, r in handler.results if c.source == "thread:t-1"]
    assert [r.name for r in results] == [metric.name] and results[0].score is not None
    assert handler.flush() and len([c for c in handler.cases if c.source == "thread:t-1"]) == 1  # nothing new


def test_chain_errors_are_unchanged_and_cases_still_kept(retriever):
    def boom(_):
        raise ValueError("model down")

    chain = {"context": retriever | fmt, "question": RunnablePassthrough()} | RunnableLambda(boom)
    handler = off()
    with pytest.raises(ValueError, match="model down"):
        chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler]})
    [case] = handler.cases
    assert case.test_case.actual_output is None and "model down" in case.metadata["root_error"]


def test_handler_raising_internally_leaves_the_chain_alone(chain, monkeypatch, caplog):
    expected = chain.invoke("Can I bring my dog to the office?")

    def explode(*a, **k):
        raise RuntimeError("capture bug")

    handler = off()
    monkeypatch.setattr(roots_module, "retrievals", explode)
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        out = chain.invoke("Can I bring my dog to the office?", config={"callbacks": [handler]})
    assert out == expected and handler.cases == []
    assert "could not assemble" in caplog.text

    broken = off()
    monkeypatch.setattr(broken._book, "_note_target", explode)  # noqa: SLF001 - every child start raises inside the handler
    assert chain.invoke("Can I bring my dog to the office?", config={"callbacks": [broken]}) == expected
    assert broken.raise_error is False and "capture failed on a run start" in caplog.text


def test_a_long_question_names_its_case_on_one_short_line(chain):
    handler = off()
    question = ("I am travelling to Singapore for a client workshop next month and\nwould like to know who has to "
                "approve the business trip before I book anything?")
    chain.invoke(question, config={"callbacks": [handler]})
    [case] = handler.cases
    name = case.test_case.name
    assert len(name) <= 80 and name.endswith("…") and "\n" not in name
    assert name.startswith("I am travelling to Singapore") and case.test_case.input == question

"""What the LLM saw: a compressor or filter that changes (or empties) the retriever's list gives a case with the final
list as its context and the retriever's own ranking beside it, never the ranking in its place."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun, Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from contextjudge.cases.provenance import RETRIEVER_RANKING_KEY
from contextjudge_langchain import ContextJudgeCallbackHandler
from contextjudge_langchain.testing import ExtractiveChatModel

PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])
Q = "Can I bring my dog to the office?"


class KeepTitled(BaseDocumentCompressor):
    """A filter compressor: keeps the documents whose title contains ``word`` (none, when no title does)."""

    word: str

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        return [d for d in documents if self.word.lower() in d.metadata.get("title", "").lower()]


class Compressing(BaseRetriever):
    """A contextual compression retriever: asks the base retriever, then lets the compressor cut the list (what
    LangChain's ContextualCompressionRetriever does)."""

    base_retriever: BaseRetriever
    base_compressor: BaseDocumentCompressor

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        docs = self.base_retriever.invoke(query, config={"callbacks": run_manager.get_child()})
        return list(self.base_compressor.compress_documents(docs, query, callbacks=run_manager.get_child()))


def fmt(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def rag(retriever):
    return ({"context": retriever | fmt, "question": RunnablePassthrough()} | PROMPT | ExtractiveChatModel()
            | StrOutputParser())


@pytest.fixture()
def base(store) -> BaseRetriever:
    return store.as_retriever(search_kwargs={"k": 3})


def off() -> ContextJudgeCallbackHandler:
    return ContextJudgeCallbackHandler(metrics=[], mode="off", max_kept=None)


def test_a_compressor_that_empties_the_list(base):
    compressing = Compressing(base_retriever=base, base_compressor=KeepTitled(word="no such title"))
    handler = off()
    out = rag(compressing).invoke(Q, config={"callbacks": [handler]})
    [case] = handler.cases
    tc = case.test_case
    assert tc.retrieval_context == []  # what the LLM saw: nothing
    ranking = tc.additional_metadata[RETRIEVER_RANKING_KEY]
    assert len(ranking) == 3 and ranking[0]["id"] == "pets-001"  # the retriever's own ranking, kept beside
    assert tc.actual_output == out and tc.additional_metadata["retriever"] == "Compressing"
    assert tc.name == Q


def test_a_compressor_that_keeps_some(base):
    inner = [d.id for d in base.invoke(Q)]
    keep = Compressing(base_retriever=base, base_compressor=KeepTitled(word="office"))
    handler = off()
    rag(keep).invoke(Q, config={"callbacks": [handler]})
    [case] = handler.cases
    kept = [n.id for n in case.test_case.retrieval_context]
    assert kept and len(kept) < len(inner)
    assert [n["id"] for n in case.test_case.additional_metadata[RETRIEVER_RANKING_KEY]] == inner


def test_a_compressor_that_changes_nothing_keeps_no_ranking(base):
    keep_all = Compressing(base_retriever=base, base_compressor=KeepTitled(word=""))
    handler = off()
    rag(keep_all).invoke(Q, config={"callbacks": [handler]})
    [case] = handler.cases
    assert len(case.test_case.retrieval_context) == 3
    assert RETRIEVER_RANKING_KEY not in case.test_case.additional_metadata


def test_an_lcel_filter_step_that_empties_the_list(retriever):
    drop_all = RunnableLambda(lambda docs: [d for d in docs if d.metadata.get("category") == "no such category"])
    handler = off()
    rag(retriever | drop_all).invoke(Q, config={"callbacks": [handler]})
    [case] = handler.cases
    tc = case.test_case
    assert tc.retrieval_context == []
    assert len(tc.additional_metadata[RETRIEVER_RANKING_KEY]) == 3
    assert tc.additional_metadata["retriever"] == "policy_retriever"


def test_an_empty_retrieval_in_a_thread_is_an_empty_turn_context(base):
    compressing = Compressing(base_retriever=base, base_compressor=KeepTitled(word="no such title"))
    handler = off()
    rag(compressing).invoke(Q, config={"callbacks": [handler], "metadata": {"thread_id": "t-empty"}})
    [conv] = handler.submit_conversations()
    assistant = conv.test_case.turns[1]
    assert assistant.retrieval_context == []  # retrieved, and nothing was left: not "no retrieval"

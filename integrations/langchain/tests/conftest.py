"""Shared fixtures: a real LCEL RAG chain over the demo corpus, with offline embeddings and chat model."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from contextjudge.testing import FakeJudge
from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])


def corpus(name: str) -> dict:
    return json.loads((files("contextjudge") / f"data/demo_corpus/{name}.json").read_text("utf-8"))


def fmt(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


@pytest.fixture(scope="session")
def documents() -> list[Document]:
    return [Document(d["text"], id=d["id"], metadata={"title": d["title"], "category": d["category"]})
            for d in corpus("docs")["documents"]]


@pytest.fixture(scope="session")
def goldens() -> list[dict]:
    return corpus("goldens")["goldens"]


@pytest.fixture(scope="session")
def store(documents) -> InMemoryVectorStore:
    vs = InMemoryVectorStore(BagOfWordsEmbeddings())
    vs.add_documents(documents)
    return vs


@pytest.fixture()
def retriever(store):
    return store.as_retriever(search_kwargs={"k": 3}).with_config(run_name="policy_retriever")


@pytest.fixture()
def chain(retriever):
    return ({"context": retriever | fmt, "question": RunnablePassthrough()} | PROMPT | ExtractiveChatModel()
            | StrOutputParser())


@pytest.fixture()
def judge() -> FakeJudge:
    return FakeJudge()

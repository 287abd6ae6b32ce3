"""Shared fixtures: a real VectorStoreIndex over a few policy documents, an offline LLM, and clean dispatchers."""

from __future__ import annotations

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.instrumentation import get_dispatcher

from contextjudge.testing import FakeJudge
from contextjudge_llama_index import uninstrument
from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

DOCS = [
    ("vacation", "Employees get 25 vacation days per year. Unused vacation days roll over up to 5 days."),
    ("contractors", "Contractors do not receive paid vacation days. Contractors invoice monthly."),
    ("office", "The office opens at 8am on weekdays. Parking is free for employees."),
    ("expenses", "Expense reports must be filed within 30 days of purchase. Receipts are required."),
    ("remote", "Employees may work remotely two days per week with manager approval."),
    ("security", "Laptops must use full disk encryption. Report lost laptops to security within one hour."),
]


@pytest.fixture(autouse=True)
def clean_dispatcher():
    """Each test starts and ends with the root dispatcher's handlers as they were, and no global capture."""
    root = get_dispatcher()
    spans, events = list(root.span_handlers), list(root.event_handlers)
    yield
    uninstrument()
    root.span_handlers = spans
    root.event_handlers = events


@pytest.fixture(scope="session")
def index() -> VectorStoreIndex:
    docs = [Document(text=text, id_=doc_id, metadata={"topic": doc_id}) for doc_id, text in DOCS]
    return VectorStoreIndex.from_documents(docs, embed_model=KeywordEmbedding())


@pytest.fixture
def llm() -> ExtractiveLLM:
    return ExtractiveLLM()


@pytest.fixture
def judge() -> FakeJudge:
    return FakeJudge()

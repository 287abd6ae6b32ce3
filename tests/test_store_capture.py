"""Both capture integrations write into the store: background mode stores results as they are scored, deferred mode
stores the cases for ``contextjudge score``. Skipped for an integration that is not installed."""

from __future__ import annotations

import pytest

from contextjudge import cli
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

DOCS = [
    "Employees get 25 vacation days per year. Unused days carry over until March.",
    "The parking garage opens at 6am. Visitor parking is on level 2.",
    "Expenses above 500 euros need a manager's approval. Receipts are required.",
]
GOLDENS = [{"input": "How many vacation days do employees get?",
            "expected_output": "Employees get 25 vacation days per year."},
           {"input": "When does the parking garage open?", "expected_output": "The parking garage opens at 6am."}]


def _lcel_chain():
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    vs = InMemoryVectorStore(BagOfWordsEmbeddings())
    vs.add_documents([Document(page_content=d, id=f"doc{i}") for i, d in enumerate(DOCS)])
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    return ({"context": vs.as_retriever(search_kwargs={"k": 2}) | (lambda ds: "\n".join(d.page_content for d in ds)),
             "question": RunnablePassthrough()} | prompt | ExtractiveChatModel() | StrOutputParser())


def _llama_engine():
    from llama_index.core import Document, VectorStoreIndex

    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    index = VectorStoreIndex.from_documents([Document(text=d, id_=f"doc{i}") for i, d in enumerate(DOCS)],
                                            embed_model=KeywordEmbedding())
    return index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=2)


def _run_langchain(store, mode):
    from contextjudge_langchain import ContextJudgeCallbackHandler

    handler = ContextJudgeCallbackHandler(metrics=[ContextualPrecisionMetric(model=FakeJudge()),
                                                   ContextualRelevancyMetric(model=FakeJudge())],
                                          goldens=GOLDENS, mode=mode, store=store)
    chain = _lcel_chain()
    for g in GOLDENS:
        chain.invoke(g["input"], config={"callbacks": [handler]})
    handler.flush(30)
    return handler.session


def _run_llama(store, mode):
    from contextjudge_llama_index import EvaluatedQueryEngine

    engine = EvaluatedQueryEngine(_llama_engine(), metrics=[ContextualPrecisionMetric(model=FakeJudge()),
                                                           ContextualRelevancyMetric(model=FakeJudge())],
                                  goldens=GOLDENS, mode=mode, store=store)
    for g in GOLDENS:
        engine.query(g["input"])
    engine.scorer.flush(30)
    return engine.scorer


@pytest.mark.parametrize("integration, runner", [("contextjudge_langchain", _run_langchain),
                                                 ("contextjudge_llama_index", _run_llama)])
def test_background_capture_writes_cases_and_results(tmp_path, integration, runner):
    pytest.importorskip(integration, reason=f"{integration} is not installed")
    db = str(tmp_path / "cap.db")
    scorer = runner(db, "background")
    s = open_store(db)
    info = s.run_info(scorer.run_id)
    assert info.cases == 2 and info.results == 4
    back = s.load_run(scorer.run_id)
    assert back.test_results[0].test_case.retrieval_context
    assert back.test_results[0].test_case.expected_output in {g["expected_output"] for g in GOLDENS}
    assert s.usage(scorer.run_id).calls > 0
    s.close()


@pytest.mark.parametrize("integration, runner", [("contextjudge_langchain", _run_langchain),
                                                 ("contextjudge_llama_index", _run_llama)])
def test_deferred_capture_then_contextjudge_score(tmp_path, capsys, integration, runner):
    pytest.importorskip(integration, reason=f"{integration} is not installed")
    db = str(tmp_path / "cap.db")
    scorer = runner(db, "deferred")
    s = open_store(db)
    assert len(s.unscored_cases(scorer.run_id)) == 2
    s.close()
    rc = cli.main(["score", "--store", db, "--run", scorer.run_id, "--model", "fake", "--threshold", "0", "-q"])
    out = capsys.readouterr().out
    assert rc == 0 and "Contextual Precision" in out
    s = open_store(db)
    assert s.unscored_cases(scorer.run_id) == []
    assert s.run_info(scorer.run_id).results == 4  # the capture's own two metrics, from the run's config
    s.close()

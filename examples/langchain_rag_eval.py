"""Score the retrievals of a LangChain RAG chain, attaching contextjudge in each of its three ways.

    pip install contextjudge contextjudge-langchain "contextjudge[local]"
    python examples/langchain_rag_eval.py

Runs offline: the app uses contextjudge-langchain's offline stand-ins (bag-of-words embeddings and an extractive
chat model that quotes context; swap in your own retriever and model), and the judge is the embedded offline judge
(model="local"), or, if it is not installed, the scripted FakeJudge, which says so.
"""

from __future__ import annotations

import json
from importlib.resources import files

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    TurnContextualRelevancyMetric,
)
from contextjudge_langchain import METRIC_RESULT_EVENT, ContextJudgeCallbackHandler, capture, instrument, uninstrument
from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel


def judge_model():
    try:
        from contextjudge.judges import resolve_model

        return resolve_model("local")
    except Exception as exc:  # noqa: BLE001
        from contextjudge.testing import FakeJudge

        print(f"NOTE: the embedded judge is not available ({exc}); using the scripted FakeJudge, not a real judge.")
        return FakeJudge()


# --- an ordinary LCEL RAG app -----------------------------------------------------------------------------------
corpus = files("contextjudge") / "data/demo_corpus"
docs = json.loads((corpus / "docs.json").read_text("utf-8"))["documents"]
goldens = json.loads((corpus / "goldens.json").read_text("utf-8"))["goldens"]

store = InMemoryVectorStore(BagOfWordsEmbeddings())
store.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"]}) for d in docs])
retriever = store.as_retriever(search_kwargs={"k": 3})
prompt = ChatPromptTemplate.from_messages(
    [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])
chain = ({"context": retriever | (lambda ds: "\n\n".join(d.page_content for d in ds)),
          "question": RunnablePassthrough()}
         | prompt | ExtractiveChatModel() | StrOutputParser())

judge = judge_model()


def metrics():
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge)]


def show(title, handler):
    print(f"\n== {title}")
    for case, result in handler.results:
        what = getattr(case.test_case, "input", case.source)
        print(f"  {what[:55]:<55}  {result.name:<26} {result.score:.2f}  {(result.reason or '')[:60]}")


class PrintScores(BaseCallbackHandler):
    """Any handler of yours receives the scores as a LangChain custom event."""

    def on_custom_event(self, name, data, *, run_id, **kwargs):
        if name == METRIC_RESULT_EVENT:
            print(f"  event for run {str(run_id)[:8]}: {data['metric']} = {data['score']}")


# 1. Per call: pass the handler in config, next to any handler you already use.
handler = ContextJudgeCallbackHandler(metrics=metrics(), goldens=goldens)  # scores in the background
chain.invoke(goldens[0]["input"], config={"callbacks": [handler, PrintScores()]})
handler.flush()  # wait for the background scores (a web app would not)
show("1. config={'callbacks': [handler]}", handler)

# 2. For a block of code, with no change to the chain: everything run inside is captured.
with capture(metrics=metrics(), goldens=goldens) as session:
    chain.batch([g["input"] for g in goldens[1:4]])
show("2. with capture(...)", session)  # leaving the block waited for the scores

# 3. For the whole process, e.g. in a service's startup code; here capture only, scored later in one go.
process_handler = instrument(metrics=metrics() + [TurnContextualRelevancyMetric(model=judge)], goldens=goldens,
                             mode="deferred", max_kept=None)  # this short script keeps every case in memory
for golden in goldens[4:6]:  # runs sharing a thread id also form one conversation, scored by the turn metric
    chain.invoke(golden["input"], config={"metadata": {"thread_id": "user-42"}})
uninstrument()
process_handler.score_deferred()
show("3. instrument() / uninstrument(), deferred scoring", process_handler)

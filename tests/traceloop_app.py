"""A small LangChain RAG app traced by ``traceloop-sdk``: run by tests/test_traces_traceloop.py under a Python of its
own (``.venv-traceloop``), with ``Traceloop.init`` exporting to the receiver at ``argv[1]``.

It needs traceloop-sdk, langchain (traceloop-sdk instruments LangChain only when the ``langchain`` or ``langgraph``
distribution is installed) and numpy (for the vector store), not contextjudge. Before anything is imported, every connection and
name lookup beyond loopback is refused and recorded, so the test can check that nothing left the machine. It prints
one JSON line: for each question, the documents retrieved (text and id, in order) and the answer, and the refused
addresses.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from typing import Any

REFUSED: list[str] = []


def _loopback(host: Any) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard() -> None:
    real_connect, real_connect_ex, real_getaddrinfo = (socket.socket.connect, socket.socket.connect_ex,
                                                       socket.getaddrinfo)

    def check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(address, tuple) and not _loopback(host):
            REFUSED.append(str(host))
            raise OSError(f"traceloop_app: connection to {host} refused (tests are offline)")

    def connect(self: socket.socket, address: Any) -> Any:
        check(address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host.decode() if isinstance(host, bytes) else host):
            REFUSED.append(str(host))
            raise socket.gaierror(f"traceloop_app: lookup of {host} refused (tests are offline)")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


_guard()
os.environ["TRACELOOP_TELEMETRY"] = "false"  # no usage reporting to Traceloop

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from traceloop.sdk import Traceloop  # noqa: E402

DOCS = [
    ("vacation", "Employees get 25 vacation days per year, plus public holidays."),
    ("remote", "Staff may work remotely up to three days a week with their manager's approval."),
    ("parental", "Parents get 16 weeks of paid parental leave, to be taken within a year of the birth."),
    ("expenses", "Travel expenses are refunded within 30 days of a receipt being filed."),
    ("security", "Laptops must be locked when left unattended, and passwords are never shared."),
]
QUESTIONS = ["How many vacation days do employees get?", "Can I work remotely?",
             "What is the parental leave policy?"]


class KeywordEmbeddings(Embeddings):
    """Counts of a few words: a deterministic embedding under which a question finds the document it is about."""

    WORDS = ("vacation", "remote", "parental", "leave", "expenses", "travel", "laptop", "password", "days", "week")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        lowered = text.lower()
        return [0.01 + lowered.count(w) for w in self.WORDS]


class FirstLineChatModel(BaseChatModel):
    """Answers with the first line of the context in its prompt (the top document): an answer that depends on what
    was retrieved, with no model."""

    @property
    def _llm_type(self) -> str:
        return "first-line"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].content)
        context = prompt.split("Context:\n", 1)[1]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=context.split("\n", 1)[0]))])


def main() -> None:
    endpoint = sys.argv[1]
    Traceloop.init(app_name="contextjudge-test-rag", api_endpoint=endpoint, disable_batch=True,
                   telemetry_enabled=False)
    vs = InMemoryVectorStore(KeywordEmbeddings())
    vs.add_documents([Document(text, id=doc_id, metadata={"topic": doc_id}) for doc_id, text in DOCS])
    retriever = vs.as_retriever(search_kwargs={"k": 3})
    seen: list[list[Document]] = []

    def keep(docs: list[Document]) -> str:
        seen.append(docs)
        return "\n".join(d.page_content for d in docs)

    prompt = ChatPromptTemplate.from_messages(
        [("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")])
    chain = ({"context": retriever | RunnableLambda(keep), "question": RunnablePassthrough()}
             | prompt | FirstLineChatModel() | StrOutputParser())
    runs = []
    for q in QUESTIONS:
        answer = chain.invoke(q)
        runs.append({"question": q, "answer": answer,
                     "nodes": [{"text": d.page_content, "id": d.id} for d in seen[-1]]})
    from opentelemetry import trace

    provider = trace.get_tracer_provider()  # disable_batch: each span was sent as it ended; flush to be sure
    if hasattr(provider, "force_flush"):
        provider.force_flush(10_000)
    print(json.dumps({"runs": runs, "refused": REFUSED}))


if __name__ == "__main__":
    main()

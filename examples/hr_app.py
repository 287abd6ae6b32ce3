"""A small HR-policy RAG app to point `contextjudge eval --app` at, built from offline stand-ins.

    contextjudge eval --app examples.hr_app:chain --goldens examples/goldens.jsonl --model local
    contextjudge eval --app "examples.hr_app:build_agent()" --goldens examples/goldens.jsonl --model local

`chain` is an LCEL RAG chain; `build_agent()` makes a `create_agent` agent with a retriever tool (it needs
`pip install -e "integrations/langchain[agents]"`). The corpus is the demo's fictional company policies. The
embeddings and the models are contextjudge-langchain's offline stand-ins (bag-of-words embeddings, a chat model that
quotes the context, a scripted tool-calling model): replace them with your own.
"""

from __future__ import annotations

import json
from importlib.resources import files

from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel, ScriptedAgentModel

_docs = json.loads((files("contextjudge") / "data/demo_corpus/docs.json").read_text("utf-8"))["documents"]
_store = InMemoryVectorStore(BagOfWordsEmbeddings())
_store.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"]}) for d in _docs])
retriever = _store.as_retriever(search_kwargs={"k": 3})

_prompt = ChatPromptTemplate.from_template("Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}")
chain = ({"context": retriever | (lambda ds: "\n\n".join(d.page_content for d in ds)),
          "question": RunnablePassthrough()} | _prompt | ExtractiveChatModel() | StrOutputParser())


def build_agent():
    """A ``create_agent`` agent that searches the policies with a retriever tool, then answers."""
    try:
        from langchain.agents import create_agent
        from langchain_core.tools.retriever import create_retriever_tool
    except ImportError as exc:
        raise ImportError('the agent needs langchain and langgraph: pip install -e "integrations/langchain[agents]"') \
            from exc
    tool = create_retriever_tool(retriever, "search_policies", "Search the company's HR, travel and IT policies.")
    return create_agent(ScriptedAgentModel(), [tool], name="hr_assistant")

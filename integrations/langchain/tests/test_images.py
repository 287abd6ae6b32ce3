"""Documents whose metadata points to an image are captured as image nodes."""

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from contextjudge.testing import FakeJudge
from contextjudge_langchain import ContextJudgeCallbackHandler


class PhotoRetriever(BaseRetriever):
    def _get_relevant_documents(self, query, *, run_manager=None):
        return [Document(page_content="The Eiffel Tower at night.", id="img-1",
                         metadata={"image_url": "https://example.com/eiffel.jpg"}),
                Document(page_content="Opening hours are 9 to 23.", id="txt-1")]


def test_image_documents_become_image_nodes():
    handler = ContextJudgeCallbackHandler(model=FakeJudge(), mode="off", max_kept=None)
    chain = PhotoRetriever() | RunnableLambda(lambda docs: docs[0].page_content)
    chain.invoke("Which landmark is this?", config={"callbacks": [handler]})
    handler.flush()
    (case,) = handler.test_cases
    first, second = case.retrieval_context
    assert first.images and "https://example.com/eiffel.jpg" in str(first.images[0].url)
    assert not second.images

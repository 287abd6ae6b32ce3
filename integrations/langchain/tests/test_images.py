"""Documents whose metadata points to an image are captured as image nodes."""

import base64

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from contextjudge.cases.images import image_from_metadata
from contextjudge.testing import FakeJudge
from contextjudge_langchain import ContextJudgeCallbackHandler, node_from_image_metadata


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


# moved from tests/test_multimodal.py with the node builders (issue 13: node builders live in the integrations)
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
TOWER_URL = "https://example.com/img/eiffel-tower.jpg"


def test_node_from_image_metadata_for_langchain_documents(tmp_path):
    node = node_from_image_metadata("Figure 3: revenue", {"image_url": "https://example.com/f3.png", "page": 4,
                                                          "caption": "revenue by quarter"}, id="d1", score=0.7)
    assert node.text == "Figure 3: revenue" and node.id == "d1" and node.score == 0.7 and node.metadata["page"] == 4
    assert [(i.src, i.alt) for i in node.images] == [("https://example.com/f3.png", "revenue by quarter")]
    path = tmp_path / "fig.png"
    path.write_bytes(PNG)
    assert node_from_image_metadata("", {"source": str(path)}).images[0].src.startswith("data:image/png")
    assert node_from_image_metadata("", {"image_base64": base64.b64encode(PNG).decode(),
                                         "image_mime_type": "image/png"}).images[0].mime_type == "image/png"
    # no pointer, or one that cannot be read: a plain text node, never an exception
    assert node_from_image_metadata("text", {"source": "notes.txt"}).images == []
    assert node_from_image_metadata("text", {"image_path": "/no/such/file.png"}).images == []
    assert image_from_metadata(None) is None

"""A retriever returning LlamaIndex ImageNodes is captured with its images."""

from __future__ import annotations

from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import ImageNode, NodeWithScore, TextNode

import contextjudge_llama_index as cj


class PhotoRetriever(BaseRetriever):
    def _retrieve(self, query_bundle):
        return [NodeWithScore(node=ImageNode(text="The Eiffel Tower at night.", image_url="https://example.com/e.jpg",
                                             id_="img-1"), score=0.9),
                NodeWithScore(node=TextNode(text="The tower opens at 9am.", id_="txt-1"), score=0.5)]


def test_image_nodes_keep_their_images(judge, llm):
    scorer = cj.instrument(model=judge, mode="off", max_kept=None)
    engine = RetrieverQueryEngine.from_args(PhotoRetriever(), llm=llm)
    engine.query("Which landmark is in the photo?")
    scorer.flush()
    (case,) = scorer.test_cases
    image_node, text_node = case.retrieval_context
    assert image_node.images and "https://example.com/e.jpg" in str(image_node.images[0].url)
    assert not text_node.images

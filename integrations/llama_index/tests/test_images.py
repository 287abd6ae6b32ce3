"""A retriever returning LlamaIndex ImageNodes is captured with its images."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import ImageNode, NodeWithScore, TextNode

import contextjudge_llama_index as cj
from contextjudge_llama_index import node_from_llama_image_node


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


# moved from tests/test_multimodal.py with the node builders (issue 13: node builders live in the integrations)
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
TOWER_URL = "https://example.com/img/eiffel-tower.jpg"


def test_node_from_llama_image_node_duck_typed_and_real():
    fake = SimpleNamespace(text="A bar chart", metadata={"file_name": "c.png"}, node_id="n-1",
                           image=base64.b64encode(PNG).decode(), image_url=None, image_path=None,
                           image_mimetype="image/png", get_content=lambda: "A bar chart")
    node = node_from_llama_image_node(fake, score=0.5)
    assert node.id == "n-1" and node.score == 0.5 and node.text == "A bar chart"
    assert node.images[0].alt == "A bar chart" and node.images[0].src.startswith("data:image/png;base64,")
    schema = pytest.importorskip("llama_index.core.schema")
    real = schema.ImageNode(text="Eiffel tower photo", image_url=TOWER_URL)
    assert node_from_llama_image_node(real).images[0].src == TOWER_URL
    assert node_from_llama_image_node(schema.TextNode(text="plain")).images == []

"""Images reach an OpenAI-compatible judge in the wire format, each labelled with the item it belongs to."""

import pytest

from contextjudge.judges._client import JudgeClient
from contextjudge.judges._protocol import Item, JudgeRequest
from contextjudge.templates import ContextualPrecisionTemplate
from contextjudge.testing import FakeJudge


def test_image_blocks_are_standard_labelled_and_convert_to_openai_wire_format():
    base = pytest.importorskip("langchain_openai.chat_models.base")
    req = JudgeRequest(task="node_usefulness", input="q", items=[
        Item(id="n1", text="text"), Item(id="n2", text="photo", images=["https://example.com/a.jpg"]),
        Item(id="n3", text="scan", images=["data:image/png;base64,AAAA"])])
    client = JudgeClient(FakeJudge(supports_images=True), ContextualPrecisionTemplate)
    human = client._messages(req, "PROMPT")[-1]
    kinds = [b["type"] for b in human.content]
    assert kinds == ["text", "text", "image", "text", "image"]
    assert human.content[1]["text"] == "Image attached to n2:" and human.content[3]["text"] == "Image attached to n3:"
    wire = base._convert_message_to_dict(human)["content"]
    urls = [b["image_url"]["url"] for b in wire if b["type"] == "image_url"]
    assert urls == ["https://example.com/a.jpg", "data:image/png;base64,AAAA"]

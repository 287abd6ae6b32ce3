"""Multimodal test cases: MLLMImage in f-strings, files, URLs and nodes; image blocks to judges; text-only refusal."""

import base64
import copy
import json
import pickle
import socket
from types import SimpleNamespace

import pytest

from contextjudge import (
    ConversationalTestCase,
    JudgeUnavailableError,
    LLMTestCase,
    MLLMImage,
    RetrievedNode,
    Turn,
    evaluate,
)
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    RubricContextRecallMetric,
    TurnContextualPrecisionMetric,
    TurnContextualRecallMetric,
    TurnContextualRelevancyMetric,
)
from contextjudge.multimodal import (
    IMAGES_KEY,
    find_images,
    judge_supports_images,
    split_images,
    text_judge_note,
    text_without_markers,
)
from contextjudge.testing import FakeJudge

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
TOWER_URL = "https://example.com/img/eiffel-tower.jpg"


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to reach the network fails the test: image URLs are passed to the judge, never fetched."""

    def refuse(*a, **k):
        raise AssertionError("the network was used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def tower(**kw):
    return MLLMImage(url=TOWER_URL, **kw)


def blocks_urls(call):
    out = []
    for b in call["images"]:
        if b.get("type") == "image_url":
            out.append(b["image_url"]["url"])
        else:
            out.append(b.get("url") or f"data:{b.get('mime_type')};base64,{b.get('base64')}")
    return out


# ------------------------------------------------------------------------------------------------- the image type
def test_fstring_form_embeds_a_token_that_splits_back_into_the_image():
    img = tower(alt="the Eiffel Tower at dusk")
    text = f"Tell me about this landmark: {img} Is it old?"
    assert "[[contextjudge:image:" in text and TOWER_URL not in text  # the token is opaque
    clean, images = split_images(text)
    assert clean == "Tell me about this landmark: [image 1: the Eiffel Tower at dusk] Is it old?"
    assert images == [img] and images[0].src == TOWER_URL and images[0].alt == "the Eiffel Tower at dusk"
    assert f"{img:}" == str(img) == img.token
    assert MLLMImage.from_token(img.token) == img


def test_tokens_survive_test_case_copy_json_and_pickle():
    img = tower()
    tc = LLMTestCase(input=f"What is this? {img}", expected_output=f"It is {img}.", retrieval_context=[f"{img}"])
    again = LLMTestCase.model_validate_json(tc.model_dump_json())
    assert find_images(again.input) == [img] and find_images(again.expected_output) == [img]
    assert find_images(pickle.loads(pickle.dumps(tc)).retrieval_context[0].text) == [img]
    assert pickle.loads(pickle.dumps(img)) == img and copy.deepcopy(img) == img
    assert tc.fingerprint() == again.fingerprint()


def test_two_images_are_numbered_and_text_without_images_is_unchanged():
    a, b = tower(), MLLMImage(url="https://example.com/b.png")
    clean, imgs = split_images(f"{a} and {b}", prefix="Q")
    assert clean == "[image Q1] and [image Q2]" and imgs == [a, b]
    assert split_images("plain text") == ("plain text", [])


def test_local_file_becomes_a_base64_data_url(tmp_path):
    path = tmp_path / "chart.png"
    path.write_bytes(PNG)
    for img in (MLLMImage(url=str(path), local=True), MLLMImage(url=path), MLLMImage(url=path.as_uri())):
        assert img.local and img.path == str(path)
        assert img.src.startswith("data:image/png;base64,")
        assert base64.b64decode(img.base64) == PNG
        assert img.to_content_block() == {"type": "image", "base64": img.base64, "mime_type": "image/png"}
    # the token carries the bytes, so the file is not needed any more
    token = str(MLLMImage(url=str(path), local=True))
    path.unlink()
    assert base64.b64decode(MLLMImage.from_token(token).base64) == PNG


def test_base64_and_data_urls_are_accepted():
    b64 = base64.b64encode(PNG).decode()
    assert MLLMImage(data=PNG).src == f"data:image/png;base64,{b64}"
    assert MLLMImage(data=b64).mime_type == "image/png"
    assert MLLMImage(dataBase64=b64, mimeType="image/png").src == f"data:image/png;base64,{b64}"  # DeepEval names
    assert MLLMImage(url=f"data:image/png;base64,{b64}").base64 == b64
    assert MLLMImage(url=b64).src == f"data:image/png;base64,{b64}"  # bare base64 of an image


def test_url_is_kept_as_is_and_never_fetched(no_network):
    img = tower()
    assert img.src == TOWER_URL and not img.local and img.base64 is None
    assert img.to_content_block() == {"type": "image", "url": TOWER_URL}
    assert img.to_content_block("openai") == {"type": "image_url", "image_url": {"url": TOWER_URL}}


def test_bad_image_sources_say_what_to_pass(tmp_path):
    with pytest.raises(ValueError, match="existing file"):
        MLLMImage(url="no/such/picture.png")
    with pytest.raises(ValueError, match="cannot read"):
        MLLMImage(url=str(tmp_path / "missing.png"), local=True)
    with pytest.raises(ValueError, match="url="):
        MLLMImage()


# ------------------------------------------------------------------------------------------------ in test cases
def test_images_as_list_items_nodes_and_deepeval_list_form():
    img = tower(alt="tower")
    tc = LLMTestCase(
        input=["Which landmark is this?", img],  # DeepEval's multimodal list form
        retrieval_context=["The Eiffel Tower is in Paris.", img, RetrievedNode("A photo.", id="p1", images=[img])],
    )
    assert find_images(tc.input) == [img]
    nodes = tc.retrieval_context
    assert nodes[0].images == [] and nodes[1].images == [img] and nodes[2].images == [img]
    assert nodes[2].metadata[IMAGES_KEY] == [TOWER_URL] and nodes[2].text == "A photo."
    conv = ConversationalTestCase(turns=[Turn(role="user", content=f"and this? {img}"),
                                         Turn(role="assistant", content="A tower.", retrieval_context=[img])])
    assert find_images(conv.turns[0].content) == [img] and conv.turns[1].retrieval_context[0].images == [img]


def test_plain_lists_of_text_are_still_rejected_for_text_fields():
    from contextjudge import InvalidTestCaseError

    with pytest.raises(InvalidTestCaseError):
        LLMTestCase(input="q", actual_output=["just", "text"])


def test_deepeval_import_path():
    from contextjudge.compat.deepeval import MLLMImage as M1
    from contextjudge.compat.deepeval.test_case import LLMTestCase as DLLMTestCase
    from contextjudge.compat.deepeval.test_case import MLLMImage as M2

    assert M1 is M2 is MLLMImage
    tc = DLLMTestCase(input=f"What is this? {M2(url=TOWER_URL)}", retrieval_context=["x"])
    assert find_images(tc.input)[0].src == TOWER_URL


# ----------------------------------------------------------------------------------------- images reach the judge
def case_with_images(img):
    return LLMTestCase(
        input=f"Tell me about this landmark: {img}",
        actual_output="It is the Eiffel Tower in Paris.",
        expected_output="It is the Eiffel Tower in Paris.",
        retrieval_context=["The Eiffel Tower stands in Paris.", RetrievedNode("", id="doc-7", images=[img]),
                           "Berlin has many museums."],
    )


@pytest.mark.parametrize("metric_cls", [ContextualPrecisionMetric, ContextUtilizationMetric,
                                        ContextualRecallMetric, ContextualRelevancyMetric, RubricContextRecallMetric])
async def test_multimodal_judge_receives_image_blocks(metric_cls, no_network):
    img = tower(alt="the Eiffel Tower")
    judge = FakeJudge(supports_images=True)
    result = await metric_cls(model=judge).a_score(case_with_images(img))
    assert result.error is None and result.score is not None
    assert judge.calls, "the judge was called"
    for call in judge.calls:
        assert TOWER_URL in blocks_urls(call)  # the URL itself, as an image content block
        assert "[[contextjudge:image:" not in call["prompt"].split("'type': 'image")[0]  # no raw tokens in the text
        assert "[image" in call["prompt"]


async def test_node_images_ride_on_their_own_item_and_question_images_as_evidence():
    img = tower()
    judge = FakeJudge(supports_images=True)
    await ContextualPrecisionMetric(model=judge).a_score(case_with_images(img))
    request = judge.calls[0]["messages"][-1].additional_kwargs["contextjudge_request"]
    by_id = {it["id"]: it for it in request["items"]}
    assert by_id["n2"]["images"] == [TOWER_URL] and by_id["n1"]["images"] == [] and by_id["n3"]["images"] == []
    assert "[image 1]" in by_id["n2"]["text"]
    assert request["input"] == "Tell me about this landmark: [image Q1]"
    assert [c["id"] for c in request["context"]] == ["image.q1"] and request["context"][0]["images"] == [TOWER_URL]


async def test_relevancy_judges_an_image_node_as_its_own_sentence():
    img = tower(alt="the Eiffel Tower")
    judge = FakeJudge(supports_images=True, rules={"Eiffel": "yes"}, default="no")
    r = await ContextualRelevancyMetric(model=judge).a_score(case_with_images(img))
    request = judge.calls[0]["messages"][-1].additional_kwargs["contextjudge_request"]
    image_items = [it for it in request["items"] if it["images"]]
    assert [it["parent"] for it in image_items] == ["n2"] and image_items[0]["text"] == "[image 1: the Eiffel Tower]"
    assert r.score == pytest.approx(2 / 3)


async def test_turn_metrics_send_images_too():
    img = tower()
    case = ConversationalTestCase(turns=[
        Turn(role="user", content=f"What is this? {img}"),
        Turn(role="assistant", content="The Eiffel Tower.", expected_output="The Eiffel Tower.",
             retrieval_context=["The Eiffel Tower is in Paris.", img]),
    ])
    for cls in (TurnContextualRelevancyMetric, TurnContextualPrecisionMetric, TurnContextualRecallMetric):
        judge = FakeJudge(supports_images=True)
        r = await cls(model=judge).a_score(case)
        assert r.error is None, r.error
        assert all(TOWER_URL in blocks_urls(c) for c in judge.calls)


def test_local_file_reaches_the_judge_as_a_data_url(tmp_path):
    path = tmp_path / "x.png"
    path.write_bytes(PNG)
    judge = FakeJudge(supports_images=True)
    img = MLLMImage(url=str(path), local=True)
    result = evaluate([case_with_images(img)], [ContextualPrecisionMetric(model=judge)], show_progress=False)
    assert result.test_results[0].metrics_data[0].error is None
    assert img.src in blocks_urls(judge.calls[0]) and img.src.startswith("data:image/png;base64,")


# ---------------------------------------------------------------------------------------------- text-only judges
async def test_text_only_judge_gets_a_clear_error_before_any_call():
    judge = FakeJudge()  # supports_images=False
    metric = ContextualPrecisionMetric(model=judge)
    result = await metric.a_score(case_with_images(tower()))
    assert result.score is None and result.error_type == "JudgeUnavailableError"
    assert "Contextual Precision" in result.error
    assert "retrieval_context rank 2 (node id 'doc-7')" in result.error
    assert "cannot take images" in result.error and "judge_supports_images=True" in result.error
    assert judge.calls == []
    with pytest.raises(JudgeUnavailableError, match="doc-7"):
        metric.measure(case_with_images(tower()))
    assert judge.calls == []


async def test_text_only_judge_is_fine_when_the_metric_does_not_read_the_image_field():
    img = tower()
    tc = LLMTestCase(input="Where is the tower?", expected_output=f"In Paris. {img}",
                     retrieval_context=["The Eiffel Tower is in Paris."])
    judge = FakeJudge()
    r = await ContextualRelevancyMetric(model=judge).a_score(tc)  # relevancy never reads expected_output
    assert r.error is None and judge.calls
    r = await ContextualRecallMetric(model=judge).a_score(tc)
    assert r.error and "expected_output" in r.error


async def test_explicit_override_on_the_metric():
    judge = FakeJudge()
    r = await ContextualPrecisionMetric(model=judge, judge_supports_images=True).a_score(case_with_images(tower()))
    assert r.error is None and TOWER_URL in blocks_urls(judge.calls[0])
    r = await ContextualPrecisionMetric(model=FakeJudge(supports_images=True), judge_supports_images=False) \
        .a_score(case_with_images(tower()))
    assert r.error and "cannot take images" in r.error


def test_the_capability_rule():
    from langchain_openai import ChatOpenAI

    assert judge_supports_images(FakeJudge(supports_images=True)) is True
    assert judge_supports_images(FakeJudge()) is False
    assert judge_supports_images(FakeJudge(), override=True) is True
    assert judge_supports_images(ChatOpenAI(model="gpt-4.1-mini", api_key="sk-test")) is True  # model profile
    assert judge_supports_images(ChatOpenAI(model="gpt-3.5-turbo", api_key="sk-test")) is False
    assert judge_supports_images(ChatOpenAI(model="my-finetune", api_key="sk-test")) is False  # unknown: text-only
    assert judge_supports_images(SimpleNamespace(model="llava:13b")) is True  # known names
    assert judge_supports_images(SimpleNamespace(model_name="claude-sonnet-4-5")) is True
    assert judge_supports_images(SimpleNamespace(model="llama3.1:8b")) is False


# -------------------------------------------------------------------------------------------------- capture helpers
def test_node_builders_live_only_in_their_integrations():
    import contextjudge.multimodal as mm

    for gone in ("node_from_image_metadata", "node_from_llama_image_node", "no_such_name"):
        with pytest.raises(AttributeError):
            getattr(mm, gone)


def test_text_judge_note_mentions_alt_text():
    assert "alt text" in text_judge_note("A photo [image 1: the Eiffel Tower]", 1)
    assert "'the Eiffel Tower'" in text_judge_note("[image 1: the Eiffel Tower]", 1)
    assert "no alt text" in text_judge_note("[image 1]", 1)
    assert text_judge_note("no images here", 0) is None
    assert text_without_markers("See [image 1: the Eiffel Tower] and [image 2] here.") == \
        "See the Eiffel Tower and here."


def test_images_are_kept_in_the_store(tmp_path):
    img = tower(alt="tower")
    judge = FakeJudge(supports_images=True)
    db = str(tmp_path / "runs.db")
    result = evaluate([case_with_images(img)], [ContextualPrecisionMetric(model=judge)], store=db,
                      show_progress=False)
    from contextjudge.store import open_store

    stored = open_store(db).load_run(result.run_id).test_results[0].test_case
    assert find_images(stored.input) == [img]
    assert stored.retrieval_context[1].images == [img]
    json.dumps(result.test_results[0].to_dict())  # serialisable


def test_deepeval_older_multimodal_names():
    from contextjudge.compat.deepeval import (
        MLLMTestCase,
        MultimodalContextualPrecisionMetric,
    )

    judge = FakeJudge(supports_images=True)
    case = MLLMTestCase(
        input=["Tell me about some landmarks in France"],
        actual_output=["France is home to the Eiffel Tower in Paris.", tower()],
        expected_output=["The Eiffel Tower is in Paris, France.", tower()],
        retrieval_context=["The Eiffel Tower is a landmark in Paris, France.", tower()],
    )
    assert case.input == "Tell me about some landmarks in France" and find_images(case.expected_output) == [tower()]
    metric = MultimodalContextualPrecisionMetric(model=judge)
    metric.measure(case)
    assert metric.score is not None and TOWER_URL in blocks_urls(judge.calls[0])

"""A retrieval tool's output as both integrations read it (``contextjudge.capture.tool_output_items`` and
``search_result``): what a web-search tool, a JSON-returning tool and a plain tool give back."""

import json

from contextjudge.capture import search_result, tool_output_items


def test_a_search_apis_dict_gives_its_list_of_results_in_order():
    raw = {"query": "pto", "results": [{"url": "https://hr/pto", "content": "20 days of PTO."},
                                       {"url": "https://hr/sick", "content": "10 sick days."}]}
    items = tool_output_items(raw)
    assert [i["url"] for i in items] == ["https://hr/pto", "https://hr/sick"]
    assert search_result(items[0], ("text", "content")) == ("20 days of PTO.", "https://hr/pto",
                                                             {"url": "https://hr/pto"})


def test_json_in_a_string_is_read_and_other_text_is_one_item():
    assert tool_output_items('  [{"id": 7, "text": "a"}, {"id": 8, "text": "b"}] ') == [{"id": 7, "text": "a"},
                                                                                     {"id": 8, "text": "b"}]
    assert tool_output_items('{"documents": ["x", "y"]}') == ["x", "y"]
    assert tool_output_items("[not json") == ["[not json"]
    assert tool_output_items("Canberra is the capital.") == ["Canberra is the capital."]
    assert tool_output_items(("a", "b")) == ["a", "b"]
    assert tool_output_items({"answer": 42}) == [{"answer": 42}]


def test_a_result_without_text_is_kept_whole_as_json_and_ids_are_strings():
    text, nid, meta = search_result({"id": 12, "score": 0.9, "title": "Café"}, ("text", "content"))
    assert json.loads(text) == {"id": 12, "score": 0.9, "title": "Café"} and "Café" in text
    assert nid == "12" and meta == {"id": 12, "score": 0.9, "title": "Café"}
    text, nid, _ = search_result({"snippet": "", "body": "the body", "link": "https://x"}, ("snippet", "body"))
    assert (text, nid) == ("the body", "https://x")  # an empty field is skipped

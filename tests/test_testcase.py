"""Test-case validation: clear errors that name the field."""

import pytest

from contextjudge import ConversationalTestCase, InvalidTestCaseError, LLMTestCase, RetrievedNode, Turn


def test_strings_become_nodes_in_rank_order():
    tc = LLMTestCase(input="q", retrieval_context=["a", RetrievedNode("b", id=7, score=0.5, metadata={"s": 1})])
    assert [n.text for n in tc.retrieval_context] == ["a", "b"]
    assert tc.retrieval_context[1].id == "7" and tc.retrieval_context[1].score == 0.5


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": 3}, "input"),
        ({"input": "q", "retrieval_context": "one string"}, "retrieval_context"),
        ({"input": "q", "retrieval_context": [1, 2]}, "retrieval_context[0]"),
        ({"input": "q", "actual_output": ["x"]}, "actual_output"),
    ],
)
def test_invalid_llm_test_case_names_field(kwargs, field):
    with pytest.raises(InvalidTestCaseError) as err:
        LLMTestCase(**kwargs)
    assert err.value.field == field
    assert field.split("[")[0] in str(err.value)


def test_missing_input_is_clear():
    with pytest.raises(InvalidTestCaseError, match="input"):
        LLMTestCase(actual_output="x")


def test_unknown_field_is_rejected_with_its_name():
    with pytest.raises(InvalidTestCaseError, match="retrival_context"):
        LLMTestCase(input="q", retrival_context=["typo"])


def test_turn_role_must_be_user_or_assistant():
    with pytest.raises(InvalidTestCaseError, match="'user' or 'assistant'") as err:
        Turn(role="system", content="x")
    assert err.value.field == "role"


def test_conversation_needs_turns():
    with pytest.raises(InvalidTestCaseError, match="turns"):
        ConversationalTestCase(turns=[])
    with pytest.raises(InvalidTestCaseError, match=r"turns\[0\]"):
        ConversationalTestCase(turns=["hello"])


def test_invalid_test_case_error_is_a_value_error():
    with pytest.raises(ValueError):
        LLMTestCase(input="")


def test_fingerprint_is_stable_and_content_based():
    a = LLMTestCase(input="q", retrieval_context=["a"], name="x")
    b = LLMTestCase(input="q", retrieval_context=["a"], name="y")
    c = LLMTestCase(input="q", retrieval_context=["b"])
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()

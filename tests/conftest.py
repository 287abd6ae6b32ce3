import pytest

from contextjudge import LLMTestCase

TEN_NODES = [
    "Paris is the capital and most populous city of France.",
    "Bananas are a tropical fruit rich in potassium.",
    "The Eiffel Tower in Paris was completed in 1889.",
    "Berlin is the capital of Germany.",
    "France is a country in Western Europe.",
    "Mount Everest is the highest mountain on Earth.",
    "The Louvre in Paris is the world's most visited museum.",
    "Python is a programming language.",
    "The Seine river flows through Paris.",
    "Tokyo is the capital of Japan.",
]


@pytest.fixture
def ten_node_case():
    return LLMTestCase(
        input="What is the capital of France and when was the Eiffel Tower completed?",
        actual_output="Paris is the capital of France. The Eiffel Tower was completed in 1889.",
        expected_output="The capital of France is Paris. The Eiffel Tower was completed in 1889.",
        retrieval_context=TEN_NODES,
    )

"""A CI gate for a RAG app with pytest: every golden question must retrieve well enough, or the build fails.

    pytest examples/test_rag_with_pytest.py                                   # offline judge
    pytest examples/test_rag_with_pytest.py --contextjudge-model gpt-4.1-mini # a real LLM judge
    pytest examples/test_rag_with_pytest.py --contextjudge-store results.db   # keep the results, then:
    contextjudge report --store results.db -o report.html

``assert_test`` fails a test with each failing metric's score, threshold and reason. The ``contextjudge_judge``
fixture is the judge chosen with ``--contextjudge-model``. Without that option this example uses the embedded
offline judge (``model="local"``) when it is installed, and otherwise contextjudge's scripted FakeJudge, which
only shows the plumbing (it is labelled in the test output).
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from contextjudge import LLMTestCase, RetrievedNode, assert_test
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric

# ---------------------------------------------------------------------------------------------- the app under test
DOCS = {
    "pto": "Full-time employees get 25 days of paid time off per year. Up to 5 unused days carry over.",
    "parking": "The staff car park opens at 6am. Visitors park on level 2 and register at reception.",
    "expenses": "Expenses above 500 euros need a manager's approval. Keep receipts for every claim.",
    "laptops": "Engineers get a new laptop every three years. Broken laptops go to the IT desk.",
    "lunch": "The canteen serves lunch from noon to 2pm on weekdays.",
}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def retrieve(question: str, k: int = 3) -> list[RetrievedNode]:
    """The app's retriever: rank the policies by shared words (a stand-in for a vector store)."""
    q = _words(question)
    ranked = sorted(DOCS.items(), key=lambda kv: (-len(q & _words(kv[1])), kv[0]))[:k]
    return [RetrievedNode(text, id=doc_id, score=float(len(q & _words(text)))) for doc_id, text in ranked]


def answer(question: str) -> tuple[str, list[RetrievedNode]]:
    """The app: retrieve, then answer from the top node."""
    nodes = retrieve(question)
    return nodes[0].text.split(". ")[0] + ".", nodes


GOLDENS = [
    {"id": "pto", "input": "How many days of paid time off do full-time employees get?",
     "expected_output": "Full-time employees get 25 days of paid time off per year."},
    {"id": "expenses", "input": "Which expenses need a manager's approval?",
     "expected_output": "Expenses above 500 euros need a manager's approval."},
    {"id": "laptops", "input": "How often do engineers get a new laptop?",
     "expected_output": "Engineers get a new laptop every three years."},
]


# ---------------------------------------------------------------------------------------------- the gate
@pytest.fixture(scope="session")
def judge(request):
    if request.config.getoption("contextjudge_model", default=None):
        return request.getfixturevalue("contextjudge_judge")
    if importlib.util.find_spec("contextjudge.local") is not None:
        from contextjudge.judges import resolve_model

        return resolve_model("local")
    from contextjudge.testing import FakeJudge

    print("\n[judge] FakeJudge: a scripted test double (contextjudge.local is not installed); "
          "the scores show the plumbing, not retrieval quality")
    return FakeJudge()


@pytest.mark.parametrize("golden", GOLDENS, ids=[g["id"] for g in GOLDENS])
def test_retrieval_is_good_enough(golden, judge):
    output, nodes = answer(golden["input"])
    case = LLMTestCase(input=golden["input"], actual_output=output, expected_output=golden["expected_output"],
                       retrieval_context=nodes, name=golden["id"])
    assert_test(case, [ContextualPrecisionMetric(threshold=0.7, model=judge),
                       ContextualRecallMetric(threshold=0.7, model=judge)])

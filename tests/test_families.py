"""Verdict families as objects (judges/_families.py): every family is answered by the embedded judge and by
FakeJudge, an unknown family fails with its name, answer relevancy names its own family, and the wire (stored task,
verdict-cache keys, calibration keys) is what it was when the family was a string."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from contextjudge.cases import LLMTestCase
from contextjudge.errors import ConfigurationError
from contextjudge.judges import (
    FAMILIES,
    Item,
    JudgeClient,
    JudgeRequest,
    LocalJudge,
    RunContext,
    VerdictCache,
    VerdictFamily,
    _families,
    families,
    family,
    family_of,
    output_estimate,
    register_family,
    use_run_context,
)
from contextjudge.judges._templates import BaseTemplate
from contextjudge.metrics import BY_KEY, AnswerRelevancyMetric
from contextjudge.testing import FakeJudge

QUESTION = "How long does the warranty on the Kestrel thermometer last?"
NODES = ["The Kestrel thermometer carries a two-year warranty from the date of purchase.",
         "Our office in Leeds is open on weekdays. Parking is free for visitors."]
ANSWER = "The warranty on the Kestrel thermometer lasts two years. Thanks for asking!"


def request_of(fam: VerdictFamily) -> JudgeRequest:
    """A request of ``fam`` shaped as its items are (``VerdictFamily.item_kind``), with context where it cites it."""
    nodes = [Item(id=f"n{k}", text=t) for k, t in enumerate(NODES, 1)]
    if fam.item_kind == "nodes":
        items = nodes
    elif fam.item_kind == "node_sentences":
        items = [Item(id=f"n{k}.s{j}", text=s, parent=f"n{k}") for k, t in enumerate(NODES, 1)
                 for j, s in enumerate(t.split(". "), 1)]
    elif fam.item_kind in ("statements", "answer_statements"):
        items = [Item(id=f"s{j}", text=s) for j, s in enumerate(ANSWER.split(". "), 1)]
    else:
        items = []
    return JudgeRequest(task=fam.task, family=fam.name, input=QUESTION, reference=ANSWER,
                        reference_kind="actual_output", answer=ANSWER, items=items,
                        context=nodes if fam.cites_context or not fam.per_item else [])


def prompt_of(fam: VerdictFamily):
    return getattr(BaseTemplate, fam.name)


def ask(judge: Any, req: JudgeRequest, build: Any = None) -> Any:
    async def go() -> Any:
        with use_run_context(RunContext()):
            client = JudgeClient(judge, BaseTemplate)
            return await client.ask(req, build or prompt_of(req.verdict_family))
    return asyncio.run(go())


@pytest.fixture(scope="module")
def local() -> LocalJudge:
    return LocalJudge()


@pytest.mark.parametrize("fam", families(), ids=lambda f: f.name)
@pytest.mark.parametrize("judge", ["local", "fake"])
def test_every_family_is_answered_by_the_embedded_judge_and_the_fake(fam: VerdictFamily, judge: str,
                                                                      local: LocalJudge) -> None:
    req = request_of(fam)
    assert req.verdict_family is fam
    ans = ask(local if judge == "local" else FakeJudge(), req)
    if fam.per_item:
        assert req.items and set(ans.verdicts) == {it.id for it in req.items}
        assert all(v["verdict"] in ("yes", "no") for v in ans.verdicts.values())
        if judge == "local":
            assert all(isinstance(v["confidence"], float) for v in ans.verdicts.values())
    else:
        assert ans.score is not None and 0.0 <= ans.score <= 1.0 and not ans.verdicts


def test_an_unknown_family_fails_with_its_name() -> None:
    with pytest.raises(ConfigurationError, match="'entity_recall'.*the families are node_usefulness"):
        family("entity_recall")
    with pytest.raises(ValidationError, match="'entity_recall'"):
        JudgeRequest(task="statement_support", family="entity_recall", input="q")
    # a family is asked as its own task only
    with pytest.raises(ValidationError, match="'answer_relevance' is asked as the task 'sentence_relevance'"):
        JudgeRequest(task="node_usefulness", family="answer_relevance", input="q")
    with pytest.raises(ConfigurationError, match="'entity_recall' names the task 'entity_recall'"):
        register_family(VerdictFamily("entity_recall", "entity_recall"))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'node_usefulness' is registered already"):
        register_family(VerdictFamily("node_usefulness", "node_usefulness", per_item=False))


def test_a_family_the_embedded_judge_cannot_answer_stops_it_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_families, "_REGISTRY", dict(_families._REGISTRY))  # noqa: SLF001
    new = register_family(VerdictFamily("entity_recall", "statement_support", item_kind="statements",
                                        cites_context=True))
    assert family("entity_recall") is new and new in families()
    with pytest.raises(ConfigurationError, match="cannot answer the verdict family 'entity_recall'.*Scorer._entity_recall"):
        LocalJudge()
    # FakeJudge answers it by its shape: verdicts that cite the context
    req = JudgeRequest(task="statement_support", family="entity_recall", input=QUESTION,
                       items=[Item(id="s1", text="two-year warranty Kestrel thermometer")],
                       context=[Item(id="n1", text=NODES[0])])
    ans = ask(FakeJudge(), req, BaseTemplate.statement_support)
    assert ans.verdicts["s1"]["verdict"] == "yes" and ans.verdicts["s1"]["node_ids"] == ["n1"]


def test_the_wire_is_unchanged() -> None:
    # the tasks stored with judge calls and the calibration file's keys are what they were
    assert [(f.name, f.task) for f in families()] == [
        ("node_usefulness", "node_usefulness"), ("sentence_relevance", "sentence_relevance"),
        ("statement_support", "statement_support"), ("answer_relevance", "sentence_relevance"),
        ("rubric_recall", "rubric_recall")]
    assert FAMILIES == ("node_usefulness", "node_usefulness.actual_output", "sentence_relevance",
                        "statement_support", "statement_support.actual_output")
    assert family_of("node_usefulness", "actual_output") == "node_usefulness.actual_output"
    assert family_of("statement_support", "expected_output") == "statement_support"
    assert family("answer_relevance").calibration_key("actual_output") == "sentence_relevance"
    assert family_of("sentence_relevance", "actual_output") == "sentence_relevance"
    assert family_of("rubric_recall") == "rubric_recall"
    # the answer sizes the spend ledger reserves
    assert output_estimate("rubric_recall", 0) == 120
    assert output_estimate("node_usefulness", 3) == output_estimate(family("answer_relevance"), 3) == 200
    assert output_estimate("statement_support", 0) == output_estimate(None, 4) == 250
    assert output_estimate("a_task_of_another_version", 2) == 140
    assert output_estimate("rubric_recall", 5, max_output_tokens=64) == 64


class _Keys:
    """A verdict cache's backing store that keeps the keys it is given."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def get_verdict(self, key: str) -> None:
        return None

    def put_verdict(self, key: str, value: dict[str, Any]) -> None:
        self.keys.append(key)


# the verdict-cache keys each metric wrote before verdict families were objects (main at 214694c), one family or
# more each: an answer relevancy request now names its family, which the key leaves out, so the verdicts cached in
# stores keep serving
OLD_KEYS = {
    "answer_relevancy": "becf5d1f03433eff3d3550f42f19c1618c4b416b07de65d2301bbb71e9b66f54",
    "context_utilization": "7209db080c0668298dddd00cbf0318e262f3bcc2816721d228985d327f071cfd",
    "contextual_precision": "09a2acee6d9689ca0735c7451609c4169c33721ccc7dd8e2d238d1d04b722309",
    "contextual_recall": "ed340f6ab4e2d1872aac09c91ab52c82d1d539f38e53191a8d1fb9b38e3f6dc9",
    "contextual_relevancy": "7d1b7d53a335fc6c7dc38740e94182a9be455bbd98568736a22b2ad3d39f4096",
    "faithfulness": "961fa6390fa2e5035f93b8639e4b70d9b0d5c62ce19aecb4142e399e6a074ebc",
    "rubric_context_recall": "29504e571e0bf5a551b0bf545dd625f0dcf701c580ce44c286f7842850d0896e",
}
EXPECTED = "Two years from the date of purchase."


@pytest.mark.parametrize("key", sorted(OLD_KEYS))
def test_verdict_cache_keys_are_those_of_the_string_families(key: str) -> None:
    keys = _Keys()
    tc = LLMTestCase(input=QUESTION, actual_output=ANSWER, expected_output=EXPECTED, retrieval_context=NODES)

    async def go() -> None:
        with use_run_context(RunContext(cache=VerdictCache(backend=keys))):
            await BY_KEY[key](model=FakeJudge()).a_measure(tc)

    asyncio.run(go())
    assert keys.keys == [OLD_KEYS[key]]


def test_answer_relevancy_names_its_family_and_the_embedded_judge_reads_it(local: LocalJudge) -> None:
    seen: list[JudgeRequest] = []
    judge = FakeJudge(default=lambda req, item: seen.append(req) or "yes")
    AnswerRelevancyMetric(model=judge).measure(LLMTestCase(input=QUESTION, actual_output=ANSWER))
    assert seen and seen[0].verdict_family is family("answer_relevance") and seen[0].task == "sentence_relevance"
    # the embedded judge answers the family named, not a guess from the request's shape: the same statements asked as
    # sentence relevance get sentence relevance's reasons
    req = request_of(family("answer_relevance"))
    as_answer = ask(local, req).verdicts
    as_sentences = ask(local, req.model_copy(update={"family": None})).verdicts
    assert all("the question" in v["reason"] and v["reason"].startswith(("Addresses", "Does not address"))
               for v in as_answer.values())
    assert all(v["reason"].startswith(("Relevant", "Not relevant")) for v in as_sentences.values())
    assert as_answer["s2"]["verdict"] == "no"  # "Thanks for asking!" is filler

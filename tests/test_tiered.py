"""Tiered judging: the cheap judge answers every item, only its uncertain items go to the strong judge (a real
OpenAI-compatible server on loopback, or a FakeJudge), each verdict says which tier gave it, and a failing strong
tier is an error unless the fallback is chosen, which each verdict then records."""

from __future__ import annotations

import pytest
from langchain_core.language_models import BaseChatModel

from contextjudge import LLMTestCase, evaluate
from contextjudge.errors import ConfigurationError
from contextjudge.judges._models import judge_identity
from contextjudge.judges._options import JudgeOptions
from contextjudge.judges._schemas import Answer
from contextjudge.judges._tiered import TieredJudge
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRelevancyMetric,
    RubricContextRecallMetric,
)
from contextjudge.testing import FakeJudge

NODES = ["Paris is the capital of France.", "Lyon is a large French city.", "Bread is baked from flour.",
         "Some text nobody scored."]
CASE = LLMTestCase(input="What is the capital of France?", actual_output="Paris.",
                   expected_output="The capital of France is Paris.", retrieval_context=NODES)
# The cheap judge is sure of n1 (yes) and n3 (no), unsure of n2 (0.55: yes, barely) and gives n4 no confidence.
CONFIDENCES = {"Paris": 0.9, "Lyon": 0.55, "Bread": 0.1}
FAST = JudgeOptions(max_attempts=2, attempt_timeout=15.0, deadline=30.0, backoff_initial=0.01, backoff_max=0.05)


def cheap_judge() -> FakeJudge:
    # confidences reach the client on the plain chat path (see FakeJudge.confidences)
    return FakeJudge(style="json", confidences=CONFIDENCES, model_name="cheap-fake")


def run(judge, metric_cls=ContextualPrecisionMetric, cases=(CASE,), **kw):
    res = evaluate(list(cases), [metric_cls(model=judge)], show_progress=False, judge_options=FAST, **kw)
    return res, res.test_results[0].metrics_data[0]


def test_only_uncertain_items_go_up_and_each_verdict_names_its_tier():
    strong = FakeJudge(rules={"Lyon": "no", "nobody": "yes"}, default="no", model_name="strong-fake")
    res, m = run(TieredJudge(strong, cheap=cheap_judge(), band=(0.3, 0.7)))
    assert m.error is None
    assert [c["ids"] for c in strong.calls] == [["n2", "n4"]]  # one sub-request, only the uncertain ids
    by_id = {v["id"]: v for v in m.verdicts}
    assert {k: (v["tier"], v["verdict"]) for k, v in by_id.items()} == {
        "n1": ("cheap", "yes"), "n2": ("strong", "no"), "n3": ("cheap", "no"), "n4": ("strong", "yes")}
    assert by_id["n2"]["cheap_verdict"] == "yes" and by_id["n2"]["cheap_confidence"] == 0.55
    # precision of yes, no, no, yes: (1/1 + 2/4) / 2
    assert m.score == pytest.approx(0.75)
    assert res.tiers["cheap"]["items"] == 4 and res.tiers["cheap"]["final"] == 2
    assert res.tiers["strong"]["items"] == 2 and res.tiers["strong"]["final"] == 2
    assert res.tiers["cheap"]["calls"] == 1 and res.tiers["strong"]["calls"] == 1
    assert res.tiers["strong"]["input_tokens"] > 0
    assert m.evaluation_model.startswith("tiered(cheap-fake -> strong-fake")


def test_band_edges_are_inclusive_and_a_zero_width_band_sends_only_items_without_confidence():
    strong = FakeJudge(default="yes")
    _, m = run(TieredJudge(strong, cheap=cheap_judge(), band=(0.55, 0.9)))
    assert [c["ids"] for c in strong.calls] == [["n1", "n2", "n4"]]
    strong2 = FakeJudge(default="yes")
    res, _ = run(TieredJudge(strong2, cheap=cheap_judge(), band=(0.5, 0.5)))
    assert [c["ids"] for c in strong2.calls] == [["n4"]]
    assert res.tiers["cheap"]["final"] == 3


def test_nothing_uncertain_never_calls_the_strong_judge():
    cheap = FakeJudge(style="json", confidences={"": 0.95})  # every item: sure, yes
    strong = FakeJudge()
    res, m = run(TieredJudge(strong, cheap=cheap))
    assert strong.calls == [] and m.score == 1.0
    assert "strong" not in res.tiers and res.tiers["cheap"]["final"] == 4


def test_sentence_relevance_sends_up_sentence_ids():
    cheap = FakeJudge(style="json", confidences={"Lyon": 0.5, "Paris": 0.8, "": 0.05})
    strong = FakeJudge(default="yes")
    _, m = run(TieredJudge(strong, cheap=cheap), ContextualRelevancyMetric)
    assert [c["ids"] for c in strong.calls] == [["n2.s1"]]
    assert [v["tier"] for v in m.verdicts] == ["cheap", "strong", "cheap", "cheap"]


def test_rubric_recall_goes_to_the_strong_judge():
    cheap, strong = cheap_judge(), FakeJudge(rubric_score=0.25)
    res, m = run(TieredJudge(strong, cheap=cheap), RubricContextRecallMetric)
    assert m.score == 0.25 and cheap.calls == [] and strong.count("rubric_recall") == 1
    assert res.tiers == {"strong": {**res.tiers["strong"], "items": 1, "final": 1}}


def test_identity_holds_both_judges_the_band_and_the_fallback():
    strong = FakeJudge(model_name="s")
    base = TieredJudge(strong, cheap=cheap_judge())
    ids = {judge_identity(base), judge_identity(TieredJudge(strong, cheap=cheap_judge(), band=(0.2, 0.8))),
           judge_identity(TieredJudge(strong, cheap=cheap_judge(), fallback=True)),
           judge_identity(TieredJudge(FakeJudge(model_name="other"), cheap=cheap_judge())),
           judge_identity(TieredJudge(strong, cheap=FakeJudge(style="json", model_name="other-cheap")))}
    assert len(ids) == 5
    assert judge_identity(base) == judge_identity(TieredJudge(strong, cheap=cheap_judge()))


class BothAgree(BaseChatModel):
    """A wrapper judge of this test's own, through the same protocol as TieredJudge: yes only when both say yes."""

    first: BaseChatModel
    second: BaseChatModel

    @property
    def _llm_type(self) -> str:
        return "both-agree"

    def _generate(self, *args, **kwargs):
        raise NotImplementedError

    def contextjudge_identity(self, clients, identity):
        return identity

    def contextjudge_billed(self):
        return (self.first, self.second)

    async def contextjudge_ask(self, request, build, clients):
        a = await clients.client_for(self.first).ask(request, build)
        b = await clients.client_for(self.second).ask(request, build)
        both = {vid: {**v, "verdict": "yes" if v["verdict"] == b.verdicts[vid]["verdict"] == "yes" else "no"}
                for vid, v in a.verdicts.items()}
        return Answer(verdicts=both, method=a.method)

    async def contextjudge_text(self, prompt, clients):
        return await clients.client_for(self.second).complete_text(prompt)


def test_any_wrapper_judge_goes_through_the_client_that_knows_none_of_them():
    first = FakeJudge(rules={"Paris": "yes", "Lyon": "yes"}, default="no", model_name="first")
    second = FakeJudge(rules={"Paris": "yes"}, default="no", model_name="second")
    _, m = run(BothAgree(first=first, second=second), cases=(CASE, CASE))
    assert m.error is None
    assert [v["verdict"] for v in m.verdicts] == ["yes", "no", "no", "no"] and m.score == 1.0
    assert len(first.calls) == 1 and len(second.calls) == 1  # each inner judge has its own cache in the run


@pytest.mark.parametrize("band", [(0.7, 0.3), (-0.1, 0.5), (0.2, 1.5), ("a", "b"), (0.5,)])
def test_a_bad_band_says_what_to_pass(band):
    with pytest.raises(ConfigurationError, match="band"):
        TieredJudge(FakeJudge(), cheap=cheap_judge(), band=band)


def test_a_tiered_judge_is_not_a_chat_model_on_its_own():
    with pytest.raises(NotImplementedError, match="model="):
        TieredJudge(FakeJudge(), cheap=cheap_judge()).invoke("hello")


def test_each_tier_has_its_own_cache_within_a_run():
    strong = FakeJudge(default="yes")
    cheap = cheap_judge()
    res, _ = run(TieredJudge(strong, cheap=cheap), cases=(CASE, CASE))
    assert len(cheap.calls) == 1 and len(strong.calls) == 1  # the second case is answered from the cache
    assert res.tiers["cheap"]["cache_hits"] == 1 and res.tiers["strong"]["cache_hits"] == 1
    assert res.tiers["cheap"]["items"] == 8 and res.tiers["strong"]["items"] == 4


# ------------------------------------------------------------------------------------ a real server as the strong tier
langchain_openai = pytest.importorskip("langchain_openai")
from fault_server import Fault, FaultServer  # noqa: E402


def chat(url: str):
    return langchain_openai.ChatOpenAI(model="strong-server", base_url=url, api_key="x", max_retries=0,
                                       temperature=0)


def test_the_strong_tier_over_http_sees_only_the_uncertain_ids():
    with FaultServer(yes_words=["nobody"], keep_prompts=True) as srv:
        res, m = run(TieredJudge(chat(srv.url), cheap=cheap_judge()))
        prompts = [r["prompt"] for r in srv.requests if r["status"] == 200]
    assert m.error is None
    assert len(prompts) == 1
    assert "Lyon" in prompts[0] and "nobody" in prompts[0]
    assert "Paris is the capital" not in prompts[0] and "Bread" not in prompts[0]
    assert {v["id"]: (v["tier"], v["verdict"]) for v in m.verdicts} == {
        "n1": ("cheap", "yes"), "n2": ("strong", "no"), "n3": ("cheap", "no"), "n4": ("strong", "yes")}
    assert res.tiers["strong"]["calls"] == 1 and res.tiers["strong"]["input_tokens"] > 0


def test_a_strong_tier_that_keeps_failing_makes_the_items_errors():
    with FaultServer(faults=[Fault("http", status=503, times=None)]) as srv:
        res, m = run(TieredJudge(chat(srv.url), cheap=cheap_judge()))
    assert m.score is None and m.error is not None
    assert "2 of 4 items sent up" in m.error and "503" in m.error and "fallback=True" in m.error
    assert res.tiers["strong"]["errors"] == 2 and res.tiers["strong"]["final"] == 0


def test_a_strong_server_that_is_down_falls_back_only_when_asked_and_says_so_on_each_verdict():
    srv = FaultServer().start()
    url = srv.url
    srv.stop()  # nothing listens there any more: connection refused
    res, m = run(TieredJudge(chat(url), cheap=cheap_judge()))
    assert m.score is None and "2 of 4 items" in m.error
    res, m = run(TieredJudge(chat(url), cheap=cheap_judge(), fallback=True))
    assert m.error is None
    by_id = {v["id"]: v for v in m.verdicts}
    assert by_id["n1"]["tier"] == "cheap" and "fallback_reason" not in by_id["n1"]
    for vid in ("n2", "n4"):
        assert by_id[vid]["tier"] == "cheap-fallback"
        assert "strong-server" in by_id[vid]["fallback_reason"] and "failed" in by_id[vid]["fallback_reason"]
    assert by_id["n2"]["verdict"] == "yes"  # the cheap verdict, kept
    assert res.tiers["cheap-fallback"]["final"] == 2 and res.tiers["strong"]["errors"] == 2


def test_the_embedded_judge_as_cheap_tier_sends_up_exactly_its_uncertain_items(ten_node_case):
    from contextjudge.judges._local import LocalJudge

    local = LocalJudge()
    _, alone = run(local, cases=(ten_node_case,))
    confs = sorted(v["confidence"] for v in alone.verdicts)
    band = (confs[3], confs[6])  # a band that holds some of its confidences and not others, whatever the model
    want = [v["id"] for v in alone.verdicts if band[0] <= v["confidence"] <= band[1]]
    assert 0 < len(want) < 10  # the case has both sure and unsure nodes, or the test would prove nothing
    with FaultServer(yes_words=["paris"]) as srv:
        res, m = run(TieredJudge(chat(srv.url), cheap=local, band=band), cases=(ten_node_case,))
    assert m.error is None
    assert [v["id"] for v in m.verdicts if v["tier"] == "strong"] == want
    assert res.tiers["cheap"]["items"] == 10 and res.tiers.get("strong", {}).get("items", 0) == len(want)
    for v, v0 in zip(m.verdicts, alone.verdicts, strict=False):
        if v["tier"] == "cheap":
            assert v["verdict"] == v0["verdict"]
        else:
            text = ten_node_case.retrieval_context[v["rank"] - 1].text.lower()
            assert v["verdict"] == ("yes" if "paris" in text else "no")  # the server's answer


def test_a_calibrated_cheap_tier_moves_the_band_with_its_fitted_threshold(tmp_path):
    # The calibrated cheap judge says yes at confidence >= 0.2 for node usefulness: Bread (0.1) is a "no" just below
    # where its verdict flips, Lyon (0.55) a clear "yes". The band (0.3, 0.7), stated around 0.5, moves by 0.2 - 0.5
    # to (0.0, 0.4): Bread goes up, Lyon does not (unmoved, it would send Lyon up and keep Bread's near-miss).
    from contextjudge.judges._calibration import Calibration
    from contextjudge.judges._models import load_calibrated_judge

    path = tmp_path / "cal.json"
    Calibration(judge="local", thresholds={"node_usefulness": 0.2}).write(path)
    cheap = load_calibrated_judge(path, judge=cheap_judge())
    strong = FakeJudge(default="no", model_name="strong-fake")
    tj = TieredJudge(strong, cheap=cheap, band=(0.3, 0.7))
    _, m = run(tj)
    assert m.error is None
    assert [c["ids"] for c in strong.calls] == [["n3", "n4"]]
    assert tj.band_for(None) == (0.3, 0.7)
    # a family without a threshold keeps the band as given
    strong2 = FakeJudge(default="no")
    run(TieredJudge(strong2, cheap=load_calibrated_judge(path, judge=cheap_judge()), band=(0.3, 0.7)),
        metric_cls=ContextualRelevancyMetric)
    assert [c["ids"] for c in strong2.calls] == [["n2.s1", "n4.s1"]]


async def test_two_runs_in_a_row_inside_a_running_loop_each_count_their_own_tiers():
    """What a user does: the same TieredJudge (strong tier over loopback HTTP) in two aevaluate() calls from a running
    event loop. langchain-openai keeps one HTTP client per loop; each run counts only its own tiers, and the second
    run asks the strong judge again (a new run, a new in-memory cache)."""
    from contextjudge import aevaluate

    with FaultServer(yes_words=["nobody"]) as srv:
        judge = TieredJudge(chat(srv.url), cheap=cheap_judge())
        runs = [await aevaluate([CASE], [ContextualPrecisionMetric(model=judge)], show_progress=False,
                                judge_options=FAST) for _ in range(2)]
        served = sum(1 for r in srv.requests if r["status"] == 200)
    for res in runs:
        m = res.test_results[0].metrics_data[0]
        assert m.error is None and m.score == pytest.approx(0.75)
        assert res.tiers["strong"]["items"] == 2 and res.tiers["strong"]["calls"] == 1
        assert res.tiers["cheap"]["items"] == 4
    assert served == 2

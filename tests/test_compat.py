"""DeepEval's, Ragas' and Opik's documented usage runs on contextjudge with only the import changed.

Each test re-creates a peer's documented usage (our own data, the peer's calls) and judges it with a scripted judge
that answers item by item (some "no", some hedged, some malformed), then checks the score against the peer's own
documented formula: average precision for the precision metrics, supported / all sentences for recall, relevant /
all statements for relevancy. The full corpus of re-created documentation snippets runs in
``test_documented_snippets_run`` (slow) and in ``benchmarks/compat_snippets.py``.
"""

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from contextjudge.testing import FakeJudge, JudgeHTTPError

ROOT = Path(__file__).resolve().parent.parent
NODES = ["The Rijksmuseum is a museum in Amsterdam.", "The Louvre is a museum in Paris.",
         "Amsterdam has many canals."]


def judge(**kw):
    """Yes for the Rijksmuseum and canals nodes, no for the Louvre (unless told otherwise)."""
    kw.setdefault("rules", {"Louvre": "no"})
    kw.setdefault("default", "yes")
    return FakeJudge(**kw)


def ap(flags):
    """Average precision as DeepEval and Ragas document it: sum_k precision@k * r_k / number of relevant."""
    hits, total = 0, 0.0
    for k, r in enumerate(flags, start=1):
        hits += r
        total += r * hits / k
    return total / hits if hits else 0.0


class Garbled(FakeJudge):
    """A judge whose answer parses as JSON but has no verdicts in it (a malformed answer), as plain text."""

    style: str = "json"

    def answer(self, request):
        return {"verdicts": "they all look fine to me"}


# ------------------------------------------------------------------------------------------------------- DeepEval
def test_deepeval_module_paths_and_names():
    from contextjudge.compat import deepeval
    from contextjudge.compat.deepeval.dataset import ConversationalGolden, EvaluationDataset, Golden  # noqa: F401
    from contextjudge.compat.deepeval.errors import MissingTestCaseParamsError  # noqa: F401
    from contextjudge.compat.deepeval.evaluate import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig  # noqa: F401
    from contextjudge.compat.deepeval.evaluate.configs import AsyncConfig as A2
    from contextjudge.compat.deepeval.metrics.contextual_precision import ContextualPrecisionTemplate as T
    from contextjudge.compat.deepeval.metrics.turn_contextual_relevancy import TurnContextualRelevancyMetric  # noqa: F401
    from contextjudge.compat.deepeval.test_case import (
        LLMTestCaseParams,
        MultiTurnParams,
        SingleTurnParams,
        ToolCall,
        TurnParams,
    )

    assert callable(deepeval.evaluate) and not hasattr(deepeval.evaluate, "__path__")
    assert A2 is AsyncConfig and LLMTestCaseParams is SingleTurnParams and TurnParams is MultiTurnParams
    assert SingleTurnParams.RETRIEVAL_CONTEXT.value == "retrieval_context"
    assert MultiTurnParams.EXPECTED_OUTCOME.value == "expected_outcome"
    assert ToolCall(name="search", input_parameters={"q": "x"}).name == "search"
    assert "Nodes by rank" in T.generate_verdicts(input="q", expected_output="a", retrieval_context=["x"])
    assert "scored 0.50" in T.generate_reason(input="q", score="0.50", verdicts=[{"verdict": "no"}])
    assert all(hasattr(deepeval, n) for n in deepeval.__all__)


def test_deepeval_precision_score_is_average_precision_with_no_verdicts():
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase

    j = judge()
    m = ContextualPrecisionMetric(threshold=0.7, model=j, include_reason=True)
    m.measure(LLMTestCase(input="Where is the Rijksmuseum?", actual_output="Amsterdam.",
                          expected_output="The Rijksmuseum is in Amsterdam, a city of canals.",
                          retrieval_context=NODES))
    assert m.score == pytest.approx(ap([1, 0, 1]))  # 0.8333
    assert m.success and "rank 2" in m.reason and j.count() == 1


def test_deepeval_retrieved_context_data_is_grouped_by_source_for_precision_and_score_only_mode():
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, ContextualRecallMetric, LLMTestCase
    from contextjudge.compat.deepeval.test_case import RetrievedContextData

    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam. It has canals.",
                       retrieval_context=[RetrievedContextData(context=NODES[0], source="wiki/rijks"), NODES[1],
                                          RetrievedContextData(context=NODES[2], source="wiki/rijks")])
    j = judge()
    precision = ContextualPrecisionMetric(model=j, threshold=None)
    precision.measure(case)
    assert j.calls[0]["ids"] == ["n1", "n2"] and precision.verdicts[0]["node_id"] == "wiki/rijks"
    assert precision.score == pytest.approx(ap([1, 0])) and precision.success  # one node per source, ranked first
    jr = judge()
    ContextualRecallMetric(model=jr).measure(case)  # recall sees the chunks one by one, as in DeepEval
    assert "<n3>" in jr.calls[0]["prompt"]


def test_deepeval_recall_and_relevancy_formulas():
    from contextjudge.compat.deepeval import ContextualRecallMetric, ContextualRelevancyMetric, LLMTestCase

    case = LLMTestCase(input="Where is the Rijksmuseum?", actual_output="Amsterdam.",
                       expected_output="The Rijksmuseum is in Amsterdam. It opened in 1800. It has a garden.",
                       retrieval_context=["The Rijksmuseum is in Amsterdam. The Louvre is in Paris."])
    recall = ContextualRecallMetric(model=judge(rules={"1800": "no"}))
    recall.measure(case)
    assert recall.score == pytest.approx(2 / 3)  # supported sentences / sentences of expected_output
    relevancy = ContextualRelevancyMetric(model=judge())
    relevancy.measure(case)
    assert relevancy.score == pytest.approx(1 / 2)  # relevant statements / statements of the retrieval


def test_deepeval_hedged_answer_is_reasked_and_malformed_answer_is_an_error_not_a_score():
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate

    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES)
    hedging = judge(sequences={"canals": ["maybe", "yes"]})  # hedges on n3 once, answers on the re-ask
    m = ContextualPrecisionMetric(model=hedging)
    m.measure(case)
    assert m.score == pytest.approx(ap([1, 0, 1])) and hedging.count() == 2
    res = evaluate(test_cases=[case], metrics=[ContextualPrecisionMetric(model=Garbled())],
                   display_config=None)
    md = res.test_results[0].metrics_data[0]
    assert md.score is None and md.error and not md.success


def test_deepeval_custom_template_prompt_reaches_judge_and_answer_is_read_by_id(capsys):

    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
    from contextjudge.compat.deepeval.metrics.contextual_precision import ContextualPrecisionTemplate
    from contextjudge.compat.deepeval.test_case import LLMTestCase

    class CustomTemplate(ContextualPrecisionTemplate):
        @staticmethod
        def generate_verdicts(input: str, expected_output: str, retrieval_context: list[str]):
            return f"OUR HOUSE PROMPT. Q={input} A={expected_output} DOCS={retrieval_context}"

        @staticmethod
        def generate_reason(input: str, score: str, verdicts: list):
            return f"OUR REASON PROMPT {score} {len(verdicts)}"

    j = judge(omit_ids={"n2"})  # leaves n2 out of its first answer: re-asked, with the user's prompt again
    m = ContextualPrecisionMetric(model=j, evaluation_template=CustomTemplate)
    m.measure(LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.",
                          retrieval_context=NODES))
    assert m.score == pytest.approx(ap([1, 0, 1]))
    verdict_calls = [c for c in j.calls if c["task"] == "node_usefulness"]
    assert len(verdict_calls) == 2  # the first answer and the re-ask for n2
    first = verdict_calls[0]["prompt"]
    assert "OUR HOUSE PROMPT. Q=Where is the Rijksmuseum?" in first and NODES[1] in first
    assert "n1, n2, n3" in first and "<n2>The Louvre is a museum in Paris.</n2>" in first  # the ids it reads by
    assert "OUR HOUSE PROMPT" in verdict_calls[1]["prompt"] and verdict_calls[1]["ids"] == ["n2"]
    reason_calls = [c for c in j.calls if c["task"] is None]
    assert len(reason_calls) == 1 and "OUR REASON PROMPT 0.83 3" in reason_calls[0]["prompt"]
    assert m.reason == "scripted summary"


def test_deepeval_evaluate_prints_table_and_pass_rates_and_honours_display_config(capsys, tmp_path):
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate
    from contextjudge.compat.deepeval.evaluate import DisplayConfig

    cases = [LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES),
             LLMTestCase(input="Where is the Louvre?", expected_output="In Paris.",
                         retrieval_context=[NODES[1], NODES[0]])]
    metric = ContextualPrecisionMetric(threshold=0.9, model=judge(), verbose_mode=True)
    res = evaluate(test_cases=cases, metrics=[metric])
    out = capsys.readouterr().out
    assert "Contextual Precision" in out and "0.833" in out and "FAIL" in out and "PASS" not in out
    assert "0.00% pass rate (0 of 2)" in out and '"verdict": "no"' in out  # verbose: the verdicts
    tr = res.test_results[0]
    assert tr.input == "Where is the Rijksmuseum?" and tr.expected_output == "In Amsterdam."
    assert tr.retrieval_context == NODES and tr.conversational is False and tr.actual_output is None
    assert tr.metrics_data[0].evaluation_cost is None and res.test_run_id == res.run_id and res.confident_link is None
    evaluate(test_cases=cases, metrics=[ContextualPrecisionMetric(threshold=0.9, model=judge())],
             display_config=DisplayConfig(print_results=False, results_folder=str(tmp_path), results_subfolder="r"))
    assert capsys.readouterr().out == ""
    written = json.loads(next((tmp_path / "r").glob("test_run_*.json")).read_text())
    assert len(written["test_results"]) == 2 and written["summary"]["Contextual Precision"]["scored"] == 2


def test_deepeval_configs_skip_missing_and_cache(tmp_path, monkeypatch, capsys):
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate
    from contextjudge.compat.deepeval.evaluate import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig

    monkeypatch.chdir(tmp_path)
    quiet = DisplayConfig(print_results=False, show_indicator=False)
    ok = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES)
    missing = LLMTestCase(input="Where is the Louvre?", retrieval_context=NODES)  # no expected_output
    res = evaluate([ok, missing], [ContextualPrecisionMetric(model=judge())], display_config=quiet,
                   error_config=ErrorConfig(skip_on_missing_params=True), async_config=AsyncConfig(run_async=False))
    assert len(res.test_results[0].metrics_data) == 1 and res.test_results[1].metrics_data == []
    first, second = judge(), judge()
    evaluate([ok], [ContextualPrecisionMetric(model=first)], display_config=quiet, cache_config=CacheConfig())
    again = evaluate([ok], [ContextualPrecisionMetric(model=second)], display_config=quiet,
                     cache_config=CacheConfig(use_cache=True))
    assert first.count() == 1 and second.count() == 0  # read back from .deepeval/
    assert again.test_results[0].metrics_data[0].score == pytest.approx(ap([1, 0, 1]))
    assert (tmp_path / ".deepeval").is_dir()


def test_deepeval_dataset_files_goldens_and_test_cases(tmp_path):
    from contextjudge.compat.deepeval.dataset import ConversationalGolden, EvaluationDataset, Golden
    from contextjudge.compat.deepeval.test_case import LLMTestCase

    (tmp_path / "g.json").write_text(json.dumps([{"query": "Where?", "expected_output": "Here.",
                                                   "tools_called": [{"name": "search"}], "source_file": "a.md"}]))
    (tmp_path / "g.jsonl").write_text(json.dumps({"input": "When?", "context": ["x"], "comments": "c"}) + "\n")
    (tmp_path / "g.csv").write_text("input,expected_output,retrieval_context\nWho?,Me.,a|b\n")
    ds = EvaluationDataset(goldens=[Golden(input="Hi", actual_output="Hello", name="greeting",
                                           custom_column_key_values={"k": "v"}, additional_metadata={"m": 1})])
    ds.add_golden(Golden(input="Bye"))
    ds.add_goldens_from_json_file(str(tmp_path / "g.json"), input_key_name="query")
    ds.add_goldens_from_jsonl_file(str(tmp_path / "g.jsonl"))
    ds.add_goldens_from_csv_file(str(tmp_path / "g.csv"), retrieval_context_col_delimiter="|")
    assert [g.input for g in ds.goldens] == ["Hi", "Bye", "Where?", "When?", "Who?"]
    assert ds.goldens[2].tools_called[0].name == "search" and ds.goldens[2].source_file == "a.md"
    assert ds.goldens[4].retrieval_context == ["a", "b"] and ds.goldens[3].context == ["x"]
    ds.add_test_case(LLMTestCase(input="Hi", actual_output="Hello"))
    assert len(ds.test_cases) == 1 and not ds._multi_turn
    path = ds.save_as(file_type="jsonl", directory=str(tmp_path / "out"))
    assert len(Path(path).read_text().splitlines()) == 5
    conv = EvaluationDataset(goldens=[ConversationalGolden(scenario="A refund.", expected_outcome="Refunded.")])
    assert conv._multi_turn and conv.goldens[0].scenario == "A refund."
    with pytest.raises(ValueError, match="single-turn"):
        ds.add_golden(ConversationalGolden(scenario="x"))
    with pytest.raises(ValueError, match="ConversationalTestCase"):
        next(iter(conv.evals_iterator()))
    assert list(EvaluationDataset().evals_iterator()) == []


def test_deepeval_evals_iterator_drives_an_observed_rag_app(capsys):
    from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
    from contextjudge.compat.deepeval.tracing import observe, update_current_span

    j = judge()

    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=j)])
    def retrieve(question: str):
        return NODES[:2]

    @observe(metrics=[ContextualPrecisionMetric(model=j)])
    def app(question: str):
        docs = retrieve(question)
        update_current_span(input=question, actual_output="Amsterdam.", retrieval_context=docs)
        return "Amsterdam."

    dataset = EvaluationDataset(goldens=[Golden(input="Where is the Rijksmuseum?", expected_output="Amsterdam."),
                                         Golden(input="Where is the Louvre?", expected_output="Paris.")])
    for golden in dataset.evals_iterator():
        app(golden.input)
    res = dataset.evaluation_result
    assert len(res.test_results) == 4  # two spans with metrics per golden
    precision = [m.score for tr in res.test_results for m in tr.metrics_data if m.name == "Contextual Precision"]
    assert precision == [1.0, 1.0] and "Overall metric pass rates" in capsys.readouterr().out
    assert {tr.expected_output for tr in res.test_results} == {"Amsterdam.", "Paris."}  # filled from the goldens


def test_deepeval_evals_iterator_with_async_app_tasks():
    from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
    from contextjudge.compat.deepeval.evaluate import DisplayConfig
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
    from contextjudge.compat.deepeval.tracing import observe, update_current_span

    @observe(metrics=[ContextualPrecisionMetric(model=judge())])
    async def app(question: str):
        await asyncio.sleep(0)
        update_current_span(input=question, retrieval_context=NODES)
        return "ok"

    dataset = EvaluationDataset(goldens=[Golden(input="Where is the Rijksmuseum?", expected_output="Amsterdam."),
                                         Golden(input="Where else?", expected_output="Amsterdam.")])
    for golden in dataset.evals_iterator(display_config=DisplayConfig(print_results=False)):
        dataset.evaluate(app(golden.input))
    scores = [tr.metrics_data[0].score for tr in dataset.evaluation_result.test_results]
    assert scores == [pytest.approx(ap([1, 0, 1]))] * 2


def test_deepeval_assert_test_golden_forms():
    from contextjudge.compat.deepeval import assert_test
    from contextjudge.compat.deepeval.dataset import Golden
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, ContextualRecallMetric
    from contextjudge.compat.deepeval.tracing import observe, update_current_span

    @observe(metrics=[ContextualPrecisionMetric(model=judge(), threshold=0.5)])
    def app(question: str):
        update_current_span(input=question, actual_output="Amsterdam.", retrieval_context=NODES)
        return "Amsterdam."

    golden = Golden(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.")
    assert_test(golden=golden, observed_callback=app)  # 0.83 >= 0.5
    app(golden.input)  # DeepEval 4.x: call the app in the test, then assert on its trace
    assert_test(golden=golden)
    app(golden.input)
    with pytest.raises(AssertionError, match=r"1 of 2 metrics failed(.|\n)*Contextual Recall: score 0.000"):
        assert_test(golden=golden, metrics=[ContextualRecallMetric(model=judge(rules={"Amsterdam": "no"}),
                                                                   threshold=0.9)])
    with pytest.raises(ValueError, match="found no trace"):
        assert_test(golden=golden)  # the trace was used


def test_deepeval_errors_have_deepevals_builtin_bases():
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, MissingTestCaseParamsError
    from contextjudge.compat.deepeval.test_case import ConversationalTestCase, LLMTestCase, MLLMImage, Turn

    with pytest.raises(MissingTestCaseParamsError):
        ContextualPrecisionMetric(model=judge()).measure(LLMTestCase(input="q", retrieval_context=["x"]))
    img = MLLMImage(url="https://example.org/a.png")
    case = LLMTestCase(input=f"What is this? {img}", expected_output="A map.", retrieval_context=[f"A map {img}"])
    assert case.multimodal and not LLMTestCase(input="q").multimodal
    text_only = judge()
    with pytest.raises(ValueError, match="cannot take images"):
        ContextualPrecisionMetric(model=text_only).measure(case)
    assert text_only.count() == 0  # refused before any call
    conv = ConversationalTestCase(turns=[Turn(role="user", content="hi"), Turn(role="assistant", content="yo")],
                                  scenario="greeting", chatbot_role="a librarian", user_description="a reader",
                                  context=["c"], flaky=True)
    assert conv.chatbot_role == "a librarian" and not conv.multimodal and conv.context == ["c"]
    with pytest.raises(ValueError):  # DeepEval raises ValueError for a conversation given to a single-turn metric
        ContextualPrecisionMetric(model=judge()).measure(conv)


# ---------------------------------------------------------------------------------------------------------- Ragas
def test_ragas_single_turn_sample_metrics_and_formulas():
    from contextjudge.compat.ragas import SingleTurnSample
    from contextjudge.compat.ragas.llms import LangchainLLMWrapper
    from contextjudge.compat.ragas.metrics import (
        ContextRelevance,
        ContextUtilization,
        LLMContextPrecisionWithoutReference,
        LLMContextPrecisionWithReference,
        LLMContextRecall,
    )

    llm = LangchainLLMWrapper(judge(rules={"Louvre": "no", "1800": "no"}))
    sample = SingleTurnSample(user_input="Where is the Rijksmuseum?", response="In Amsterdam.",
                              reference="The Rijksmuseum is in Amsterdam. It opened in 1800.",
                              retrieved_contexts=[NODES[1], NODES[0]])
    assert asyncio.run(LLMContextPrecisionWithReference(llm=llm).single_turn_ascore(sample)) == pytest.approx(0.5)
    assert LLMContextPrecisionWithoutReference(llm=llm).single_turn_score(sample) == pytest.approx(ap([0, 1]))
    assert ContextUtilization(llm=llm).single_turn_score(sample) == pytest.approx(0.5)
    assert LLMContextRecall(llm=llm).single_turn_score(sample) == pytest.approx(0.5)  # 1 of 2 sentences
    assert ContextRelevance(llm=llm).single_turn_score(sample) == pytest.approx(0.5)  # 1 of 2 statements


def test_ragas_llm_factory_takes_every_spelling_of_the_embedded_judges_without_a_client_call():
    """llm_factory("local-cross", client=openai_client) is the stacked embedded judge, not an OpenAI model of that
    name built on the client (which would send every verdict to a server that has no such model)."""
    from contextjudge.compat.ragas.llms import llm_factory

    for spelling in ("local", "Local-Cross", "embedded-cross"):
        llm = llm_factory(spelling, client=object())
        assert llm.judge == spelling


def test_ragas_collections_ascore_value_and_reason():
    from contextjudge.compat.ragas.llms import llm_factory
    from contextjudge.compat.ragas.metrics.collections import ContextPrecision, ContextRecall, ContextUtilization

    llm = llm_factory(judge())
    result = asyncio.run(ContextPrecision(llm=llm).ascore(user_input="Where is the Rijksmuseum?",
                                                          reference="In Amsterdam.",
                                                          retrieved_contexts=[NODES[1], NODES[0]]))
    assert result.value == pytest.approx(0.5) and "rank 2" in result.reason
    assert ContextUtilization(llm=llm).score(user_input="q", response="a", retrieved_contexts=NODES).value == \
        pytest.approx(ap([1, 0, 1]))
    with pytest.raises(TypeError, match="reference"):  # a missing argument is named, as Ragas' TypeError does
        ContextRecall(llm=llm).score(user_input="q", retrieved_contexts=NODES)


def test_ragas_evaluate_dataset_flow_nan_for_unscored_rows_and_usage(tmp_path):
    from contextjudge.compat.ragas import EvaluationDataset, SingleTurnSample, evaluate
    from contextjudge.compat.ragas.llms import LangchainLLMWrapper
    from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference, LLMContextRecall

    rows = [{"user_input": "Where is the Rijksmuseum?", "retrieved_contexts": NODES, "response": "Amsterdam.",
             "reference": "The Rijksmuseum is in Amsterdam."},
            {"user_input": "Where is the Louvre?", "retrieved_contexts": NODES, "response": "Paris."}]  # no reference
    ds = EvaluationDataset.from_list(rows)
    assert isinstance(ds[0], SingleTurnSample) and len(ds) == 2
    assert list(EvaluationDataset.from_pandas(ds.to_pandas()).to_list()[1]) == ["user_input", "retrieved_contexts",
                                                                              "response"]
    ds.to_csv(str(tmp_path / "d.csv"))
    assert EvaluationDataset.from_csv(str(tmp_path / "d.csv"))[0].retrieved_contexts == NODES
    result = evaluate(dataset=ds, metrics=[LLMContextPrecisionWithReference(), LLMContextRecall()],
                      llm=LangchainLLMWrapper(judge()), show_progress=False)
    df = result.to_pandas()
    assert df["llm_context_precision_with_reference"].dtype == float
    assert df["llm_context_precision_with_reference"][0] == pytest.approx(ap([1, 0, 1]))
    assert math.isnan(df["context_recall"][1]) and "expected_output" in df["context_recall_error"][1]
    assert math.isnan(result.scores[1]["llm_context_precision_with_reference"])
    tokens = result.total_tokens()
    assert tokens.input_tokens > 0 and result.total_cost(cost_per_input_token=1e-6, cost_per_output_token=0) == \
        pytest.approx(tokens.input_tokens * 1e-6)
    assert "llm_context_precision_with_reference" in repr(result)


def test_ragas_failing_judge_is_nan_with_reason_in_evaluate_and_raises_standalone():
    from contextjudge.compat.ragas import SingleTurnSample, evaluate
    from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference

    sample = SingleTurnSample(user_input="q", reference="a", retrieved_contexts=["x"])
    res = evaluate([sample], metrics=[LLMContextPrecisionWithReference()], llm=Garbled(), show_progress=False)
    assert math.isnan(res.scores[0]["llm_context_precision_with_reference"])
    assert res.to_pandas()["llm_context_precision_with_reference_error"][0]
    with pytest.raises(Exception, match="no usable verdict"):
        LLMContextPrecisionWithReference(llm=Garbled()).single_turn_score(sample)


def test_ragas_old_columns_dict_form():
    from contextjudge.compat.ragas import context_utilization, evaluate

    data_samples = {
        "question": ["When did the Berlin Wall fall?", "Who painted the Night Watch?"],
        "answer": ["In 1989.", "Rembrandt."],
        "contexts": [["The Berlin Wall fell in 1989."], ["The Louvre is in Paris.", "Rembrandt painted it."]],
    }
    score = evaluate(data_samples, metrics=[context_utilization], llm=judge(), show_progress=False)
    df = score.to_pandas()
    assert list(df["context_utilization"]) == [1.0, 0.5] and "question" in df.columns


@pytest.mark.parametrize("form", ["list_of_dicts", "dataframe"])
def test_ragas_new_columns_and_shapes(form):
    import pandas as pd

    from contextjudge.compat.ragas import context_precision, context_recall, evaluate

    rows = [{"user_input": "q?", "response": "Paris.", "retrieved_contexts": ["Paris is the capital of France."],
             "reference": "Paris is the capital of France."}]
    data = rows if form == "list_of_dicts" else pd.DataFrame(rows)
    res = evaluate(data, metrics=[context_precision, context_recall], llm=FakeJudge(default="yes"))
    assert res["context_precision"] == [1.0] and res["context_recall"] == [1.0]


def test_ragas_datasets_dataset_form():
    datasets = pytest.importorskip("datasets")
    from contextjudge.compat.ragas import evaluate
    from contextjudge.compat.ragas.metrics import context_utilization

    ds = datasets.Dataset.from_dict({"question": ["q"], "answer": ["a"], "contexts": [["a b c"]]})
    assert evaluate(ds, metrics=[context_utilization], llm=FakeJudge(default="yes"))["context_utilization"] == [1.0]


# ----------------------------------------------------------------------------------------------------------- Opik
def test_opik_context_precision_and_recall_with_opik_arguments():
    from contextjudge.compat.opik.evaluation.metrics import ContextPrecision, ContextRecall, ScoreResult

    precision = ContextPrecision(model=judge())
    res = precision.score(input="Where is the Rijksmuseum?", output="In Amsterdam.", expected_output="Amsterdam",
                          context=NODES)
    assert isinstance(res, ScoreResult) and res.name == "context_precision_metric"
    assert res.value == pytest.approx(ap([1, 0, 1])) and not res.scoring_failed and len(res.metadata["verdicts"]) == 3
    empty = precision.score(input="q", output="a", expected_output="b", context=None)
    assert empty.value == 0.0 and not empty.scoring_failed and "No retrieval context" in empty.reason
    recall = ContextRecall(model=FakeJudge(rubric_score=0.6))
    res = asyncio.run(recall.ascore(input="q", output="a", expected_output="b", context=["c"]))
    assert res.value == 0.6 and res.name == "context_recall_metric"


def test_opik_failure_is_flagged_not_scored():
    from contextjudge.compat.opik import ContextPrecision, ContextRecall

    res = ContextRecall(model=FakeJudge(failures=[JudgeHTTPError(401)])).score(input="q", output="a",
                                                                               expected_output="b", context=None)
    assert res.scoring_failed and res.value == 0.0 and "credentials" in res.reason
    res = ContextPrecision(model=Garbled()).score(input="q", output="a", expected_output="b", context=["x"])
    assert res.scoring_failed and "no usable verdict" in res.reason


# ------------------------------------------------------------------------------------------------- one engine
def test_compat_faces_share_the_store_and_the_verdict_cache(tmp_path):
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate
    from contextjudge.compat.ragas import evaluate as ragas_evaluate
    from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference
    from contextjudge.store import open_store

    db = tmp_path / "runs.db"
    j = judge()
    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES)
    de = evaluate([case], [ContextualPrecisionMetric(model=j)], store=str(db), show_progress=False)
    rg = ragas_evaluate([{"user_input": case.input, "reference": "In Amsterdam.", "retrieved_contexts": NODES}],
                        metrics=[LLMContextPrecisionWithReference()], llm=j, store=str(db), show_progress=False)
    assert j.count() == 1  # the second face read the first one's verdicts from the store's verdict cache
    assert rg.scores[0]["llm_context_precision_with_reference"] == de.test_results[0].metrics_data[0].score
    assert len(open_store(str(db)).list_runs()) == 2


@pytest.mark.slow
def test_documented_snippets_run():
    """Every re-created documentation snippet runs with only the import changed, but the known gaps
    (benchmarks/compat_snippets.py; tests/compat_snippets/known_failures.txt)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compat_snippets.py")], capture_output=True,
                          text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr
    assert "not a known gap" not in done.stdout, done.stdout
    known = [line.split("|")[0].strip() for line in (ROOT / "tests" / "compat_snippets" / "known_failures.txt")
             .read_text().splitlines() if line.strip() and not line.startswith("#")]
    listed = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ") and ".py:" in line]
    assert sorted(listed) == sorted(known), done.stdout  # a known gap that now runs: take it off the list
    first = done.stdout.splitlines()[0]
    ran, total = (int(x) for x in first.split(": ")[1].split(" (")[0].split(" of "))
    assert ran / total >= 0.9, first


# ---------------------------------------------------------------------- a real judge over HTTP, a running loop
def _http_judge(srv):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="fault-judge", base_url=srv.url, api_key="x", max_retries=0, timeout=10)


def test_custom_template_over_a_real_http_judge_with_a_missing_id_and_a_broken_judge(capsys):
    from fault_server import Fault, FaultServer

    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate
    from contextjudge.compat.deepeval.metrics.contextual_precision import ContextualPrecisionTemplate

    class CustomTemplate(ContextualPrecisionTemplate):
        @staticmethod
        def generate_verdicts(input: str, expected_output: str, retrieval_context: list):
            return f"HOUSE PROMPT: which of these help answer {input!r} as {expected_output!r}? {retrieval_context}"

    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES)
    with FaultServer(yes_words=["Rijksmuseum", "canals"], faults=[Fault("missing_id", times=1)],
                     keep_prompts=True) as srv:
        metric = ContextualPrecisionMetric(model=_http_judge(srv), evaluation_template=CustomTemplate)
        metric.measure(case)
        metric.measure(case)  # twice in a row: the second is the same score
        prompts = [r["prompt"] for r in srv.requests]
    assert metric.score == pytest.approx(ap([1, 0, 1]))
    assert all("HOUSE PROMPT: which of these help answer" in p for p in prompts) and len(prompts) >= 2
    from contextjudge.judges._options import JudgeOptions

    with FaultServer(faults=[Fault("invalid_json", times=None)]) as srv:
        broken = ContextualPrecisionMetric(model=_http_judge(srv), evaluation_template=CustomTemplate,
                                           judge_options=JudgeOptions(max_attempts=1, backoff_initial=0.01))
        res = evaluate([case], [broken])
    md = res.test_results[0].metrics_data[0]
    assert md.score is None and md.error and "ERROR" in capsys.readouterr().out


def test_ragas_evaluate_over_a_judge_that_is_down_is_nan_with_the_reason():
    from fault_server import Fault, FaultServer

    from contextjudge.compat.ragas import evaluate
    from contextjudge.compat.ragas.llms import LangchainLLMWrapper
    from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference

    rows = [{"user_input": "Where is the Rijksmuseum?", "reference": "Amsterdam.", "retrieved_contexts": NODES}]
    with FaultServer(faults=[Fault("http", status=401, times=None)]) as srv:
        res = evaluate(rows, metrics=[LLMContextPrecisionWithReference()], llm=LangchainLLMWrapper(_http_judge(srv)),
                       show_progress=False)
    df = res.to_pandas()
    assert math.isnan(df["llm_context_precision_with_reference"][0])
    assert "401" in df["llm_context_precision_with_reference_error"][0] or \
        "credentials" in df["llm_context_precision_with_reference_error"][0]


async def test_faces_inside_a_running_event_loop(capsys):
    from contextjudge.compat.deepeval import ContextualPrecisionMetric, LLMTestCase, evaluate
    from contextjudge.compat.opik import ContextPrecision
    from contextjudge.compat.ragas import evaluate as ragas_evaluate
    from contextjudge.compat.ragas.metrics.collections import ContextRecall

    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", retrieval_context=NODES)
    res = evaluate([case], [ContextualPrecisionMetric(model=judge())])  # sync call from inside the loop
    assert res.test_results[0].metrics_data[0].score == pytest.approx(ap([1, 0, 1]))
    rg = ragas_evaluate([{"user_input": case.input, "reference": "x y", "retrieved_contexts": NODES}],
                        metrics=None, llm=judge(), show_progress=False)
    assert rg.scores[0]["context_precision"] == pytest.approx(ap([1, 0, 1]))
    assert ContextRecall(llm=judge()).score(user_input="q", reference="Amsterdam.",
                                            retrieved_contexts=NODES).value == 1.0
    assert (await ContextPrecision(model=judge()).ascore(input="q", output="a", expected_output="b",
                                                         context=NODES)).value == pytest.approx(ap([1, 0, 1]))


def test_deepeval_own_unit_test_shapes(monkeypatch):
    """Re-created from DeepEval's tests/test_metrics for the context metrics: extra fields on the case, sync and async
    modes, ``multimodal`` set from the case, a text-only model refusing images with ValueError, and the turn recall
    metric judging the conversation's expected_outcome."""
    from contextjudge.compat.deepeval import evaluate
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, TurnContextualRecallMetric
    from contextjudge.compat.deepeval.test_case import ConversationalTestCase, LLMTestCase, MLLMImage, ToolCall, Turn

    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")  # a ChatOpenAI judge is built, never called
    fields = {"tools_called": [ToolCall(name="ImageAnalysis"), ToolCall(name="ToolQuery")],
              "expected_tools": [ToolCall(name="ImageAnalysis")], "context": [NODES[0]]}
    case = LLMTestCase(input="Where is the Rijksmuseum?", expected_output="In Amsterdam.", actual_output="Amsterdam.",
                       retrieval_context=NODES, **fields)
    for async_mode in (False, True):
        metric = ContextualPrecisionMetric(async_mode=async_mode, model=judge())
        metric.measure(case)
        assert metric.score is not None and metric.reason is not None and case.multimodal is False
    assert evaluate([case], [ContextualPrecisionMetric(model=judge())]) is not None
    image = MLLMImage(url="https://example.org/car.png")
    picture = LLMTestCase(input=f"What's shown in this image? {image}", expected_output="A car.",
                          actual_output="A car.", retrieval_context=[f"Cars are great to look at {image}"], **fields)
    assert picture.multimodal is True
    with pytest.raises(ValueError):
        ContextualPrecisionMetric(async_mode=False, model="gpt-3.5-turbo").measure(picture)
    seeing = judge(supports_images=True)
    ContextualPrecisionMetric(model=seeing).measure(picture)
    assert seeing.calls[0]["images"]  # the image reached the multimodal judge
    j = judge()
    conv = ConversationalTestCase(turns=[Turn(role="user", content="Where is the Rijksmuseum?"),
                                         Turn(role="assistant", content="Amsterdam.", retrieval_context=NODES)],
                                  expected_outcome="The assistant says the Rijksmuseum is in Amsterdam.",
                                  chatbot_role="A helpful assistant")
    TurnContextualRecallMetric(async_mode=True, model=j).measure(conv)
    assert "The assistant says the Rijksmuseum is in Amsterdam." in j.calls[0]["prompt"]


def test_deepeval_evaluate_names_each_test_result_as_deepeval_does(capsys):
    """Issue 48 item 9: ``test_results[i].name`` was None; DeepEval gives ``test_case_0``, ``test_case_1``, ...
    (``conversational_test_case_N`` for a conversation), and keeps a name the case carries."""
    from contextjudge.compat.deepeval import evaluate
    from contextjudge.compat.deepeval.evaluate.configs import DisplayConfig
    from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric, TurnContextualRecallMetric
    from contextjudge.compat.deepeval.test_case import ConversationalTestCase, LLMTestCase, Turn

    cases = [LLMTestCase(input=f"Where is the Rijksmuseum? ({i})", expected_output="In Amsterdam.",
                         actual_output="Amsterdam.", retrieval_context=NODES) for i in range(3)]
    cases[2].name = "my own name"
    res = evaluate(test_cases=cases, metrics=[ContextualPrecisionMetric(model=judge())],
                   display_config=DisplayConfig(print_results=True, show_indicator=False))
    assert [tr.name for tr in res.test_results] == ["test_case_0", "test_case_1", "my own name"]
    table = capsys.readouterr().out
    assert "Where is the Rijksmuseum? (0)" in table and "my own name" in table  # the table still shows the input
    conv = ConversationalTestCase(turns=[Turn(role="user", content="Where is the Rijksmuseum?"),
                                         Turn(role="assistant", content="Amsterdam.", retrieval_context=NODES)],
                                  expected_outcome="The assistant says the Rijksmuseum is in Amsterdam.")
    res = evaluate(test_cases=[conv], metrics=[TurnContextualRecallMetric(model=judge())],
                   display_config=DisplayConfig(print_results=False, show_indicator=False))
    assert [tr.name for tr in res.test_results] == ["conversational_test_case_0"]

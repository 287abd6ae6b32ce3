"""Component-level evaluation: @observe spans, update_current_span, evaluate(observed_callback=, goldens=)."""

import asyncio
import random
import threading

import pytest

import contextjudge._tracing as tracing
from contextjudge import Golden, LLMTestCase, aevaluate, evaluate, observe, update_current_span, update_current_trace
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
from contextjudge.testing import FakeJudge

DOCS = {
    "refund": ["Refunds are issued within 30 days of purchase.", "Our office is in Berlin."],
    "shipping": ["Shipping takes 5 business days.", "Refunds are issued within 30 days of purchase."],
    "warranty": ["The warranty lasts two years.", "Shipping takes 5 business days."],
}
GOLDENS = [
    Golden(input="How long do refunds take?", expected_output="Refunds are issued within 30 days of purchase."),
    Golden(input="How long does shipping take?", expected_output="Shipping takes 5 business days."),
    Golden(input="How long is the warranty?", expected_output="The warranty lasts two years."),
]


def topic(q):
    return next(k for k in DOCS if k in q.lower())


@pytest.fixture
def judge():
    return FakeJudge()


def by_span(result, span):
    return [tr for tr in result.test_results if tr.test_case is not None
            and tr.test_case.additional_metadata.get("span") == span]


# --------------------------------------------------------------------------------------------------- nested, sync
def test_nested_sync_components_are_scored_with_their_own_metrics(judge):
    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    def retrieve(question: str) -> list[str]:
        return DOCS[topic(question)]

    @observe(name="generator", metrics=[ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge)])
    def generate(question: str, docs: list[str]) -> str:
        answer = docs[0]
        update_current_span(input=question, actual_output=answer, retrieval_context=docs)
        return answer

    @observe()
    def app(question: str) -> str:
        return generate(question, retrieve(question))

    result = evaluate(observed_callback=app, goldens=GOLDENS, show_progress=False)
    assert len(result.test_results) == 2 * len(GOLDENS)  # app has no metrics: only retrieve and generator
    retr, gen = by_span(result, "retrieve"), by_span(result, "generator")
    assert [tr.test_case.input for tr in retr] == [g.input for g in GOLDENS]
    assert retr[0].test_case.additional_metadata["span_path"] == "app > retrieve"
    assert gen[0].test_case.additional_metadata["span_path"] == "app > generator"
    assert [m.name for m in retr[0].metrics_data] == ["Contextual Relevancy"]
    assert sorted(m.name for m in gen[0].metrics_data) == ["Contextual Precision", "Contextual Recall"]
    # a retriever span's return value is its retrieval_context
    assert [n.text for n in retr[1].test_case.retrieval_context] == DOCS["shipping"]
    assert all(m.error is None for tr in result.test_results for m in tr.metrics_data)
    assert gen[0].metric("Contextual Precision").score == 1.0


def test_golden_fills_a_missing_expected_output_and_never_overrides_one(judge):
    @observe(metrics=[ContextualPrecisionMetric(model=judge)])
    def first(question):
        update_current_span(retrieval_context=DOCS[topic(question)], actual_output="x")
        return "x"

    @observe(metrics=[ContextualPrecisionMetric(model=judge)])
    def second(question):
        update_current_span(retrieval_context=DOCS[topic(question)], expected_output="Our office is in Berlin.")
        return "y"

    def app(question):
        return first(question) + second(question)

    result = evaluate(observed_callback=app, goldens=GOLDENS[:1], show_progress=False)
    tc1, tc2 = by_span(result, "first")[0].test_case, by_span(result, "second")[0].test_case
    assert tc1.expected_output == GOLDENS[0].expected_output
    assert tc2.expected_output == "Our office is in Berlin."
    assert by_span(result, "first")[0].metric("Contextual Precision").score == 1.0
    assert by_span(result, "second")[0].metric("Contextual Precision").score == 0.5  # Berlin node ranked second


def test_update_current_span_with_a_whole_test_case(judge):
    @observe(metrics=[ContextualRelevancyMetric(model=judge)], name="rag")
    def app(question):
        update_current_span(test_case=LLMTestCase(input=question, retrieval_context=DOCS["refund"]))
        return "ok"

    result = evaluate(observed_callback=app, goldens=GOLDENS[:1], show_progress=False)
    tc = result.test_results[0].test_case
    assert tc.input == GOLDENS[0].input and tc.expected_output == GOLDENS[0].expected_output
    assert result.test_results[0].metrics_data[0].error is None


# ------------------------------------------------------------------------------------------------------ async
async def test_async_nested_components_and_tasks_inside_a_span(judge):
    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    async def retrieve(question: str, source: str) -> list[str]:
        await asyncio.sleep(0)
        return DOCS[topic(question)][:1] if source == "a" else DOCS[topic(question)][1:]

    @observe(metrics=[ContextualPrecisionMetric(model=judge)])
    async def app(question: str) -> str:
        parts = await asyncio.gather(retrieve(question, "a"), retrieve(question, "b"))  # child tasks
        docs = parts[0] + parts[1]
        update_current_span(actual_output=docs[0], retrieval_context=docs)
        return docs[0]

    result = await aevaluate(observed_callback=app, goldens=GOLDENS, show_progress=False)
    assert len(by_span(result, "app")) == 3 and len(by_span(result, "retrieve")) == 6
    for tr in by_span(result, "retrieve"):
        assert tr.test_case.additional_metadata["span_path"] == "app > retrieve"
    assert all(tr.metrics_data and tr.metrics_data[0].error is None for tr in result.test_results)


async def test_concurrent_goldens_never_mix_spans(judge):
    seen: dict[str, set[str]] = {}
    lock = threading.Lock()
    rng = random.Random(7)
    delays = [rng.random() / 200 for _ in range(60)]

    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    async def retrieve(question):
        await asyncio.sleep(delays[hash(question) % 60])
        span = tracing.current_span()
        with lock:
            seen.setdefault(question, set()).add(span.parent.fields["input"])
        return [f"Passage about {question}"]

    @observe(metrics=[ContextualRelevancyMetric(model=judge)])
    async def app(question):
        update_current_span(input=question)
        await asyncio.sleep(delays[len(question) % 60])
        docs = await retrieve(question)
        update_current_span(retrieval_context=docs)
        return "answer"

    goldens = [Golden(input=f"question number {i}") for i in range(40)]
    result = await aevaluate(observed_callback=app, goldens=goldens, max_concurrency=40, show_progress=False)
    assert all(parents == {q} for q, parents in seen.items()) and len(seen) == 40
    for tr in result.test_results:
        meta = tr.test_case.additional_metadata
        assert tr.test_case.input == meta["golden_input"]  # each span's input is its own golden's
        assert [n.text for n in tr.test_case.retrieval_context] == [f"Passage about {meta['golden_input']}"]
    assert len(result.test_results) == 80


def test_sync_evaluate_from_inside_a_running_loop(judge):
    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    async def app(question):
        return DOCS[topic(question)]

    async def main():
        return evaluate(observed_callback=app, goldens=GOLDENS, show_progress=False)

    result = asyncio.run(main())
    assert len(result.test_results) == 3


def test_generators_are_spans_too(judge):
    @observe(metrics=[ContextualRelevancyMetric(model=judge)])
    def stream(question):
        update_current_span(retrieval_context=DOCS[topic(question)])
        yield "Refunds "
        yield "take 30 days."

    @observe(metrics=[ContextualRelevancyMetric(model=judge)])
    async def astream(question):
        update_current_span(retrieval_context=DOCS[topic(question)])
        yield "Refunds"

    def app(question):
        return "".join(stream(question))

    async def aapp(question):
        return "".join([p async for p in astream(question)])

    result = evaluate(observed_callback=app, goldens=GOLDENS[:1], show_progress=False)
    assert result.test_results[0].test_case.actual_output == "Refunds take 30 days."
    result = evaluate(observed_callback=aapp, goldens=GOLDENS[:1], show_progress=False)
    assert result.test_results[0].test_case.actual_output == "Refunds"


# ---------------------------------------------------------------------------------------------- zero cost, errors
def test_zero_cost_when_no_evaluation_is_running(monkeypatch):
    class NoSpans:
        def __init__(self, *a, **k):
            raise AssertionError("a span was made outside an evaluation")

    monkeypatch.setattr(tracing, "Span", NoSpans)

    @observe(metrics=[ContextualRelevancyMetric(model=FakeJudge())])
    def f(x: int) -> int:
        update_current_span(input="ignored")  # a no-op outside an evaluation
        update_current_trace(input="ignored")
        return x + 1

    @observe
    async def g(x: int) -> int:
        return x * 2

    @observe(type="tool")
    def h(n):
        yield from range(n)

    assert f(1) == 2 and asyncio.run(g(2)) == 4 and list(h(3)) == [0, 1, 2]
    assert f.__name__ == "f" and f.__wrapped__(1) == 2  # functools.wraps keeps the identity
    assert tracing.current_span() is None


def test_a_golden_on_which_the_app_raises_is_recorded_and_the_run_goes_on(judge):
    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    def retrieve(question):
        return DOCS[topic(question)]

    def app(question):
        docs = retrieve(question)
        if "shipping" in question:
            raise RuntimeError("the LLM timed out")
        return docs[0]

    result = evaluate(observed_callback=app, goldens=GOLDENS, show_progress=False)
    errors = [tr for tr in result.test_results if tr.error]
    assert len(errors) == 1 and "the LLM timed out" in errors[0].error and "How long does shipping" in errors[0].name
    assert len([tr for tr in result.test_results if tr.metrics_data]) == 3  # the span before the failure is scored
    assert [tr.index for tr in result.test_results] == list(range(4))


def test_a_span_without_a_usable_test_case_is_an_error_result(judge):
    @observe(metrics=[ContextualRelevancyMetric(model=judge)])
    def app(question):
        update_current_span(retrieval_context="not a list")
        return "x"

    result = evaluate(observed_callback=app, goldens=GOLDENS[:1], show_progress=False)
    assert result.test_results[0].error and "retrieval_context" in result.test_results[0].error


def test_trace_level_metrics_score_the_whole_app_and_results_go_to_the_store(judge, tmp_path):
    @observe(type="retriever")
    def retrieve(question):
        return DOCS[topic(question)]

    @observe()
    def app(question):
        return retrieve(question)[0]

    db = str(tmp_path / "runs.db")
    result = evaluate(observed_callback=app, goldens=GOLDENS, metrics=[ContextualPrecisionMetric(model=judge)],
                      store=db, show_progress=False)
    assert len(result.test_results) == 3
    tc = result.test_results[0].test_case
    assert tc.actual_output == DOCS["refund"][0] and tc.expected_output == GOLDENS[0].expected_output
    assert [n.text for n in tc.retrieval_context] == DOCS["refund"]
    from contextjudge.store import open_store

    stored = open_store(db).load_run(result.run_id)
    assert sorted(tr.test_case.input for tr in stored.test_results) == sorted(g.input for g in GOLDENS)
    assert stored.scores("Contextual Precision") == result.scores("Contextual Precision")


def test_goldens_may_be_dicts_or_a_jsonl_file_and_are_required(judge, tmp_path):
    from contextjudge import ContextJudgeError

    @observe(type="retriever", metrics=[ContextualRelevancyMetric(model=judge)])
    def app(question):
        return DOCS[topic(question)]

    path = tmp_path / "g.jsonl"
    path.write_text('{"input": "How long do refunds take?", "expected_output": "30 days."}\n')
    assert len(evaluate(observed_callback=app, goldens=str(path), show_progress=False).test_results) == 1
    assert len(evaluate(observed_callback=app, goldens=[{"input": "warranty?"}], show_progress=False)
               .test_results) == 1
    with pytest.raises(ContextJudgeError, match="goldens"):
        evaluate(observed_callback=app, goldens=[])


def test_deepeval_spelling(judge):
    from contextjudge.compat.deepeval import evaluate as d_evaluate
    from contextjudge.compat.deepeval.dataset import Golden as DGolden
    from contextjudge.compat.deepeval.metrics import ContextualRelevancyMetric as DRelevancy
    from contextjudge.compat.deepeval.tracing import observe as d_observe
    from contextjudge.compat.deepeval.tracing import update_current_span as d_update

    @d_observe(metrics=[DRelevancy(model=judge)], type="llm", metric_collection="ignored")
    def app(question):
        d_update(input=question, output="30 days", retrieval_context=DOCS["refund"], tools_called=[])
        return "30 days"

    result = d_evaluate(observed_callback=app, goldens=[DGolden(input="How long do refunds take?")],
                        show_progress=False)
    tc = result.test_results[0].test_case
    assert tc.actual_output == "30 days" and result.test_results[0].metrics_data[0].error is None


def test_spans_of_calls_and_generators_keep_their_output_errors_and_nesting():
    """Every wrapper shape of ``@observe`` (plain, coroutine, generator, async generator) closes its span with its
    output, records an exception as the span's error (a generator closed early is none), and is the current span
    for what runs inside it."""
    import asyncio  # noqa: PLC0415

    from contextjudge import _tracing  # noqa: PLC0415

    @_tracing.observe
    def inner(x):
        return x * 2

    @_tracing.observe
    def outer(x):
        return inner(x) + 1

    @_tracing.observe
    def words():
        yield "a"
        yield inner(1) and "b"
        return "done"

    @_tracing.observe
    async def coro():
        return inner(3)

    @_tracing.observe
    async def agen():
        yield "x"
        yield "y"

    @_tracing.observe
    def broken():
        raise ValueError("no")

    @_tracing.observe
    def broken_gen():
        yield 1
        raise KeyError("k")

    trace = _tracing.Trace()
    token = _tracing._trace.set(trace)
    try:
        assert outer(2) == 5
        gen = words()
        assert next(gen) == "a" and next(gen) == "b"
        with pytest.raises(StopIteration) as stop:
            next(gen)
        assert stop.value.value == "done"
        early = words()
        next(early)
        early.close()  # closed before its end: no error

        async def drive():
            assert await coro() == 6
            return [x async for x in agen()]

        assert asyncio.run(drive()) == ["x", "y"]
        with pytest.raises(ValueError):
            broken()
        with pytest.raises(KeyError):
            list(broken_gen())
    finally:
        _tracing._trace.reset(token)
    by = {}
    for s in trace.spans:
        by.setdefault(s.name, []).append(s)
    assert by["outer"][0].output == 5 and by["inner"][0].parent is by["outer"][0]
    assert by["words"][0].output == "ab" and by["words"][0].error is None
    assert by["inner"][1].parent is by["words"][0]  # made inside the generator's step: its child
    assert by["words"][1].output == "a" and by["words"][1].error is None and by["words"][1].ended is not None
    assert by["coro"][0].output == 6 and by["inner"][2].parent is by["coro"][0]
    assert by["agen"][0].output == "xy"
    assert by["broken"][0].error == "ValueError: no" and by["broken"][0].ended is not None
    assert by["broken_gen"][0].error == "KeyError: 'k'" and by["broken_gen"][0].output == [1]
    assert _tracing.current_span() is None

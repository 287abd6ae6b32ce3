"""contextjudge.otel: the span context recorded at capture, and metric results as evaluation spans in that trace,
from the app's process (a session callback) and from another process that reads the case from the store (the
worker's path, with the exporter configured from the OTEL_* environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextjudge import LLMTestCase, MetricResult
from contextjudge.capture import CapturedCase, CaptureSession
from contextjudge.cases.provenance import OTEL_KEY
from contextjudge.errors import ConfigurationError
from contextjudge.otel import OTelExporter, case_trace, exporter_from_environment, span_context_now

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


@pytest.fixture()
def otel():
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def test_without_opentelemetry_imported_nothing_is_recorded_or_imported():
    code = textwrap.dedent("""
        import os, sys, timeit

        # langsmith (which langchain-core imports) may import OpenTelemetry itself since 0.15; what must hold is
        # that no contextjudge code does: a finder notes every import of it made from a contextjudge frame, and
        # makes OpenTelemetry look not installed
        by_us = []
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    frame = sys._getframe(1)  # the code whose import statement this is: past importlib's frames
                    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
                        frame = frame.f_back
                    if frame is not None and os.sep + "contextjudge" + os.sep in frame.f_code.co_filename:
                        by_us.append((name, frame.f_code.co_filename))
                    # an app without OpenTelemetry installed: the lookup below must then cost one dict read
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None
        sys.meta_path.insert(0, Watch())
        import contextjudge, contextjudge.capture, contextjudge.otel
        from contextjudge.otel import span_context_now
        assert span_context_now() is None
        assert not by_us, f"contextjudge imported OpenTelemetry: {by_us[:3]}"
        print(timeit.timeit(span_context_now, number=100_000) * 10)  # microseconds per call
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) < 1.0  # one dict lookup: well under a microsecond


def test_span_context_now_reads_the_active_span(otel):
    provider, _ = otel
    tracer = provider.get_tracer("app")
    assert span_context_now() is None  # OpenTelemetry imported, no span active
    with tracer.start_as_current_span("request") as request:
        here = span_context_now()
        with tracer.start_as_current_span("retrieve") as retrieve:
            inner = span_context_now()
    ctx = request.get_span_context()
    assert here == {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
                    "trace_flags": int(ctx.trace_flags)}
    assert case_trace(here, inner) == {**here, "retriever_span_id": format(retrieve.get_span_context().span_id,
                                                                            "016x")}
    assert case_trace(here, here) == here and case_trace(None, inner) == inner and case_trace(None) is None
    assert case_trace(here, {**inner, "trace_id": "f" * 32}) == here  # another trace's span is no retriever link


def result(name="Contextual Relevancy", score=0.75, **kw) -> MetricResult:
    return MetricResult(name=name, score=score, threshold=0.5, success=score is not None and score >= 0.5,
                        reason="2 of 3 nodes are relevant", evaluation_model="gpt-4o-mini", **kw)


def test_export_skips_a_case_without_a_trace_and_counts_it(otel):
    provider, spans = otel
    exporter = OTelExporter(provider)
    assert exporter.export(LLMTestCase(input="q", actual_output="a"), [result()]) == 0
    assert exporter.skipped == 1 and spans.get_finished_spans() == ()


def test_as_a_session_callback_in_the_app_process(otel):
    provider, spans = otel
    tracer = provider.get_tracer("app")
    session = CaptureSession(metrics=[], mode="off", max_kept=None)
    exporter = OTelExporter(provider, include_input=True)
    session.on_result.append(exporter)  # the contract's spelling: called as exporter(case, result)
    with tracer.start_as_current_span("request") as request:
        tc = LLMTestCase(input="How many PTO days?", actual_output="25",
                         additional_metadata={OTEL_KEY: case_trace(span_context_now())})
    case = CapturedCase(test_case=tc)
    session._kept.emit(case, [result(), result("Contextual Precision", None, error="needs expected_output",
                                                error_type="MissingFieldError")])
    session.close()
    evals = sorted(spans.get_finished_spans(), key=lambda s: s.name)
    assert [s.name for s in evals if s.name != "request"] == ["contextjudge.eval Contextual Precision",
                                                            "contextjudge.eval Contextual Relevancy"]
    bad, good = [s for s in evals if s.name != "request"]
    for s in (bad, good):
        assert s.context.trace_id == request.get_span_context().trace_id
        assert s.parent.span_id == request.get_span_context().span_id and s.links == ()
        assert s.attributes["contextjudge.case_key"] == case.case_id
        assert s.attributes["input.value"] == "How many PTO days?"
    assert good.attributes["evaluations.0.evaluation.score"] == 0.75
    assert good.attributes["evaluations.0.evaluation.label"] == "pass"
    assert good.attributes["evaluations.0.evaluation.explanation"] == "2 of 3 nodes are relevant"
    assert good.attributes["contextjudge.judge"] == "gpt-4o-mini"
    assert good.attributes["evaluations.0.evaluation.identifier"] == f"{case.case_id}:Contextual Relevancy"
    assert good.events[0].attributes["gen_ai.evaluation.score.value"] == 0.75
    assert bad.status.status_code is StatusCode.ERROR
    assert bad.status.description == "MissingFieldError: needs expected_output"
    assert bad.attributes["contextjudge.error_type"] == "MissingFieldError"


def test_a_request_the_app_did_not_sample_gets_no_evaluation_spans(otel):
    provider, spans = otel
    where = {"trace_id": "1" * 32, "span_id": "2" * 16, "trace_flags": 0}  # recorded from an unsampled request
    tc = LLMTestCase(input="q", actual_output="a", additional_metadata={OTEL_KEY: where})
    OTelExporter(provider).export(tc, [result()])
    assert spans.get_finished_spans() == ()  # the default parent-based sampler follows the request


def _capture_in_app_span(tracer, session):
    """Submit one case to ``session`` as an app would capture it: inside the app's request span, with its retrieval in
    a span of its own. Returns the two spans."""
    with tracer.start_as_current_span("request") as request:
        with tracer.start_as_current_span("retrieve") as retrieve:
            at_retrieval = span_context_now()
        tc = LLMTestCase(input="How many PTO days?", actual_output="25", retrieval_context=["25 days of PTO."],
                         additional_metadata={OTEL_KEY: case_trace(span_context_now(), at_retrieval)})
        session.submit(CapturedCase(test_case=tc))
    return request, retrieve


def _console_spans(stdout: str) -> list[dict]:
    """The spans the SDK's console exporter printed (one JSON object each), whatever else the process printed."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := stdout.find("{", at)) != -1:
        span, at = decoder.raw_decode(stdout, at)
        spans.append(span)
    return spans


def test_the_worker_path_exports_a_stored_case_from_another_process(tmp_path, otel):
    """The case is captured (in mode "deferred", to a real SQLite store) inside an app span; another process reads
    it back, builds the exporter from the OTEL_* environment and exports its results into the app's trace."""
    provider, _ = otel
    tracer = provider.get_tracer("app")
    db = tmp_path / "capture.db"
    session = CaptureSession(metrics=[], mode="deferred", store=str(db))
    request, retrieve = _capture_in_app_span(tracer, session)
    run_id = session.run_id
    session.close()

    worker = textwrap.dedent(f"""
        from contextjudge import MetricResult
        from contextjudge.otel import exporter_from_environment
        from contextjudge.store import open_store

        store = open_store({str(db)!r})
        exporter = exporter_from_environment()
        for sc in store.load_cases({run_id!r}):
            results = [MetricResult(name="Contextual Relevancy", score=1.0, threshold=0.5, success=True,
                                    reason="all relevant", evaluation_model="contextjudge-local"),
                       MetricResult(name="Contextual Recall", score=None, threshold=0.5, success=False,
                                    error="the judge timed out", error_type="JudgeTimeoutError")]
            exporter(sc.test_case, results, sc.case_key, {run_id!r})  # the worker's on_results hook
        exporter.close()
    """)
    env = {**ENV, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "cj-worker-test"}
    out = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    exported = _console_spans(out.stdout)
    assert len(exported) == 2
    req = request.get_span_context()
    for s in exported:
        assert s["context"]["trace_id"] == "0x" + format(req.trace_id, "032x")
        assert s["parent_id"] == "0x" + format(req.span_id, "016x")
        assert [link["context"]["span_id"] for link in s["links"]] == [
            "0x" + format(retrieve.get_span_context().span_id, "016x")]
        assert s["attributes"]["openinference.span.kind"] == "EVALUATOR"
        assert s["attributes"]["contextjudge.run_id"] == run_id
        assert s["attributes"]["evaluations.0.evaluation.identifier"].startswith(f"{run_id}:")
        assert s["resource"]["attributes"]["service.name"] == "cj-worker-test"
    by_name = {s["attributes"]["evaluations.0.evaluation.name"]: s for s in exported}
    assert by_name["Contextual Relevancy"]["attributes"]["evaluations.0.evaluation.annotator_kind"] == "CODE"
    assert by_name["Contextual Relevancy"]["status"]["status_code"] == "UNSET"
    assert by_name["Contextual Recall"]["status"]["status_code"] == "ERROR"


def test_exporter_from_environment_says_what_to_install(monkeypatch):
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="opentelemetry_traces_exporter")}
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_not_a_real_exporter")
    with pytest.raises(ConfigurationError, match="otlp_not_a_real_exporter, which is not installed"):
        exporter_from_environment()
    if "otlp_proto_http" in names:  # the otel extra's exporter: "otlp" (the SDK's default name) finds it
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing is sent in this test
        exporter = exporter_from_environment()
        exporter.close()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "not_a_metrics_exporter, none")  # metrics are read the same way
    with pytest.raises(ConfigurationError, match="OTEL_METRICS_EXPORTER names not_a_metrics_exporter, which is not "
                                                 "installed"):
        exporter_from_environment()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    exporter = exporter_from_environment()
    assert isinstance(exporter.tracer_provider, TracerProvider)
    assert exporter.tracer_provider is not trace.get_tracer_provider()
    exporter.close()


def test_flush_and_close_never_raise_when_the_provider_fails(caplog):
    class BrokenProvider:
        def get_tracer(self, *a, **k):
            return trace.NoOpTracer()

        def force_flush(self, timeout_millis=30_000):
            raise RuntimeError("collector unreachable")

        def shutdown(self):
            raise RuntimeError("collector unreachable")

    exporter = OTelExporter(BrokenProvider())
    exporter._owns_provider = True  # noqa: SLF001 - as exporter_from_environment builds it
    with caplog.at_level("WARNING", logger="contextjudge"):
        assert exporter.flush() is False
        exporter.close()  # at a worker's exit: logged, never raised
    assert any("collector unreachable" in r.getMessage() for r in caplog.records)


def test_contextjudge_worker_otel_exports_the_queued_cases_into_the_app_trace(tmp_path, otel):
    """The whole path a user runs: the app captures in mode "worker" inside its request span, and
    `contextjudge worker --otel --once` (configured by OTEL_*) judges the case and puts its results on that trace,
    sending them before it exits."""
    from contextjudge.metrics import ContextualRelevancyMetric

    provider, _ = otel
    tracer = provider.get_tracer("app")
    db = tmp_path / "prod.db"
    session = CaptureSession(metrics=[ContextualRelevancyMetric()], mode="worker", store=str(db))
    request, retrieve = _capture_in_app_span(tracer, session)
    assert session.flush(30)
    session.close()
    env = {**ENV, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "cj-worker"}
    out = subprocess.run([sys.executable, "-m", "contextjudge", "worker", "--store", str(db), "--model", "fake",
                          "--once", "--otel", "--cpus", "0", "--nice", "0", "--quiet"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    spans = _console_spans(out.stdout)  # the console exporter's JSON spans, then the worker's summary line
    assert len(spans) == 1, out.stdout
    s = spans[0]
    assert s["context"]["trace_id"] == "0x" + format(request.get_span_context().trace_id, "032x")
    assert s["parent_id"] == "0x" + format(request.get_span_context().span_id, "016x")
    assert [link["context"]["span_id"] for link in s["links"]] == [
        "0x" + format(retrieve.get_span_context().span_id, "016x")]
    assert s["attributes"]["evaluations.0.evaluation.name"] == "Contextual Relevancy"
    assert "worker: 1 judged" in out.stdout

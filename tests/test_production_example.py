"""examples/production_fastapi.py, run as the README says: the service and its worker, load, and the scores coming
back. A real uvicorn server on loopback, a real `contextjudge worker` process with the embedded judge, a SQLite store."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "production_fastapi.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


@pytest.mark.slow
def test_the_production_example_serves_samples_and_gets_scores_back(tmp_path):
    port = _free_port()
    store = tmp_path / "production.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    serve = subprocess.Popen([sys.executable, str(EXAMPLE), "serve", "--port", str(port), "--store", str(store),
                              "--sample-rate", "0.5"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"http://127.0.0.1:{port}/scores")
                break
            except OSError:
                assert serve.poll() is None, serve.stdout.read()
                assert time.monotonic() < deadline, "the service did not start in 60 s"
                time.sleep(0.3)
        load = subprocess.run([sys.executable, str(EXAMPLE), "load", "--port", str(port), "-n", "40",
                               "--conversations", "10"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert load.returncode == 0, load.stderr
        assert "40 requests" in load.stdout
        deadline = time.monotonic() + 120
        while True:
            body = _get(f"http://127.0.0.1:{port}/scores")
            c = body["capture"]
            if c["sampled"] and c["results_received"] >= 3 * c["sampled"]:  # relevancy, utilization, faithfulness
                break
            assert time.monotonic() < deadline, f"no scores came back in 120 s: {body}"
            time.sleep(1)
        assert c["seen"] == 40 and c["sampled"] + c["unsampled"] == 40 and c["dropped"] == 0
        assert 0 < c["sampled"] < 40
        # 40 requests in 10 conversations of 4 turns, sampled by conversation: whole conversations only
        assert c["sampled"] % 4 == 0, c
        assert set(body["metrics"]) == {"Contextual Relevancy", "Context Utilization", "Faithfulness"}
    finally:
        serve.send_signal(signal.SIGINT)  # uvicorn shuts down; the example stops its worker with SIGTERM
        out, _ = serve.communicate(timeout=60)
    assert serve.returncode == 0, out
    con = sqlite3.connect(store)
    try:  # every sampled case was written and judged once; nothing is left claimed after the worker stopped
        assert con.execute("SELECT count(*) FROM cj_queue WHERE state = 'done'").fetchone()[0] >= c["sampled"]
        assert con.execute("SELECT count(*) FROM cj_queue WHERE state = 'claimed'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM cj_results WHERE metric = 'Contextual Relevancy'").fetchone()[0] \
            >= c["sampled"]
    finally:
        con.close()

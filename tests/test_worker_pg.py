"""Several `contextjudge worker` processes on one PostgreSQL store: each case is judged and written exactly once,
including after one worker is SIGKILLed in the middle of a run (its cases come back when their 2 s leases expire,
and only the cases it had judge calls in flight for are asked again). The judge is a loopback FaultServer reached
by the CLI's `--model openai:...` through OPENAI_BASE_URL; it counts the requests per case (each case's input
carries a marker) and per worker (each worker names its own model). In the kill test the server holds the victim's
requests open after its first few, so what was in flight at the kill is read from the server's log, not guessed
from timestamps."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from fault_server import FaultServer
from queue_checks import assert_judged_once

from contextjudge import LLMTestCase

CLI = [str(Path(sys.executable).with_name("contextjudge"))]
MARK = re.compile(r"case-(\d{3})")


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       retrieval_context=["Paris is the capital of France.", "Bananas are yellow."])


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CONTEXTJUDGE_"))}
    env.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="dummy")
    return env


def _worker(store_url: str, judge_url: str, model: str = "fault-judge") -> subprocess.Popen:
    return subprocess.Popen([*CLI, "worker", "--store", store_url, "--model", f"openai:{model}", "--lease", "2",
                             "--batch", "3", "--concurrency", "2", "--poll", "0.1", "--cpus", "0", "--nice", "0",
                             "--grace", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(judge_url))


def _setup(store, n: int):
    rid = store.begin_run("prod", {"mode": "worker", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    store.save_cases_queued(rid, [(f"k{i:03d}", i, _case(i)) for i in range(n)])
    return store, rid


def _per_case(srv: FaultServer) -> Counter:
    return Counter(int(m.group(1)) for r in srv.requests if r["status"] == 200
                   for m in [MARK.search(r.get("prompt") or "")] if m)


def _wait_done(store, rid: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while store.queue_counts(rid)["done"] < n and time.time() < deadline:
        time.sleep(0.1)


def _stop(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            o, e = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        out.append((p.returncode, o, e))
    return out


def test_two_workers_judge_each_case_exactly_once(pg_url, pg_store):
    n = 16
    store, rid = _setup(pg_store, n)
    with FaultServer(yes_words=["paris"], latency=0.15, keep_prompts=True) as srv:
        procs = [_worker(pg_url, srv.url) for _ in range(2)]
        try:
            _wait_done(store, rid, n)
        finally:
            outs = _stop(procs)
        asked = _per_case(srv)
    for rc, _out, err in outs:
        assert rc == 0, err
    judged = [int(re.search(r"(\d+) judged", out).group(1)) for _, out, _ in outs]
    assert sum(judged) == n and all(j > 0 for j in judged), judged  # both worked, no case twice
    assert set(asked) == set(range(n)) and set(asked.values()) == {1}  # one judge request per case, never two
    assert_judged_once(store, rid, n)


class _GatedServer(FaultServer):
    """A FaultServer that answers the first ``free`` requests for ``gated_model`` and then holds every later one
    open (unanswered) until ``gate`` is set: what the victim had in flight when it was killed is then exactly the
    requests held here, read from the server's own log rather than from timing."""

    def __init__(self, *, gated_model: str, free: int, **kw):
        super().__init__(**kw)
        self.gated_model, self.free = gated_model, free
        self.gate = threading.Event()
        self.received: list[tuple[str, int]] = []  # (model, case) of every request, at its arrival
        self.held_open: list[int] = []  # cases whose gated request is being held

    def handle_chat(self, body):
        m = MARK.search(json.dumps(body))
        case = int(m.group(1)) if m else -1
        model = str(body.get("model"))
        with self._lock:
            self.received.append((model, case))
            hold = model == self.gated_model and sum(1 for mo, _ in self.received if mo == model) > self.free
            if hold:
                self.held_open.append(case)
        if hold:
            self.gate.wait(60)
        return super().handle_chat(body)


@pytest.mark.slow
def test_a_killed_workers_cases_are_judged_once_by_the_other(pg_url, pg_store):
    n = 24
    store, rid = _setup(pg_store, n)
    with _GatedServer(gated_model="victim-judge", free=4, yes_words=["paris"], latency=0.1) as srv:
        # the victim judges 4 cases, then its next requests hang; it is killed once both of its case slots
        # (--concurrency 2) wait on a held request, so no case of its own is between an answer and its write
        # (the survivor starts once the victim is stuck: started together, a survivor that is quicker to start on
        # a loaded machine could claim every case before the victim's fifth request, and nothing would be held)
        victim = _worker(pg_url, srv.url, model="victim-judge")
        survivor = None
        try:
            deadline = time.time() + 60
            while len(srv.held_open) < 2 and time.time() < deadline and victim.poll() is None:
                time.sleep(0.02)
            assert len(srv.held_open) == 2, (srv.held_open, victim.poll())
            in_flight = set(srv.held_open)
            survivor = _worker(pg_url, srv.url, model="survivor-judge")
            victim.kill()
            victim.wait(10)
            srv.gate.set()  # the held requests now answer a closed connection
            _wait_done(store, rid, n)
        finally:
            srv.gate.set()
            outs = _stop([survivor]) if survivor is not None else []
            if victim.poll() is None:
                victim.kill()
                victim.wait(10)
        received = list(srv.received)
    assert victim.returncode == -signal.SIGKILL
    rc, out, err = outs[0]
    assert rc == 0, err
    assert_judged_once(store, rid, n)  # every case's results exactly once
    by_victim = Counter(c for mo, c in received if mo == "victim-judge")
    by_survivor = Counter(c for mo, c in received if mo == "survivor-judge")
    assert set(by_victim) | set(by_survivor) == set(range(n))
    assert set(by_victim.values()) <= {1} and set(by_survivor.values()) <= {1}, (by_victim, by_survivor)
    # only the cases whose judge request was in flight when the victim died were asked again (by the survivor);
    # the victim's other cases were asked once: by it (answered and written) or by the survivor (claimed, not begun)
    twice = set(by_victim) & set(by_survivor)
    assert twice == in_flight, (twice, in_flight)
    assert sum(by_victim.values()) == 4 + 2  # 4 answered and written, 2 in flight
    assert int(re.search(r"(\d+) judged", out).group(1)) == n - 4

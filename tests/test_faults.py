"""The fault matrix: every judge fault, through every metric, against a real HTTP server on loopback.

Each fault runs through each metric with ``ChatOpenAI(base_url=<fault server>, max_retries=0)`` as the judge, on two
test cases. The outcome must be the fault-free score (after a retry, a re-ask or a fallback to the next
structured-output method) or, for faults that never clear, a clear per-case error. No case may be dropped, no score
may be NaN or wrong, and the run must finish. The last test prints the summary line.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

pytest.importorskip("langchain_openai")

from fault_server import Fault, FaultServer  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, aevaluate  # noqa: E402
from contextjudge.judges._options import JudgeOptions  # noqa: E402
from contextjudge.metrics import BY_KEY, JUDGE_FREE  # noqa: E402
from contextjudge.testing import FakeJudge  # noqa: E402

YES = ["paris", "seine", "eiffel", "refund", "gift card"]

# A generous per-attempt timeout, because a loaded 2-core CI box can take seconds for a loopback call; the
# slow-answer faults set a short one of their own. Backoffs are tiny.
OPTIONS = JudgeOptions(max_attempts=3, attempt_timeout=15.0, deadline=40.0, backoff_initial=0.01, backoff_max=0.5,
                       max_concurrency=4)
SLOW = 5.0
SHORT_TIMEOUT = {"attempt_timeout": 2.5, "max_attempts": 4}

CASES = [
    LLMTestCase(
        input="What is the capital of France, and which river runs through it?",
        actual_output="Paris is the capital. The Seine runs through it.",
        expected_output="Paris is the capital of France. The Seine flows through Paris. Bananas are not involved.",
        retrieval_context=["Bananas are yellow. They grow in bunches.", "Paris is the capital of France.",
                           "The Seine flows through Paris. It is 777 km long.", "Berlin is in Germany."],
    ),
    LLMTestCase(
        input="When was the Eiffel Tower finished?",
        actual_output="In 1889.",
        expected_output="The Eiffel Tower was finished in 1889.",
        retrieval_context=["The Eiffel Tower was completed in 1889.", "Tokyo is the capital of Japan."],
    ),
]

CONVERSATIONS = [
    ConversationalTestCase(turns=[
        Turn(role="user", content="What is your refund policy?"),
        Turn(role="assistant", content="30 days.",
             retrieval_context=["Refunds are accepted within 30 days.", "Shipping takes a week."]),
        Turn(role="user", content="And for gift cards?"),
        Turn(role="assistant", content="Not refundable.",
             retrieval_context=["Weather is nice today.", "A gift card is final sale."]),
    ], expected_outcome="The user learns the refund policy. Gift card sales are final."),
    ConversationalTestCase(turns=[
        Turn(role="user", content="Where is the Eiffel Tower?"),
        Turn(role="assistant", content="In Paris.",
             retrieval_context=["The Eiffel Tower stands in Paris.", "Rome has the Colosseum."]),
    ], expected_outcome="The user learns that the Eiffel Tower is in Paris."),
]

METRIC_KEYS = sorted(set(BY_KEY) - JUDGE_FREE)  # the ranking metrics call no judge


@dataclass
class FaultCase:
    name: str
    faults: list[Fault]
    expect: str = "score"                        # "score", "error", or "error_unless_rubric"
    error_match: str = ""                         # a phrase the error message must contain
    options: dict[str, Any] = field(default_factory=dict)
    check: Callable[[list[dict[str, Any]], float], str | None] | None = None  # (server log, seconds) -> problem


def _waited_retry_after(log: list[dict[str, Any]], seconds: float) -> str | None:
    limited = [r for r in log if r["status"] == 429]
    if not limited:
        return "no 429 was served"
    for r in limited:  # the retry of the same prompt waits Retry-After (0.2s); a loopback call takes milliseconds
        again = [x["t0"] - r["t1"] for x in log if x["prompt_hash"] == r["prompt_hash"] and x["t0"] > r["t0"]]
        if not again:
            return "a rate-limited request was never retried"
        if min(again) < 0.15:
            return f"retried {min(again):.3f}s after a 429 with Retry-After: 0.2"
    return None


def _no_retry(log: list[dict[str, Any]], seconds: float) -> str | None:
    prompts = [r["prompt_hash"] for r in log if r["status"] == 401]
    return None if len(prompts) == len(set(prompts)) else "a request was retried after a 401"


def _used(method: str) -> Callable[[list[dict[str, Any]]], str | None]:
    def check(log: list[dict[str, Any]], seconds: float) -> str | None:
        ok = [r for r in log if r["status"] == 200]
        return None if ok and all(r["method"] == method for r in ok) else \
            f"expected every answer via {method}, got {[r['method'] for r in ok]}"
    return check


def _reasked(log: list[dict[str, Any]], seconds: float) -> str | None:
    return None if any(r["fault"] for r in log) and len(log) >= 2 else "the damaged answer was not re-asked"


REJECT_STRUCTURED = [
    Fault("http", times=None, status=400, methods=("json_schema",),
          message="Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."),
    Fault("http", times=None, status=400, methods=("tools",), message="tools are not supported"),
    Fault("http", times=None, status=400, methods=("json_object",), message="response_format json_object unsupported"),
]

MATRIX = [
    FaultCase("http429_retry_after", [Fault("http", status=429, retry_after=0.2, times=2)], check=_waited_retry_after),
    FaultCase("http500", [Fault("http", status=500, times=2)]),
    FaultCase("http503", [Fault("http", status=503, times=2)]),
    FaultCase("connection_reset", [Fault("reset", times=2)]),
    FaultCase("slower_than_attempt_timeout", [Fault("slow", seconds=SLOW)], options=SHORT_TIMEOUT),
    FaultCase("invalid_json", [Fault("invalid_json")], check=_reasked),
    FaultCase("truncated_json", [Fault("truncated")]),
    FaultCase("cut_by_max_tokens_finish_length", [Fault("length")]),
    FaultCase("json_in_prose", [Fault("prose")]),
    FaultCase("json_in_markdown_fence", [Fault("fence")]),
    FaultCase("json_after_think_block", [Fault("think")]),
    FaultCase("words_Yes._FALSE", [Fault("words", times=None, word_yes="Yes.", word_no="FALSE")]),
    FaultCase("words_TRUE_no.", [Fault("words", times=None, word_yes="TRUE", word_no="no.")]),
    FaultCase("words_relevant_irrelevant", [Fault("words", times=None, word_yes="relevant", word_no="irrelevant")]),
    FaultCase("missing_id", [Fault("missing_id")]),
    FaultCase("extra_unknown_id", [Fault("extra_id", times=None)]),
    FaultCase("duplicate_ids_agreeing", [Fault("duplicate_id", times=None)]),
    FaultCase("duplicate_ids_conflicting", [Fault("conflicting_ids")]),
    FaultCase("empty_content", [Fault("empty")]),
    FaultCase("refusal", [Fault("refusal")]),
    FaultCase("http400_json_schema_unsupported", REJECT_STRUCTURED[:1], check=_used("tools")),
    FaultCase("http500_json_schema_like_llama_cpp",
              [Fault("http", times=None, status=500, methods=("json_schema",),
                     message="1 validation error: response_format.type Input should be 'text' or 'json_object'")],
              check=_used("tools")),
    FaultCase("no_structured_output_at_all", REJECT_STRUCTURED, check=_used("text")),
    # faults that never clear: a clear per-case error, fast, and nothing lost
    FaultCase("http401", [Fault("http", status=401, times=None)], expect="error", error_match="credentials",
              check=_no_retry),
    FaultCase("http503_forever", [Fault("http", status=503, times=None)], expect="error",
              error_match="kept failing"),
    FaultCase("connection_reset_forever", [Fault("reset", times=None)], expect="error", error_match="kept failing"),
    FaultCase("slow_forever", [Fault("slow", times=None, seconds=SLOW)], expect="error", error_match="kept failing",
              options={**SHORT_TIMEOUT, "max_attempts": 2}),
    FaultCase("refusal_forever", [Fault("refusal", times=None)], expect="error", error_match="re-ask"),
    FaultCase("invalid_json_forever", [Fault("invalid_json", times=None)], expect="error", error_match="re-ask"),
    FaultCase("missing_id_forever", [Fault("missing_id", times=None)], expect="error_unless_rubric",
              error_match="even after a re-ask"),
]


def _cases(key: str) -> list[Any]:
    return CONVERSATIONS if BY_KEY[key].conversational else CASES


def _judge(server: FaultServer) -> ChatOpenAI:
    return ChatOpenAI(model="fault-judge", base_url=server.url, api_key="x", max_retries=0, timeout=10)


@dataclass
class Outcome:
    fault: str
    metric: str
    scored: int = 0
    errors: int = 0
    lost: list[str] = field(default_factory=list)


async def _run_one(fc: FaultCase, key: str, server: FaultServer, judge: ChatOpenAI,
                   baseline: dict[str, list[float]]) -> Outcome:
    server.reset(fc.faults)
    opts = replace(OPTIONS, **fc.options)
    out = Outcome(fc.name, key)
    cases = _cases(key)
    t0 = time.perf_counter()
    try:
        res = await asyncio.wait_for(aevaluate(cases, [BY_KEY[key](model=judge)], judge_options=opts,
                                               show_progress=False), timeout=60)
    except Exception as exc:  # noqa: BLE001 - a run that does not complete loses every case
        out.lost = [f"run raised {type(exc).__name__}: {exc}"] * len(cases)
        return out
    expect = fc.expect
    if expect == "error_unless_rubric":
        expect = "score" if key == "rubric_context_recall" else "error"
    if len(res.test_results) != len(cases):
        out.lost.append(f"{len(cases) - len(res.test_results)} cases dropped")
    for i, tr in enumerate(res.test_results):
        if len(tr.metrics_data) != 1:
            out.lost.append(f"case {i}: {len(tr.metrics_data)} results")
            continue
        m = tr.metrics_data[0]
        if m.score is not None and (not isinstance(m.score, float) or math.isnan(m.score)):
            out.lost.append(f"case {i}: score {m.score!r}")
        elif m.error:
            if expect == "error" and fc.error_match in m.error and m.score is None:
                out.errors += 1
            elif expect == "score" and i > 0 and fc.faults[0].times is not None:
                out.lost.append(f"case {i}: unexpected error {m.error[:200]}")
            else:
                out.lost.append(f"case {i}: error {m.error[:200]!r} (expected {expect}"
                                f"{', containing ' + repr(fc.error_match) if fc.error_match else ''})")
        elif expect == "error":
            # a fault that never clears but a case finished anyway is fine only if its score is the right one
            if m.score == pytest.approx(baseline[key][i]):
                out.scored += 1
            else:
                out.lost.append(f"case {i}: score {m.score} under a permanent fault")
        elif m.score == pytest.approx(baseline[key][i]):
            out.scored += 1
        else:
            out.lost.append(f"case {i}: score {m.score}, fault-free score {baseline[key][i]}")
    if fc.check is not None:
        problem = fc.check(list(server.requests), time.perf_counter() - t0)
        if problem:
            out.lost.append(f"server log: {problem}")
    return out


def _run_matrix() -> tuple[list[Outcome], dict[str, list[float]], float]:
    async def main() -> tuple[list[Outcome], dict[str, list[float]], float]:
        servers = {k: FaultServer(yes_words=YES, lifetime=300).start() for k in METRIC_KEYS}
        judges = {k: _judge(s) for k, s in servers.items()}
        try:
            baseline: dict[str, list[float]] = {}
            for key in METRIC_KEYS:
                res = await aevaluate(_cases(key), [BY_KEY[key](model=judges[key])], judge_options=OPTIONS,
                                      show_progress=False)
                baseline[key] = [tr.metrics_data[0].score for tr in res.test_results]
            t0 = time.perf_counter()
            outcomes: list[Outcome] = []
            for fc in MATRIX:  # one fault at a time, every metric at once, each metric with its own server
                outcomes += await asyncio.gather(*(_run_one(fc, k, servers[k], judges[k], baseline)
                                                   for k in METRIC_KEYS))
            return outcomes, baseline, time.perf_counter() - t0
        finally:
            for s in servers.values():
                s.stop()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def matrix():
    return _run_matrix()


@pytest.mark.slow
def test_fault_free_scores_match_the_fake_judge(matrix):
    """The server's scripted judge and FakeJudge with the same rules agree, so the baseline is the right score."""
    _, baseline, _ = matrix
    fake = FakeJudge(rules={w: "yes" for w in YES} | {w.capitalize(): "yes" for w in YES}, default="no")

    async def fake_scores(key: str) -> list[float]:
        res = await aevaluate(_cases(key), [BY_KEY[key](model=fake)], show_progress=False)
        return [tr.metrics_data[0].score for tr in res.test_results]

    for key in METRIC_KEYS:
        got = asyncio.run(fake_scores(key))
        assert got == pytest.approx(baseline[key]), key
        assert all(0.0 <= s <= 1.0 for s in baseline[key])
    # the cases are not trivial: precision differs from 1 and 0 somewhere
    assert any(0.0 < s < 1.0 for s in baseline["contextual_precision"])


@pytest.mark.slow
@pytest.mark.parametrize("fault", [fc.name for fc in MATRIX])
def test_fault(matrix, fault):
    outcomes, _, _ = matrix
    mine = [o for o in outcomes if o.fault == fault]
    assert len(mine) == len(METRIC_KEYS)
    problems = [f"{o.metric}: {p}" for o in mine for p in o.lost]
    assert not problems, "\n".join(problems)


def _report(request, line: str) -> None:
    """Show ``line`` in the pytest output even when output is captured (the summary belongs in CI logs)."""
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capman is None or reporter is None:  # pragma: no cover
        print(line)
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(line)


@pytest.mark.slow
def test_fault_matrix_summary(matrix, request):
    outcomes, _, seconds = matrix
    runs = len(outcomes)
    cases = sum(len(_cases(o.metric)) for o in outcomes)
    scored = sum(o.scored for o in outcomes)
    errors = sum(o.errors for o in outcomes)
    lost = sum(1 for o in outcomes for _ in o.lost)
    line = (f"fault matrix: {len(MATRIX)} faults x {len(METRIC_KEYS)} metrics = {runs} runs, {cases} cases: "
            f"{scored} correct scores after retry/re-ask/fallback, {errors} clear per-case errors, "
            f"{lost} lost ({seconds:.1f}s)")
    _report(request, line)
    assert scored + errors == cases
    assert lost == 0


# ---------------------------------------------------------------------------------------------- unit checks
def test_output_cap_reaches_an_openai_compatible_server_as_max_tokens():
    """llama.cpp's server ignores max_completion_tokens, so the cap also travels as extra_body max_tokens."""
    from contextjudge.judges._structured import _with_output_cap

    local = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x")
    capped = _with_output_cap(local, 100)
    assert capped.max_tokens == 100 and capped.extra_body == {"max_tokens": 100}
    assert local.max_tokens is None and not local.extra_body  # the user's model is not changed
    assert _with_output_cap(local, None) is local
    openai = _with_output_cap(ChatOpenAI(model="m", api_key="x"), 100)
    assert openai.max_tokens == 100 and not openai.extra_body  # api.openai.com gets max_completion_tokens only
    own = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", max_tokens=7,
                     extra_body={"max_tokens": 7})
    assert _with_output_cap(own, 100) is own  # the user's own limit wins

    async def run() -> list[dict[str, Any]]:
        with FaultServer(yes_words=YES) as srv:
            await aevaluate(CASES[:1], [BY_KEY["contextual_precision"](model=_judge(srv))],
                            judge_options=replace(OPTIONS, max_output_tokens=64), show_progress=False)
            return list(srv.requests)

    log = asyncio.run(run())
    assert log and all(r["max_tokens"] == 64 and r["max_completion_tokens"] == 64 for r in log)


# ---------------------------------------------------------------------------------------------- the end user's text
# Faults that come with the text, not the judge: what any end user can send. A lone surrogate (JSON "\udce9") or a NUL
# in a case's text, through every metric with the HTTP judge and a real store: each case is scored as if its text
# held the escape (\udce9, \u0000), the other case of the run is untouched, and both are stored (before issue 48 the
# judge call failed on the body's encoding and the store refused the case, or the whole capture batch with it).
# Each on the store that refused it: SQLite (and PostgreSQL) a lone surrogate, PostgreSQL a NUL.
TEXT_FAULTS = {"lone_surrogate": ("\udce9", "sqlite"), "lone_surrogate_pg": ("\udce9", "postgresql"),
               "nul_pg": ("\x00", "postgresql")}


def _with_text(case: Any, bad: str) -> Any:
    """``case`` with ``bad`` inside its question (or first user turn) and its first retrieved node."""
    if isinstance(case, LLMTestCase):
        nodes = list(case.retrieval_context or [])
        nodes[0] = nodes[0].model_copy(update={"text": nodes[0].text.replace(" ", f" {bad}", 1)})
        return case.model_copy(update={"input": case.input.replace(" ", f" {bad}", 1), "retrieval_context": nodes})
    turns = [t.model_copy() for t in case.turns]
    turns[0] = turns[0].model_copy(update={"content": turns[0].content.replace(" ", f" {bad}", 1)})
    return case.model_copy(update={"turns": turns})


@pytest.mark.parametrize("fault", sorted(TEXT_FAULTS))
def test_end_user_text_fault_costs_no_case(fault, tmp_path, request):
    from contextjudge.store import open_store

    bad, backend = TEXT_FAULTS[fault]
    pg = request.getfixturevalue("pg_store") if backend == "postgresql" else None
    escaped = f"\\u{ord(bad):04x}"  # what the store and the judge's request hold instead (the JSON escape)

    async def run() -> list[str]:
        problems: list[str] = []
        with FaultServer(yes_words=YES) as srv:
            judge = _judge(srv)
            for key in METRIC_KEYS:
                cases = _cases(key)
                faulty = [_with_text(cases[0], bad), cases[1]]
                clean = [_with_text(cases[0], escaped), cases[1]]
                want = await aevaluate(clean, [BY_KEY[key](model=judge)], judge_options=OPTIONS, show_progress=False)
                store = pg if pg is not None else open_store(tmp_path / f"{key}.db")
                got = await aevaluate(faulty, [BY_KEY[key](model=judge)], judge_options=OPTIONS, store=store,
                                      show_progress=False)
                for i, (g, w) in enumerate(zip(got.test_results, want.test_results, strict=True)):
                    gm, wm = g.metrics_data[0], w.metrics_data[0]
                    if gm.error or gm.score is None or gm.score != pytest.approx(wm.score):
                        problems.append(f"{key} case {i}: {gm.score} (error {gm.error}), escaped text: {wm.score}")
                stored = store.load_run(got.run_id).test_results
                if len(stored) != 2 or any(m.score is None for tr in stored for m in tr.metrics_data):
                    problems.append(f"{key}: {len(stored)} of 2 cases stored with their scores")
                if pg is None:
                    store.close()
        return problems

    problems = asyncio.run(run())
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------- retention
def test_prune_keeps_the_cases_a_spent_budget_set_aside_until_they_are_judged(tmp_path):
    """A worker with the HTTP judge and a spent budget sets every case aside; `prune --keep-runs 1` and
    `--older-than` after a newer run keep them (before issue 48 they were deleted); once the budget has room,
    `worker --requeue-skipped` judges them to the fault-free scores."""
    from contextjudge.engine._worker import Worker
    from contextjudge.judges._spend import Budget
    from contextjudge.store import open_store

    key = "contextual_relevancy"
    store = open_store(tmp_path / "skipped.db")
    rid = store.begin_run("prod", {"name": "prod", "mode": "worker"})
    store.save_cases_queued(rid, [(f"k{i}", i, c) for i, c in enumerate(CASES)])
    with FaultServer(yes_words=YES) as srv:
        judge = _judge(srv)
        spent = replace(OPTIONS, budget=Budget(tokens_per_day=1, name=f"faults-{time.time_ns()}"))
        counts = Worker(store, [BY_KEY[key]()], judge, judge_options=spent, cpus=0, nice=0).run(once=True)
        assert counts.skipped_budget == 2 and store.queue_counts(rid)["skipped"] == 2
        store.end_run(rid, {})
        with store.engine.begin() as conn:  # the run and its cases are an hour old
            from sqlalchemy import text

            conn.execute(text("UPDATE cj_runs SET created_at = created_at - 3600"))
            conn.execute(text("UPDATE cj_cases SET created_at = created_at - 3600"))
        newer = store.begin_run("nightly", {})
        store.save_case(newer, "n0", 0, CASES[0])
        store.end_run(newer, {})
        for kwargs in ({"keep_runs": 1}, {"older_than": "30m"}):
            report = store.prune(**kwargs)
            assert store.queue_counts(rid)["skipped"] == 2, (kwargs, report.line())
            assert report.kept_skipped == 2 and rid not in report.runs, (kwargs, report.line())
        assert store.requeue_skipped(rid) == 2
        counts = Worker(store, [BY_KEY[key]()], judge, judge_options=OPTIONS, cpus=0, nice=0).run(once=True)
        assert counts.judged == 2
        want = asyncio.run(aevaluate(CASES, [BY_KEY[key](model=judge)], judge_options=OPTIONS, show_progress=False))
    got = {tr.name or i: tr.metrics_data[0].score for i, tr in enumerate(store.load_run(rid).test_results)}
    assert sorted(got.values()) == pytest.approx(sorted(tr.metrics_data[0].score for tr in want.test_results))

# ---------------------------------------------------------------------------------------------- workspace faults
# Issue 48: the MCP server's paths (a report over the app's own source, a link out of the folder, a dotted --app
# path) and Host headers a DNS-rebinding page sends to the servers on loopback. Real files, links and processes.
APP_SOURCE = "from os import getpid\n\nchain = None\n\n\ndef build_app():\n    return None\n"


@pytest.fixture()
def workspace(tmp_path):
    """A project folder (``myapp/rag.py``, a goldens file, a store with one run), a folder outside it with a goldens
    file, and links from inside to outside."""
    root, outside = tmp_path / "project", tmp_path / "outside"
    (root / "myapp").mkdir(parents=True)
    outside.mkdir()
    (root / "myapp" / "__init__.py").write_text("")
    (root / "myapp" / "rag.py").write_text(APP_SOURCE)
    (root / "goldens.jsonl").write_text('{"input": "q1"}\n')
    (outside / "secret.jsonl").write_text('{"input": "a secret question"}\n')
    (root / "linked.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "out").symlink_to(outside, target_is_directory=True)
    store = str(root / "results.db")
    from contextjudge import evaluate

    evaluate(CASES, [BY_KEY["contextual_relevancy"](model=FakeJudge())], store=store, run_id="r1",
             show_progress=False)
    return root, outside


class _Runner:
    """Stands in for ``subprocess.run`` of ``contextjudge eval --app``: records the command; writes a report at the
    ``--report`` path and the run into the store (as the app process does), then ``then()``."""

    def __init__(self, root: Any, then: Callable[[], None] | None = None) -> None:
        self.root, self.then, self.cmds = root, then, []

    def __call__(self, cmd: list[str], **_: Any) -> Any:
        import subprocess

        from contextjudge import evaluate
        from contextjudge.report import render_report

        self.cmds.append(cmd)
        run_id = cmd[cmd.index("--run-id") + 1]
        result = evaluate(CASES, [BY_KEY["contextual_relevancy"](model=FakeJudge())], store=str(self.root /
                          "results.db"), run_id=run_id, show_progress=False)
        with open(cmd[cmd.index("--report") + 1], "w", encoding="utf-8") as fh:
            fh.write(render_report(result))
        if self.then:
            self.then()
        return subprocess.CompletedProcess(cmd, 0, "", "")


def _tools(root: Any, allow: str = "myapp.rag") -> Any:
    from contextjudge.cli._mcp_tools import Tools

    return Tools(str(root / "results.db"), allow_app=allow, root=str(root))


def test_mcp_report_never_overwrites_the_apps_source_or_writes_through_a_link(workspace):
    from contextjudge.cli._mcp_tools import ToolArgumentError

    root, outside = workspace
    tools, runner = _tools(root), _Runner(root)
    for report, says in (("myapp/rag.py", "not an .html path"), ("goldens.jsonl", "not an .html path"),
                         ("out/report.html", "through a symbolic link"), ("../outside/r.html", "outside the folder")):
        with pytest.raises(ToolArgumentError, match=says):
            tools.evaluate_app(goldens="goldens.jsonl", app="myapp.rag:chain", report=report, run_command=runner)
    (root / "page.html").write_text("<!DOCTYPE html><p>the team's own page</p>")
    with pytest.raises(ToolArgumentError, match="not a contextjudge report"):
        tools.evaluate_app(goldens="goldens.jsonl", app="myapp.rag:chain", report="page.html", run_command=runner)
    assert runner.cmds == [] and (root / "myapp" / "rag.py").read_text() == APP_SOURCE
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl"]
    assert "the team's own page" in (root / "page.html").read_text()
    # a new path, then the same path again (a report it wrote may be replaced)
    for _ in range(2):
        out = tools.evaluate_app(goldens="goldens.jsonl", app="myapp.rag:chain", report="reports/r.html",
                                 run_command=runner)
        assert out["report"] == str((root / "reports" / "r.html").resolve())
        assert (root / "reports" / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (root / "reports").iterdir()) == ["r.html"]  # no temporary file left
    tools.close()


def test_mcp_report_a_link_put_at_the_target_while_the_app_runs_is_replaced_not_written_through(workspace):
    from contextjudge.cli._mcp_tools import ToolArgumentError

    root, outside = workspace
    (outside / "victim.html").write_text("keep me")
    target = root / "late.html"
    tools = _tools(root)
    runner = _Runner(root, then=lambda: target.symlink_to(outside / "victim.html"))
    with pytest.raises(ToolArgumentError, match="through a symbolic link"):
        tools.evaluate_app(goldens="goldens.jsonl", app="myapp.rag:chain", report="late.html", run_command=runner)
    assert (outside / "victim.html").read_text() == "keep me"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".report-")) == []
    tools.close()


def test_mcp_goldens_are_never_read_through_a_link_out_of_the_folder(workspace):
    from contextjudge.cli._mcp_tools import ToolArgumentError

    root, _ = workspace
    tools, runner = _tools(root), _Runner(root)
    with pytest.raises(ToolArgumentError, match="through a symbolic link"):
        tools.estimate(model="gpt-4o-mini", goldens="linked.jsonl")
    with pytest.raises(ToolArgumentError, match="through a symbolic link"):
        tools.evaluate_app(goldens="linked.jsonl", app="myapp.rag:chain", run_command=runner)
    assert runner.cmds == []
    assert tools.estimate(model="gpt-4o-mini", goldens="goldens.jsonl")["cases"] == 1
    tools.close()


@pytest.mark.parametrize("app", ["myapp.rag:os.getpid()", "myapp.rag:os.system", "myapp:rag.chain",
                                 "myapp.rag.os:getpid()", "os:getpid()"])
def test_mcp_allow_app_refuses_a_path_through_the_module_before_importing_anything(workspace, app):
    import sys

    from contextjudge.cli._mcp_tools import ToolArgumentError

    root, _ = workspace
    tools, runner = _tools(root), _Runner(root)
    with pytest.raises(ToolArgumentError, match="refused"):
        tools.evaluate_app(goldens="goldens.jsonl", app=app, run_command=runner)
    assert runner.cmds == [] and "myapp.rag" not in sys.modules
    tools.close()


def test_mcp_allow_app_with_an_object_runs_that_object_only(workspace):
    from contextjudge.cli._mcp_tools import ToolArgumentError

    root, _ = workspace
    tools, runner = _tools(root, allow="myapp.rag:chain"), _Runner(root)
    with pytest.raises(ToolArgumentError, match="refused"):
        tools.evaluate_app(goldens="goldens.jsonl", app="myapp.rag:build_app()", run_command=runner)
    tools.evaluate_app(goldens="goldens.jsonl", run_command=runner)
    assert [c[c.index("--app") + 1] for c in runner.cmds] == ["myapp.rag:chain"]
    assert "--app-own-only" in runner.cmds[0]
    tools.close()


def test_the_app_process_calls_only_a_factory_its_module_defines(workspace, monkeypatch):
    import sys

    from contextjudge.cli._eval import load_object
    from contextjudge.errors import UsageError

    root, _ = workspace
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    for name in ("myapp", "myapp.rag"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(UsageError, match="defined in posix"):
        load_object("myapp.rag:getpid()", own_only=True)
    with pytest.raises(UsageError, match="not a dotted path"):
        load_object("myapp.rag:os.getpid", own_only=True)
    assert load_object("myapp.rag:build_app()", own_only=True) is None
    assert isinstance(load_object("myapp.rag:getpid()"), int)  # the CLI itself still calls what it is told


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _http(host: str, port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> int:
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _until_up(proc: Any, host: str, port: int) -> None:
    import socket

    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server never listened: {proc.stderr.read()}") from None
            time.sleep(0.1)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost"])
def test_mcp_http_on_any_loopback_address_refuses_another_host_or_origin(workspace, host):
    """A DNS-rebinding page reaches a loopback server under its own name: every loopback address checks Host and
    Origin (127.0.0.2 answered Host: evil.example with 200 and the run ids)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("mcp")
    root, _ = workspace
    port = _free_port("127.0.0.1" if host == "localhost" else host)
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.Popen([sys.executable, "-m", "contextjudge", "mcp", "--store", "results.db", "--http",
                             str(port), "--host", host], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get(
                                "PYTHONPATH", "")])}, text=True)
    addr = "127.0.0.1" if host == "localhost" else host
    init = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",' \
           b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    try:
        _until_up(proc, addr, port)
        assert _http(addr, port, "POST", "/mcp", {**base, "Host": "evil.example"}, init) == 421
        assert _http(addr, port, "POST", "/mcp", {**base, "Host": f"evil.example:{port}"}, init) == 421
        assert _http(addr, port, "POST", "/mcp", {**base, "Host": f"{host}:{port}",
                                                  "Origin": "http://evil.example"}, init) == 403
        assert _http(addr, port, "POST", "/mcp", {**base, "Host": f"{host}:{port}",
                                                  "Origin": f"http://{host}:{port}"}, init) == 200
        assert _http(addr, port, "POST", "/mcp", {**base, "Host": f"127.0.0.1:{port}"}, init) == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_the_labelling_page_on_another_loopback_address_refuses_another_host_or_origin(workspace):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root, _ = workspace
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.Popen([sys.executable, "-m", "contextjudge", "label", "--serve", "--store", "results.db",
                             "--model", "fake", "--quiet", "--host", "127.0.0.2"], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(src), os.environ.get("PYTHONPATH", "")])})
    try:
        url = ""
        while not url:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the page printed no address: {proc.stderr.read()}")
            url = line.split()[1] if line.startswith("open ") else ""
        port = int(url.split("/?t=")[0].rsplit(":", 1)[1])
        path = "/" + url.split("/", 3)[3]
        assert _http("127.0.0.2", port, "GET", path, {"Host": f"127.0.0.2:{port}"}) == 200
        assert _http("127.0.0.2", port, "GET", path, {"Host": f"evil.example:{port}"}) == 403
        assert _http("127.0.0.2", port, "GET", path, {"Host": f"127.0.0.2:{port}",
                                                      "Origin": "http://evil.example"}) == 403
        assert _http("127.0.0.2", port, "GET", path, {"Host": f"localhost:{port}"}) == 200
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_the_server_embeds_too_for_peers_that_need_embeddings():
    """/v1/embeddings (used by benchmarks/goldens_cost.py for Ragas): OpenAI's client gets one unit vector per input,
    the same text the same vector, texts sharing words closer than unrelated ones; calls and tokens counted apart
    from the chat requests."""
    from langchain_openai import OpenAIEmbeddings

    with FaultServer() as server:
        emb = OpenAIEmbeddings(model="text-embedding-3-small", base_url=server.url, api_key="sk-test",
                               check_embedding_ctx_length=False, max_retries=0)
        a, b, c = emb.embed_documents(["parking permits cost forty dollars", "parking permits are sold at the desk",
                                       "vacation days carry over until March"])
        again = emb.embed_query("parking permits cost forty dollars")

        def dot(x, y):
            return sum(p * q for p, q in zip(x, y, strict=True))

        assert abs(dot(a, a) - 1.0) < 1e-9 and again == a
        assert dot(a, b) > dot(a, c)
        assert server.embedding_totals()["calls"] == 2 and server.embedding_totals()["inputs"] == 4
        assert server.totals()["calls"] == 0

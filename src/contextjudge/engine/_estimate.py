"""What judging would cost, before anything is judged: judge calls, input and output tokens, and dollars where the
judge's price is known, for a set of cases or goldens, at a sampling rate, and per day at a traffic rate.

    from contextjudge.engine._estimate import estimate
    est = estimate("goldens.jsonl", ["contextual_precision", "contextual_recall"], model="gpt-4o-mini",
                   sample_rate=0.1, per_day=50_000)
    print(est)

No judge is called. The metrics run as they would, against a stand-in judge that answers every request with valid
verdicts ("yes" to every item) and records the prompts it was sent; the requests are the real ones (the same
prompts, the same splitting by ``JudgeOptions.token_budget``, the same re-use of identical requests within a run).
Input tokens are the prompts' tokens (tiktoken's count when it is installed and its encoding is on disk, else four
characters a token) with the chat format's tokens of each message (``judges._spend.prompt_tokens``); output tokens are the figure a budget reserves per call (``judges._spend.output_estimate``).
Input tokens also count the structured-output answer schema each call sends (the closed JSON schema of the
``response_format``, or the tools for function calling; ``judges._structured.schema_tokens``), which OpenAI-compatible
providers bill as input; the embedded judge sends none. What an estimate cannot know: verdicts the real judge gives
differently (a metric that asks again after an unreadable answer), a server that takes no ``json_schema`` (its
method is then found on the first call; a JSON-mode judge sends no schema, so the estimate counts a little high),
verdicts already in a store's cache, and provider discounts (batch, cached input).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from .._result import is_embedded_judge

__all__ = ["Estimate", "estimate"]

# placeholder nodes for goldens that carry no retrieval context (the app has not run, so its nodes are unknown)
ASSUMED_NODES = 5
ASSUMED_NODE_CHARS = 600


@dataclass
class Estimate:
    """The judge work a run would do. ``calls``, ``input_tokens``, ``output_tokens`` and ``dollars`` are for the
    cases given at ``sample_rate`` (the share of them that would be judged); ``per_case`` is one judged case on
    average; ``per_day`` is ``requests_per_day`` at ``sample_rate`` (None without a traffic rate). ``dollars`` is
    None when the judge's price is not known (``why``)."""

    model: str
    cases: int
    sample_rate: float
    metrics: list[str]
    calls: float
    input_tokens: float
    output_tokens: float
    dollars: float | None
    why: str | None = None
    price: dict[str, float] | None = None
    per_case: dict[str, Any] = field(default_factory=dict)
    per_metric: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_day: dict[str, Any] | None = None
    skipped: int = 0
    assumptions: list[str] = field(default_factory=list)
    # the upper bound a token or dollar budget holds while each call is in flight: its answer cap (max_output_tokens,
    # else judges._spend.BUDGET_OUTPUT_CAP) instead of the expected answer; 0 for the embedded judge (billed by nobody)
    reserved_output_tokens: float = 0.0
    reserved_dollars: float | None = None
    # a jury (judges._jury): the estimate of each juror, by name; the totals above are their sums
    jurors: dict[str, dict[str, Any]] | None = None
    output_source: str = "typical"
    # the part of input_tokens that is the structured-output answer schema sent with each call (a response_format's
    # json_schema or the tools), which OpenAI-compatible providers bill as input; 0 for the embedded judge
    schema_tokens: float = 0.0

    @property
    def total_tokens(self) -> float:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """The estimate as plain data (what ``contextjudge estimate --json`` prints)."""
        d = asdict(self)
        d["total_tokens"] = self.total_tokens
        return d

    def __str__(self) -> str:
        def money(x: float | None) -> str:
            if x is None:
                return "dollars unknown"
            if x == 0:
                return "$0 (a free judge)"
            return f"${x:,.4f}" if x < 1 else f"${x:,.2f}"

        rate = f" at sample rate {self.sample_rate:g}" if self.sample_rate != 1.0 else ""
        lines = [f"Estimate for judge {self.model}: {self.cases} case(s){rate}, metrics {', '.join(self.metrics)} "
                 "(no judge was called)"]
        judged = self.cases * self.sample_rate
        what = (f"all {self.cases} cases" if self.sample_rate >= 1.0
                else f"{_n(judged)} of {self.cases} cases judged on average")
        lines.append(f"  run ({what}): {_n(self.calls)} calls, {_n(self.input_tokens)} input + "
                     f"{_n(self.output_tokens)} output tokens, {money(self.dollars)}")
        pc = self.per_case
        lines.append(f"  per judged case: {pc.get('calls', 0):.2f} calls, {_n(pc.get('input_tokens', 0))} input + "
                     f"{_n(pc.get('output_tokens', 0))} output tokens, {money(pc.get('dollars'))}")
        for name, row in self.per_metric.items():
            lines.append(f"    {name}: {row['calls']:.2f} calls, {_n(row['input_tokens'])} input + "
                         f"{_n(row['output_tokens'])} output tokens")
        if self.per_day is not None:
            pd = self.per_day
            lines.append(f"  per day:  {_n(pd['requests'])} requests, {_n(pd['judged_cases'])} judged, "
                         f"{_n(pd['calls'])} calls, {_n(pd['input_tokens'])} input + {_n(pd['output_tokens'])} "
                         f"output tokens, {money(pd['dollars'])} expected")
            if pd.get("reserved_output_tokens"):
                lines.append(f"            reserved upper bound: {_n(pd['input_tokens'])} input + "
                             f"{_n(pd['reserved_output_tokens'])} output tokens, {money(pd.get('reserved_dollars'))}")
        src = ("answer lengths measured in the store (this judge's real usage)" if self.output_source == "store"
               else "typical answer lengths (about 20 + 60 tokens per judged item)")
        if self.reserved_output_tokens:
            lines.append(f"  expected cost above: {src}. Reserved upper bound: {_n(self.input_tokens)} input + "
                         f"{_n(self.reserved_output_tokens)} output tokens, {money(self.reserved_dollars)} (each call's "
                         "answer cap). A token or dollar budget holds the upper bound only while a call is in flight "
                         "and is spent by what the call really used: plan the budget on the expected figure, with "
                         "room for the calls in flight.")
        else:
            lines.append(f"  expected cost above: {src}. The embedded judge spends no token or dollar budget "
                         "(a budget in judge calls still applies).")
        if self.dollars is None and self.why:
            lines.append(f"  dollars unknown: {self.why}")
        if self.skipped:
            lines.append(f"  {self.skipped} case(s) no metric could score (missing fields) cost nothing")
        for a in self.assumptions:
            lines.append(f"  note: {a}")
        return "\n".join(lines)


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 or float(x).is_integer() else f"{x:,.1f}"


def _metric_objects(metrics: Any) -> list[Any]:
    from ..metrics import from_keys  # noqa: PLC0415

    if metrics is None:
        metrics = ["contextual_precision", "contextual_recall", "contextual_relevancy", "context_utilization"]
    out = []
    for m in metrics:
        if isinstance(m, str):
            out.extend(from_keys([m]))
        else:
            # a copy that judges with the run's judge (the stand-in), never the metric's own: no call goes out
            c = copy.copy(m)
            c._model_arg = None  # noqa: SLF001
            c._model = None  # noqa: SLF001
            out.append(c)
    return out


def _model_name(model: Any, metrics: Sequence[Any]) -> str:
    from ..judges import DEFAULT_OPENAI_MODEL, judge_name, local_spec  # noqa: PLC0415

    if model is None:
        for m in metrics:
            arg = getattr(m, "_model_arg", None)
            if arg is not None:
                model = arg
                break
    if model is None:
        model = os.environ.get("CONTEXTJUDGE_MODEL") or (DEFAULT_OPENAI_MODEL if os.environ.get("OPENAI_API_KEY")
                                                          else "local")
    if isinstance(model, str):
        return local_spec(model) or model.strip()
    return judge_name(model)


def _cases(source: Any, assumptions: list[str]) -> list[Any]:
    from ..cases.goldens import Golden, Goldens, load_goldens  # noqa: PLC0415
    from ..cases.testcase import ConversationalTestCase, LLMTestCase  # noqa: PLC0415

    if isinstance(source, (str, os.PathLike, Goldens)):
        items: list[Any] = list(load_goldens(source))
    else:
        items = [getattr(x, "test_case", x) for x in source]  # StoredCase -> its test case
    out: list[Any] = []
    assumed = stand_in_output = 0
    for it in items:
        if isinstance(it, dict):
            it = Golden.from_dict(it)
        if isinstance(it, (LLMTestCase, ConversationalTestCase)):
            out.append(it)
            continue
        if not isinstance(it, Golden):
            from ..errors import ConfigurationError  # noqa: PLC0415

            raise ConfigurationError(f"estimate takes test cases, goldens (or a goldens file), not "
                                     f"{type(it).__name__}.")
        nodes = it.retrieval_context or it.context
        if not nodes:
            assumed += 1
            nodes = [("The retrieved text of a node, about as long as a typical chunk. " * 20)[:ASSUMED_NODE_CHARS]
                     for _ in range(ASSUMED_NODES)]
        if not it.expected_output:
            stand_in_output += 1
        answer = it.expected_output or it.input
        out.append(LLMTestCase(input=it.input, actual_output=answer, expected_output=it.expected_output or answer,
                               retrieval_context=cast(Any, list(nodes))))
    if assumed:
        assumptions.append(f"{assumed} golden(s) carry no retrieval_context: each was given {ASSUMED_NODES} nodes of "
                           f"{ASSUMED_NODE_CHARS} characters (the app's real nodes are only known once it runs)")
    if any(isinstance(it, Golden) for it in items):
        assumptions.append("the app's answer is taken to be the golden's expected_output (the app did not run)")
    if stand_in_output:
        assumptions.append(f"{stand_in_output} golden(s) have no expected_output: their input stands in for it")
    return out


def estimate(cases_or_goldens: Iterable[Any] | str | os.PathLike, metrics: Sequence[Any] | None = None, *,
             model: Any = None, sample_rate: float = 1.0, per_day: float | None = None,
             judge_options: Any = None, observed_output: dict[str, float] | None = None) -> Estimate:
    """What judging ``cases_or_goldens`` (test cases, goldens, stored cases or a goldens file) with ``metrics``
    (metric objects or keys such as ``"contextual_precision"``; default: the four retrieval metrics) by ``model``
    (a model name or chat model, used for its price and tokenizer only: it is never called) would cost, at
    ``sample_rate``, and per day at ``per_day`` requests a day. No judge call is made.

    The expected output tokens are typical answer lengths, or ``observed_output`` (answer tokens per call by task,
    measured from real usage: ``ResultsStore.answer_lengths(judge)``); the reserved upper bound is each call's answer
    cap, which a token or dollar budget holds while the call is in flight."""
    from ..errors import ConfigurationError  # noqa: PLC0415

    if not isinstance(sample_rate, (int, float)) or isinstance(sample_rate, bool) or not 0.0 <= sample_rate <= 1.0:
        raise ConfigurationError(f"sample_rate must be a number from 0 to 1, got {sample_rate!r}.")
    if per_day is not None and (not isinstance(per_day, (int, float)) or per_day < 0):
        raise ConfigurationError(f"per_day (requests a day) must be a number >= 0, got {per_day!r}.")
    jurors = _jurors_of(model)
    if jurors is not None:  # every juror judges every case: the jury costs the sum of its jurors
        parts = {label: estimate(cases_or_goldens, metrics, model=j, sample_rate=sample_rate, per_day=per_day,
                                 judge_options=judge_options, observed_output=observed_output)
                 for label, j in jurors}
        return _jury_total(str(model) if isinstance(model, str) else _model_name(model, []), parts)
    assumptions: list[str] = []
    ms = _metric_objects(metrics)
    name = _model_name(model, [m for m in (metrics or []) if not isinstance(m, str)])
    cases = _cases(cases_or_goldens, assumptions)
    calls, skipped = _drive(cases, ms, name, judge_options)
    return _tally(name, ms, cases, calls, skipped, float(sample_rate), per_day, judge_options, assumptions,
                  observed_output, schema_method(model, name))


def schema_method(model: Any, name: str | None) -> str | None:
    """The structured-output method whose answer schema the judge ``model`` (named ``name``) will send with each
    call, for counting that schema as input: the method its server took last in this process, else ``json_schema``
    (the first one a judge tries, which OpenAI-compatible servers take); None for the embedded judge and any other
    native judge (no request goes out), a model billed for no schema (``contextjudge_bills_schema = False``: the
    scripted ``testing.FakeJudge``) and a model not yet known (no name)."""
    from ..judges import known_method, local_spec  # noqa: PLC0415

    if not name or local_spec(name) or is_embedded_judge(name) or getattr(model, "contextjudge_native", False) \
            or not getattr(model, "contextjudge_bills_schema", True):
        return None
    if model is not None and not isinstance(model, str):
        return known_method(model) or "json_schema"
    return "json_schema"


def _jurors_of(model: Any) -> list[tuple[str, Any]] | None:
    """The jurors of a jury (a ``Jury`` or a ``"jury:..."`` string, read without building its jurors), else None."""
    if isinstance(model, str) and model.strip().lower().startswith(("jury:", "jury[")):
        names = [p.strip() for p in model.strip().partition(":")[2].split(",") if p.strip()]
        return [(f"{n}#{i}" if names.count(n) > 1 else n, n) for i, n in enumerate(names, 1)]
    jury_names = getattr(model, "juror_names", None)
    if jury_names is not None and hasattr(model, "jurors"):
        return list(zip(jury_names, model.jurors, strict=True))
    return None


def _jury_total(name: str, parts: dict[str, Estimate]) -> Estimate:
    first = next(iter(parts.values()))

    def total(attr: str) -> Any:
        vals = [getattr(p, attr) for p in parts.values()]
        return None if any(v is None for v in vals) else sum(vals)

    def add(dicts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
        if any(d is None for d in dicts):
            return None
        keys = [k for k in dicts[0] or {}]
        return {k: (None if any((d or {}).get(k) is None for d in dicts) else sum((d or {})[k] for d in dicts))
                for k in keys}

    unknown = [n for n, p in parts.items() if p.dollars is None]
    per_metric: dict[str, dict[str, Any]] = {}
    for p in parts.values():
        for k, row in p.per_metric.items():
            acc = per_metric.setdefault(k, {kk: 0.0 for kk in row})
            for kk, v in row.items():
                acc[kk] = acc.get(kk, 0.0) + v
    return Estimate(model=name, cases=first.cases, sample_rate=first.sample_rate, metrics=first.metrics,
                    calls=total("calls"), input_tokens=total("input_tokens"), output_tokens=total("output_tokens"),
                    dollars=total("dollars"), why=(f"no known price for juror(s) {', '.join(unknown)}" if unknown
                                                   else None),
                    per_case=add([p.per_case for p in parts.values()]) or {}, per_metric=per_metric,
                    per_day=add([p.per_day for p in parts.values()]), skipped=first.skipped,
                    assumptions=[*first.assumptions, f"a jury of {len(parts)}: every juror judges every case"],
                    reserved_output_tokens=total("reserved_output_tokens"), reserved_dollars=total("reserved_dollars"),
                    schema_tokens=total("schema_tokens"),
                    output_source=first.output_source, jurors={n: p.to_dict() for n, p in parts.items()})


def _drive(cases: list[Any], metrics: list[Any], name: str, judge_options: Any) -> tuple[list[dict[str, Any]], int]:
    """Score ``cases`` against the stand-in judge; the calls it was sent and how many cases nothing could score."""
    import asyncio  # noqa: PLC0415

    from .._aio import run_sync  # noqa: PLC0415
    from ..judges import (  # noqa: PLC0415
        JudgeOptions,  # noqa: PLC0415
        RunContext,
        use_run_context,
    )
    from ..testing import FakeJudge  # noqa: PLC0415
    from ._run import Run  # noqa: PLC0415
    from ._score import score_case  # noqa: PLC0415

    judge = FakeJudge(default="yes", model_name=name)
    opts = judge_options or JudgeOptions()
    if opts.budget is not None or opts.rate_limit is not None or opts.repeats != 1:
        import dataclasses  # noqa: PLC0415

        opts = dataclasses.replace(opts, budget=None, rate_limit=None, repeats=1)
    ctx = RunContext(options=opts, cache=cast(Any, _NoCache()))  # duck-typed: a cache that never hits
    ctx.default_model = judge
    run = Run(context=ctx)
    skipped = [0]

    async def main() -> None:
        sem = asyncio.Semaphore(16)

        async def one(i: int, tc: Any) -> None:
            async with sem:
                out = await score_case(run, f"estimate-{i}", tc, metrics, missing="skip")
                if not out:
                    skipped[0] += 1

        with use_run_context(ctx):
            await asyncio.gather(*(one(i, tc) for i, tc in enumerate(cases)))

    run_sync(main())
    return judge.calls, skipped[0]


class _NoCache:
    """A verdict cache that never hits: a golden's stand-in answer is its expected output, which would make
    requests that differ in a real run (the app's answer against the expected one) look identical."""

    backend = None

    def get(self, key: str) -> None:
        return None

    def put(self, key: str, value: Any) -> None:
        return None

    async def aget(self, key: str) -> None:
        return None

    async def aput(self, key: str, value: Any) -> None:
        return None

    def __len__(self) -> int:
        return 0


def _tally(name: str, metrics: list[Any], cases: list[Any], calls: list[dict[str, Any]], skipped: int,
           sample_rate: float, per_day: float | None, judge_options: Any, assumptions: list[str],
           observed: dict[str, float] | None = None, method: str | None = None) -> Estimate:
    from ..judges import BUDGET_OUTPUT_CAP, family, local_spec, output_estimate, price_of, prompt_tokens  # noqa: PLC0415
    from ..judges import schema_tokens as schema_size  # noqa: PLC0415

    price = price_of(name)
    max_out = getattr(judge_options, "max_output_tokens", None)
    repeats = int(getattr(judge_options, "repeats", 1) or 1)
    local = bool(local_spec(name)) or is_embedded_judge(name)  # a spelling of an embedded judge, or its name
    if local:
        repeats = 1  # the embedded judge is deterministic: asked once
        method = None
    from ..metrics import BY_KEY  # noqa: PLC0415

    key_of = {cls: key for key, cls in BY_KEY.items()}
    by_metric: dict[str, dict[str, Any]] = {key_of.get(type(m), getattr(m, "name", type(m).__name__)): {
        "calls": 0, "input_tokens": 0, "output_tokens": 0} for m in metrics}
    tin = tout = 0
    reserved = 0
    cap = max_out or BUDGET_OUTPUT_CAP
    used_store = False
    schema_in = 0
    for c in calls:
        task = c.get("task")
        inp = prompt_tokens(c.get("messages") or c.get("prompt") or "", name)
        if method and c.get("method") != "text" and (c.get("family") or task):
            # the answer schema sent with the call, which OpenAI-compatible providers bill as input
            sch = schema_size(family(str(c.get("family") or task)).schema, method, name)
            inp += sch
            schema_in += sch
        out = output_estimate(task if c.get("method") != "text" else None, len(c.get("ids") or []), None)
        seen = (observed or {}).get(str(task)) if c.get("method") != "text" else (observed or {}).get("text")
        if seen is not None:
            out, used_store = int(round(seen)), True
        if max_out:
            out = min(out, int(max_out))
        tin += inp
        tout += out
        reserved += 0 if local else cap
        row = by_metric.setdefault(c.get("metric") or "?", {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        row["calls"] += 1
        row["input_tokens"] += inp
        row["output_tokens"] += out
    n_calls = len(calls) * repeats
    tin, tout, reserved = tin * repeats, tout * repeats, reserved * repeats
    if repeats > 1:
        assumptions.append(f"each request is asked {repeats} times (JudgeOptions.repeats)")
    if schema_in and calls:
        assumptions.append(f"input counts the answer schema sent with each call ({method}: "
                           f"{_n(schema_in / len(calls))} tokens a call on average), which OpenAI-compatible "
                           "providers bill as input")
    n = len(cases)
    why = None
    if price is None:
        why = (f"no known price for {name!r}: add it with contextjudge.judges._spend.register_prices (or give a "
               "budget in tokens)")
    dollars = price.cost(tin, tout) if price is not None else None
    scale = sample_rate
    case_dollars = (dollars / n if n else 0.0) if dollars is not None else None
    per_case: dict[str, float | None] = {"calls": n_calls / n if n else 0.0, "input_tokens": tin / n if n else 0.0,
                                         "output_tokens": tout / n if n else 0.0, "dollars": case_dollars}
    per_metric = {k: {kk: (v * repeats / n if n else 0.0) for kk, v in row.items()} for k, row in by_metric.items()}
    day: dict[str, float | None] | None = None
    if per_day is not None:
        judged = per_day * sample_rate
        day = {"requests": per_day, "judged_cases": judged,
               "calls": (n_calls / n if n else 0.0) * judged, "input_tokens": (tin / n if n else 0.0) * judged,
               "output_tokens": (tout / n if n else 0.0) * judged,
               "dollars": case_dollars * judged if case_dollars is not None else None}
    assumptions.append("every request is counted, also one a run would answer from its verdict cache")
    reserved_dollars = price.cost(tin, reserved) if (price is not None and not local) else (0.0 if local else None)
    if day is not None and per_day is not None:
        k = per_day * sample_rate / n if n else 0.0
        day["reserved_output_tokens"] = reserved * k
        day["reserved_dollars"] = reserved_dollars * k if reserved_dollars is not None else None
    return Estimate(model=name, cases=n, sample_rate=sample_rate, metrics=list(by_metric),
                    calls=_round(n_calls * scale), input_tokens=_round(tin * scale),
                    output_tokens=_round(tout * scale), dollars=dollars * scale if dollars is not None else None,
                    why=why, price=({"input": price.input, "output": price.output} if price is not None else None),
                    per_case=per_case, per_metric=per_metric, per_day=day, skipped=skipped, assumptions=assumptions,
                    reserved_output_tokens=_round(reserved * scale),
                    schema_tokens=_round(schema_in * repeats * scale),
                    reserved_dollars=reserved_dollars * scale if reserved_dollars is not None else None,
                    output_source="store" if used_store else "typical")


def _round(x: float) -> float:
    return float(x) if not float(x).is_integer() else float(math.floor(x))

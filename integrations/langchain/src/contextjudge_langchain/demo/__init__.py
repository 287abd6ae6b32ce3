"""``contextjudge demo``: the whole job, offline, on a small RAG app over a fictional company's policies.

It builds a real LCEL RAG chain twice, with a weak and a good retriever, runs the 15 golden questions and a
three-turn conversation through each with ``ContextJudgeCallbackHandler`` attached (no change to the chain),
scores contextual precision, recall, relevancy and utilization plus turn relevancy, and prints which retriever
wins and why. The judge is the embedded offline judge (``model="local"``) when it is installed, otherwise
contextjudge's scripted FakeJudge, clearly labelled.

Also runnable as ``python -m contextjudge_langchain.demo``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
import time
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from contextjudge.stats import mean_interval

__all__ = ["main"]

CORPUS = "data/demo_corpus"
SINGLE_METRICS = ("Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization")
TURN_METRICS = ("Turn Contextual Precision", "Turn Contextual Recall", "Turn Contextual Relevancy")


def load_corpus() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The demo corpus shipped with contextjudge: documents, goldens and one conversation."""
    root = files("contextjudge") / CORPUS
    docs = json.loads((root / "docs.json").read_text("utf-8"))
    goldens = json.loads((root / "goldens.json").read_text("utf-8"))["goldens"]
    conversation = json.loads((root / "conversation.json").read_text("utf-8"))
    return docs, goldens, conversation


@dataclass
class Config:
    """One retriever configuration of the demo app."""

    key: str
    label: str
    dim: int
    stopwords: bool
    stem: bool
    k: int


CONFIGS = (
    Config("weak", "keyword bag-of-words: stop words kept, no stemming, 64 hash buckets, top 2",
           dim=64, stopwords=False, stem=False, k=2),
    Config("good", "bag-of-words without stop words, light stemming, 2048 hash buckets, top 2",
           dim=2048, stopwords=True, stem=True, k=2),
)


@dataclass
class Outcome:
    config: Config
    handler: Any
    conversation: Any
    seconds: float
    hits: int = 0
    questions: int = 0
    scores: dict[str, list[float]] = field(default_factory=dict)


def pick_judge(choice: str) -> tuple[Any, str, bool]:
    """The judge model, a label saying what it is, and whether it is the real embedded judge."""
    reason = ""
    if choice in ("auto", "local"):
        try:
            from contextjudge.judges import resolve_model  # noqa: PLC0415

            return resolve_model("local"), "the embedded offline judge (model=\"local\")", True
        except Exception as exc:  # noqa: BLE001 - fall back to the scripted judge, and say why
            if choice == "local":
                raise
            reason = f" ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    from contextjudge.testing import FakeJudge  # noqa: PLC0415

    return (FakeJudge(default=scripted_verdict),
            "FakeJudge with a scripted word-overlap rule, NOT a real judge: the embedded judge is not available"
            + reason, False)


def scripted_verdict(request: Any, item: Any) -> str:
    """The fallback judge's rule: shared content words (stemmed), nothing smarter. Used only without the real judge."""
    from ..testing import tokens  # noqa: PLC0415

    words = set(tokens(item.text))
    if request.verdict_family.cites_context:  # a statement against the retrieved nodes
        support = set().union(*(tokens(c.text) for c in request.context)) if request.context else set()
        return "yes" if words and len(words & support) / len(words) >= 0.6 else "no"
    target = set(tokens(request.input)) | set(tokens(request.reference or ""))
    return "yes" if len(words & target) >= 2 else "no"


def build_chain(docs: list[dict[str, Any]], config: Config) -> Any:
    """retriever | format | prompt | offline chat model | parser, as a RAG app would be written in LCEL."""
    from langchain_core.documents import Document  # noqa: PLC0415
    from langchain_core.output_parsers import StrOutputParser  # noqa: PLC0415
    from langchain_core.prompts import ChatPromptTemplate  # noqa: PLC0415
    from langchain_core.runnables import RunnablePassthrough  # noqa: PLC0415
    from langchain_core.vectorstores import InMemoryVectorStore  # noqa: PLC0415

    from ..testing import BagOfWordsEmbeddings, ExtractiveChatModel  # noqa: PLC0415

    store = InMemoryVectorStore(BagOfWordsEmbeddings(config.dim, stopwords=config.stopwords, stem=config.stem))
    store.add_documents([Document(d["text"], id=d["id"], metadata={"title": d["title"], "category": d["category"]})
                         for d in docs])
    retriever = store.as_retriever(search_kwargs={"k": config.k}).with_config(run_name=f"{config.key}_retriever")
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You answer employees' questions about Kestrel Harbor Instruments' policies."),
        ("human", "Answer from the context only.\nContext:\n{context}\n\nQuestion: {question}"),
    ])

    def format_docs(documents: list[Any]) -> str:
        return "\n\n".join(d.page_content for d in documents)

    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt | ExtractiveChatModel() | StrOutputParser())


def run_config(config: Config, docs: list[dict[str, Any]], goldens: list[dict[str, Any]],
               conversation: dict[str, Any], judge: Any, concurrency: int) -> Outcome:
    from contextjudge.metrics import (  # noqa: PLC0415
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        ContextualRelevancyMetric,
        ContextUtilizationMetric,
        TurnContextualPrecisionMetric,
        TurnContextualRecallMetric,
        TurnContextualRelevancyMetric,
    )

    from .. import ContextJudgeCallbackHandler  # noqa: PLC0415

    started = time.perf_counter()
    chain = build_chain(docs, config)
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
               ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]
    handler = ContextJudgeCallbackHandler(metrics=metrics, goldens=goldens, mode="background",
                                          concurrency=concurrency)
    # The conversation gets its own handler with only the turn metrics, so its turns are not scored twice.
    turn_metrics = [TurnContextualPrecisionMetric(model=judge), TurnContextualRecallMetric(model=judge),
                    TurnContextualRelevancyMetric(model=judge)]
    conv_handler = ContextJudgeCallbackHandler(metrics=turn_metrics,
                                               goldens=conversation["turns"], mode="background")
    chain.batch([g["input"] for g in goldens], config={"callbacks": [handler], "max_concurrency": concurrency})
    thread_id = f"{conversation['thread_id']}-{config.key}"
    for turn in conversation["turns"]:
        chain.invoke(turn["input"], config={"callbacks": [conv_handler], "metadata": {"thread_id": thread_id}})
    handler.flush()
    conv_handler.flush()
    outcome = Outcome(config, handler, conv_handler, time.perf_counter() - started)
    relevant = {g["input"]: set(g["relevant_ids"]) for g in goldens}
    for case in handler.cases:
        ids = {n.id for n in case.test_case.retrieval_context or []}
        outcome.questions += 1
        outcome.hits += bool(ids & relevant.get(case.test_case.input, set()))
    for _case, result in handler.results:
        if result.score is not None:
            outcome.scores.setdefault(result.name, []).append(result.score)
    return outcome


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _interval(xs: list[float]) -> str:
    """The 95% interval of a mean score over the questions, as the CLI and the report print it."""
    iv = mean_interval(xs)
    return "" if iv.low is None else f"[{iv.low:.2f}, {iv.high:.2f}]"


def _fmt(x: float | None) -> str:
    return "  n/a" if x is None else f"{x:5.2f}"


def _conversation_score(outcome: Outcome, name: str) -> tuple[float | None, str]:
    for _, result in outcome.conversation.results:
        if result.name == name:
            return result.score, result.reason or ""
    return None, ""


def gated_names(real_judge: bool) -> set[str]:
    """The demo's single-turn metrics a gate rests on with its judge (``metrics.not_gated``): with the embedded
    judge, uncalibrated, precision and recall; relevancy and utilization are shown, not gated."""
    from contextjudge.metrics import BY_KEY, not_gated  # noqa: PLC0415

    keys = {BY_KEY[k].name: k for k in BY_KEY}
    loose = not_gated([keys[n] for n in SINGLE_METRICS], "local" if real_judge else FAKE_SPEC)
    return {n for n in SINGLE_METRICS if keys[n] not in loose}


FAKE_SPEC = "fake"  # the scripted judge: trusted like an LLM judge (it is a test double, not the embedded judge)


def worst_cases(outcome: Outcome, n: int, gated: set[str] | None = None) -> list[tuple[Any, Any]]:
    """The n lowest-scoring (case, result) pairs, one per case, among the metrics in ``gated`` (None: every one)."""
    ranked = sorted(((c, r) for c, r in outcome.handler.results
                     if r.score is not None and (gated is None or r.name in gated)),
                    key=lambda cr: (cr[1].score, cr[1].name))
    seen: set[str] = set()
    out = []
    for case, result in ranked:
        if case.case_id in seen:
            continue
        seen.add(case.case_id)
        out.append((case, result))
        if len(out) == n:
            break
    return out


def report(outcomes: list[Outcome], judge_label: str, real_judge: bool, docs: dict[str, Any],
           n_goldens: int, seconds: float) -> str:
    weak, good = outcomes
    lines: list[str] = []
    add = lines.append
    wrap = textwrap.TextWrapper(width=100, initial_indent="       ", subsequent_indent="       ")
    add("")
    add("contextjudge demo: scoring the retrieval half of a LangChain RAG app, offline")
    add("=" * 78)
    add(f"Judge:  {judge_label}")
    add(f"Corpus: {docs['company']} policies ({len(docs['documents'])} documents, fictional), "
        f"{n_goldens} golden questions, one 3-turn conversation")
    add("App:    LCEL chain {context: retriever | format, question} | prompt | ExtractiveChatModel | StrOutputParser")
    add("        (ExtractiveChatModel is an offline stand-in that quotes the best-matching context sentences;")
    add("        it is not an LLM.) Captured by ContextJudgeCallbackHandler in callbacks, with no change to the chain.")
    add("")
    for o in outcomes:
        add(f"  {o.config.key:<5} retriever: {o.config.label}")
    add("")
    add(f"  {'metric: mean score [95% interval]':<40}{'weak':>18}{'good':>19}{'change':>9}")
    wins = 0
    compared = 0
    losses: list[str] = []
    for name in SINGLE_METRICS:
        w, g = _mean(weak.scores.get(name, [])), _mean(good.scores.get(name, []))
        wi, gi = _interval(weak.scores.get(name, [])), _interval(good.scores.get(name, []))
        delta = "" if w is None or g is None else f"{g - w:+.2f}"
        if w is not None and g is not None:
            compared += 1
            wins += g > w
            if g < w:
                losses.append(f"{name} ({g:.2f} vs {w:.2f})")
        add(f"  {name:<40}{_fmt(w):>6} {wi:>11}{_fmt(g):>7} {gi:>11}{delta:>9}")
    for name in TURN_METRICS:
        cw, _ = _conversation_score(weak, name)
        cg, _ = _conversation_score(good, name)
        if cw is not None and cg is not None:
            compared += 1
            wins += cg > cw
            if cg < cw:
                losses.append(f"{name} on the conversation ({cg:.2f} vs {cw:.2f})")
        add(f"  {name + ' (conv.)':<40}{_fmt(cw):>6}{'':>12}{_fmt(cg):>7}{'':>12}"
            f"{'' if cw is None or cg is None else f'{cg - cw:+.2f}':>9}")
    add(f"  {'answering document retrieved (labels)':<40}{f'{weak.hits}/{weak.questions}':>6}{'':>12}"
        f"{f'{good.hits}/{good.questions}':>7}")
    add(f"  (intervals: 95% over the {good.questions} questions; a turn metric is one conversation, so it has none)")
    add("")
    verdict = "wins" if wins == compared and compared else ("mostly wins" if wins * 2 > compared else "does not win")
    add(f"Verdict: the good retriever {verdict} ({wins} of {compared} metrics higher).")
    if losses:
        add(textwrap.fill("Where it scored lower: " + "; ".join(losses) + ".", width=100, initial_indent="  ",
                          subsequent_indent="  "))
    add("Why:")
    for para in (
        f"The weak retriever brought back the document that answers the question for {weak.hits} of "
        f"{weak.questions} questions, the good one for {good.hits} of {good.questions} (checked against the "
        "corpus' own labels, not by the judge).",
        "Keeping stop words lets words like 'the', 'how' and 'do' drive the ranking, and 64 hash buckets make "
        "unrelated words collide, so the weak retriever ranks off-topic policies first (lower precision and "
        "relevancy) and misses the facts the expected answers need (lower recall). Both return their top 2 "
        "documents to the same prompt and model: only the ranking differs.",
    ):
        add(wrap.fill(para))
    gated = gated_names(real_judge)
    if real_judge:
        add("")
        add(wrap.fill(
            "What the gate uses: " + ", ".join(n for n in SINGLE_METRICS if n in gated) + ". The embedded judge "
            "agrees with people on whether a node helps toward the expected answer (node usefulness: kappa 0.87 "
            "on the shipped judge check); its no-reference relevancy misses relevant nodes (kappa 0.19 there), so "
            "relevancy and utilization are shown, not gated, until it is calibrated on your own labels "
            "(`contextjudge calibrate`)."))
    for o, n in ((weak, 3), (good, 2)):
        add("")
        add(f"Worst cases, {o.config.key} retriever (on the metrics the gate uses):")
        for i, (case, result) in enumerate(worst_cases(o, n, gated), start=1):
            tc = case.test_case
            ids = ", ".join(node.id or "?" for node in tc.retrieval_context or [])
            add(f"  {i}. {tc.input!r}")
            add(f"     {result.name} {result.score:.2f}; retrieved [{ids}]")
            add(wrap.fill(f"reason: {result.reason or '(none)'}"))
    conv = sorted((r for _, r in weak.conversation.results if r.score is not None), key=lambda r: r.score)
    if conv:
        add("")
        add(f"Conversation (one thread id, 3 exchanges), weak retriever, lowest: {conv[0].name} {conv[0].score:.2f}")
        add(wrap.fill(f"reason: {conv[0].reason or '(none)'}"))
    add("")
    total_scores = sum(len(o.handler.results) + len(o.conversation.results) for o in outcomes)
    add(f"Scored {total_scores} metric results on {sum(len(o.handler.cases) for o in outcomes)} captured "
        f"retrievals and 2 conversations in {seconds:.1f} s"
        + ("" if real_judge else " (with the scripted FakeJudge: install contextjudge[local] for the real "
                                  "embedded judge)") + ".")
    add("Next: attach ContextJudgeCallbackHandler to your own chain, or run `contextjudge eval --app module:chain "
        "--goldens goldens.jsonl` (no goldens yet: `contextjudge goldens generate --docs docs/ --model gpt-4o-mini "
        "-o goldens.jsonl` writes checked questions from your documents).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the demo and print its summary; returns 0 (the verdict is in the output, not the exit code)."""
    parser = argparse.ArgumentParser(prog="contextjudge demo", description=__doc__.splitlines()[0])
    parser.add_argument("--judge", choices=("auto", "local", "fake"), default="auto",
                        help="auto: the embedded judge if installed, else the scripted FakeJudge (labelled)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N golden questions")
    parser.add_argument("--concurrency", type=int, default=4, help="app calls and judge calls in flight")
    parser.add_argument("--json", metavar="PATH", help="also write every case and score to this JSON file")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    docs, goldens, conversation = load_corpus()
    if args.limit:
        goldens = goldens[: args.limit]
    judge, judge_label, real = pick_judge(args.judge)
    print(f"contextjudge demo: judge = {judge_label}", file=sys.stderr)
    outcomes = []
    for config in CONFIGS:
        outcome = run_config(config, docs["documents"], goldens, conversation, judge, args.concurrency)
        print(f"  {config.key} retriever: {len(outcome.handler.cases)} retrievals captured and scored in "
              f"{outcome.seconds:.1f} s", file=sys.stderr)
        outcomes.append(outcome)
    print(report(outcomes, judge_label, real, docs, len(goldens), time.perf_counter() - started))
    if args.json:
        dump = [{"config": o.config.key, "source": c.source, "input": getattr(c.test_case, "input", None),
                 "retrieved": [n.id for n in getattr(c.test_case, "retrieval_context", None) or []],
                 "results": [{"metric": r.name, "score": r.score, "success": r.success, "reason": r.reason}
                             for r in c.results]}
                for o in outcomes for c in o.handler.cases + o.conversation.cases]
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(dump, fh, indent=2)
    return 0

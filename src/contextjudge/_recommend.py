"""``contextjudge recommend``: a short questionnaire that says which metrics fit an app, why, and how to start.

    contextjudge recommend                                   # asks in the terminal
    contextjudge recommend --answers retrieves=yes,reference=no,multi_turn=no,judge=local
    contextjudge recommend --answers '{"retrieves": true, "reference": true}' --format json

Questions: does the app retrieve; are there reference answers; is it multi-turn; is an LLM judge available or only
the offline one; do questions or retrieved items hold images. Interactive on a terminal; ``--answers`` answers
some or all of them (on a terminal, the rest are asked; otherwise they take their defaults). Prints each fitting
metric with one line on why, and a snippet to paste. ``contextjudge recommend metrics`` (DeepEval's spelling) works
too. Exit codes: 0 ok, 2 an unusable answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .errors import ConfigurationError

__all__ = ["Answers", "Recommendation", "main", "recommend"]

EXIT_OK, EXIT_ERROR = 0, 2


@dataclass(frozen=True)
class Question:
    key: str
    text: str
    choices: tuple[str, ...]
    default: str
    aliases: tuple[str, ...] = ()


QUESTIONS = (
    Question("retrieves", "Does your app retrieve documents or nodes before it answers?", ("yes", "no"), "yes",
             ("retrieve", "retrieval", "rag")),
    Question("reference", "Do you have reference answers (goldens with an expected_output)?", ("yes", "no"), "no",
             ("references", "expected", "expected_output", "goldens", "golden")),
    Question("multi_turn", "Is it a multi-turn chat, where answers depend on earlier turns?", ("yes", "no"), "no",
             ("multiturn", "multi-turn", "chat", "conversation", "conversational")),
    Question("judge", "Which judge can you use: an LLM (OpenAI, Anthropic, Ollama, ...) or only the offline one?",
             ("llm", "local"), "local", ("model", "llm_judge", "offline")),
    Question("images", "Do the questions or the retrieved items contain images?", ("yes", "no"), "no",
             ("image", "multimodal")),
    Question("chunk_labels", "Do you know which chunks (or documents) should come back for your test questions, by "
             "id?", ("yes", "no"), "no", ("labels", "chunk_ids", "expected_ids", "relevant_ids", "ids")),
)
_BY_KEY = {q.key: q for q in QUESTIONS}
_ALIAS = {a: q.key for q in QUESTIONS for a in (q.key, *q.aliases)}
_YES = {"y", "yes", "true", "1", "t", "on"}
_NO = {"n", "no", "false", "0", "f", "off", "none"}
_JUDGE = {"llm": "llm", "openai": "llm", "anthropic": "llm", "ollama": "llm", "api": "llm", "yes": "llm",
          "local": "local", "offline": "local", "embedded": "local", "none": "local", "no": "local"}


class AnswerError(ConfigurationError):
    """An answer that cannot be understood; the message says which values are accepted."""


@dataclass
class Answers:
    """The questionnaire's answers."""

    retrieves: bool = True
    reference: bool = False
    multi_turn: bool = False
    judge: str = "local"
    images: bool = False
    chunk_labels: bool = False


def _normalise(key: str, value: Any) -> Any:
    q = _BY_KEY[key]
    text = str(value).strip().lower() if not isinstance(value, bool) else ("yes" if value else "no")
    if key == "judge":
        if text not in _JUDGE:
            raise AnswerError(f"judge={value!r}: answer 'llm' (an LLM judge is available) or 'local' (offline only).")
        return _JUDGE[text]
    if text in _YES:
        return True
    if text in _NO:
        return False
    raise AnswerError(f"{q.key}={value!r}: answer yes or no.")


def parse_answers(spec: str) -> dict[str, Any]:
    """Read ``--answers``: ``key=value`` pairs separated by commas, or a JSON object. Keys may be aliases."""
    spec = spec.strip()
    pairs: list[tuple[str, Any]]
    if spec.startswith("{"):
        try:
            data = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise AnswerError(f"--answers is not valid JSON ({exc.msg}).") from exc
        if not isinstance(data, dict):
            raise AnswerError("--answers JSON must be an object like {\"retrieves\": true}.")
        pairs = list(data.items())
    else:
        pairs = []
        for part in filter(None, (p.strip() for p in spec.replace(";", ",").split(","))):
            if "=" not in part:
                raise AnswerError(f"--answers: {part!r} is not key=value; write e.g. retrieves=yes,judge=local.")
            k, _, v = part.partition("=")
            pairs.append((k, v))
    out: dict[str, Any] = {}
    for k, v in pairs:
        key = _ALIAS.get(str(k).strip().lower().replace("-", "_")) or _ALIAS.get(str(k).strip().lower())
        if key is None:
            raise AnswerError(f"--answers: unknown question {k!r}; the questions are "
                              f"{', '.join(q.key for q in QUESTIONS)}.")
        out[key] = _normalise(key, v)
    return out


# ------------------------------------------------------------------------------------------------ recommending
@dataclass
class Pick:
    metric: str
    why: str


@dataclass
class Recommendation:
    """The metrics that fit, with why, the notes, and a snippet to paste."""

    answers: Answers
    picks: list[Pick] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The recommendation as plain data (what ``--format json`` prints)."""
        return {"answers": vars(self.answers), "metrics": [vars(p) for p in self.picks], "notes": self.notes,
                "snippet": self.snippet}


def recommend(answers: Answers) -> Recommendation:
    """The metrics that fit ``answers``."""
    rec = Recommendation(answers)
    a = answers
    if not a.retrieves:
        rec.notes.append("contextjudge scores retrieval: with no retrieval step there is nothing for its metrics to "
                         "judge. If your prompt includes a fixed context, pass it as retrieval_context and run this "
                         "again with retrieves=yes.")
        return rec
    if a.multi_turn:
        rec.picks.append(Pick("TurnContextualRelevancyMetric", "share of each assistant turn's retrieved text that "
                              "is relevant to the user's message, read with the earlier turns; needs no reference."))
        if a.reference:
            rec.picks.append(Pick("TurnContextualPrecisionMetric", "whether the nodes useful for each turn's "
                                  "expected content are ranked first."))
            rec.picks.append(Pick("TurnContextualRecallMetric", "how much of each turn's expected content the "
                                  "turn's retrieval supports: finds what the retriever missed."))
        else:
            rec.notes.append("With expected content per turn (Turn.expected_output) or an expected_outcome, add "
                             "TurnContextualPrecisionMetric and TurnContextualRecallMetric.")
    else:
        rec.picks.append(Pick("ContextualRelevancyMetric", "share of the retrieved text that is relevant to the "
                              "question; needs only the question and the retrieval."))
        if a.reference:
            rec.picks.append(Pick("ContextualPrecisionMetric", "whether the nodes that support the reference answer "
                                  "are ranked above the others: tells you if reranking helps."))
            rec.picks.append(Pick("ContextualRecallMetric", "share of the reference answer's sentences that the "
                                  "retrieval supports: finds what the retriever missed."))
        rec.picks.append(Pick("ContextUtilizationMetric", "precision against the app's own answer: whether the "
                              "nodes it actually used are ranked first" + ("" if a.reference else
                              "; the precision you can measure without reference answers") + "."))
        if a.reference and a.judge == "llm":
            rec.notes.append("RubricContextRecallMetric is a one-call alternative to ContextualRecallMetric when "
                             "judge cost matters more than a per-sentence breakdown.")
        rec.picks.append(Pick("FaithfulnessMetric", "share of the answer's statements the retrieval supports: "
                              "catches answers the context does not back (hallucination)."))
        rec.picks.append(Pick("AnswerRelevancyMetric", "share of the answer's statements that address the "
                              "question; needs no retrieval."))
        if not a.reference:
            rec.notes.append("With reference answers (goldens with expected_output) you can add "
                             "ContextualPrecisionMetric and ContextualRecallMetric.")
    if a.chunk_labels and a.multi_turn:
        rec.notes.append("The ranking metrics (HitRateMetric, MRRMetric, NDCGMetric) score single-turn cases: give "
                         "each golden its expected_context_ids (or relevant_ids) and run its question on its own.")
    elif a.chunk_labels:
        for m, why in (("HitRateMetric", "whether any chunk that should come back is in the retrieval; no judge."),
                       ("MRRMetric", "how high the first right chunk is ranked (1 / its rank); no judge."),
                       ("NDCGMetric", "the whole ranking against your labels, graded ones too; no judge.")):
            rec.picks.append(Pick(m, why))
    elif not a.multi_turn:
        rec.notes.append("If you know which chunks should come back (expected_context_ids on a golden), add "
                         "HitRateMetric, MRRMetric and NDCGMetric: ranking figures with no judge call.")
    if a.judge == "local":
        rec.notes.append("model='local' is the embedded offline judge: no API key, deterministic, free; its "
                         "agreement with gold labels is published in the README. Switch to an LLM judge later by "
                         "changing model= only.")
    else:
        rec.notes.append("model= takes any LangChain chat model (ChatOpenAI, ChatAnthropic, ChatOllama, a vLLM "
                         "server through ChatOpenAI's base_url) or a name like 'gpt-4.1-mini'.")
    if a.images:
        if a.judge == "llm":
            rec.notes.append("Images: write MLLMImage(...) into the test case; use a vision-capable judge (gpt-4.1-"
                             "mini, gpt-4o, Claude 3+/4, llava, ...). A text-only judge is refused before any call.")
        else:
            rec.notes.append("Images: the offline judge does not see pixels; it judges the text around an image and "
                             "its alt text or caption, so give images alt=... . For the image content itself, use a "
                             "vision-capable LLM judge.")
    rec.snippet = _snippet(a, [p.metric for p in rec.picks])
    return rec


def _snippet(a: Answers, metrics: list[str]) -> str:
    imports = ["evaluate"]
    imports += ["ConversationalTestCase", "Turn"] if a.multi_turn else ["LLMTestCase"]
    if a.chunk_labels and not a.multi_turn:
        imports.append("RetrievedNode")
    if a.images:
        imports.append("MLLMImage")
    lines = [f"from contextjudge import {', '.join(imports)}", "from contextjudge.metrics import ("]
    lines += [f"    {m}," for m in metrics] + [")", ""]
    if a.judge == "llm":
        lines.append('judge = "gpt-4.1-mini"  # or any LangChain chat model object: ChatAnthropic(...), ChatOllama(...)')
    else:
        lines.append('judge = "local"  # the embedded offline judge: no API key')
    image = ""
    if a.images:
        lines.append("chart = MLLMImage(url='https://example.com/refunds.png', alt='bar chart of refunds per month')")
        image = " {chart}"
    lines.append("")
    if a.multi_turn:
        lines += [
            "case = ConversationalTestCase(turns=[",
            f'    Turn(role="user", content=f"What is the refund policy?{image}"),',
            '    Turn(role="assistant", content="You can get a refund within 30 days.",',
            '         retrieval_context=["Refunds are issued within 30 days.", "Our office is in Berlin."]'
            + (',\n         expected_output="Refunds are issued within 30 days."),' if a.reference else "),"),
            "])",
        ]
    else:
        lines += [
            "case = LLMTestCase(",
            f'    input=f"How long do refunds take?{image}",',
            '    actual_output="Within 30 days of purchase.",',
        ]
        if a.reference:
            lines.append('    expected_output="Refunds are issued within 30 days of purchase.",')
        if a.chunk_labels:
            lines += ['    retrieval_context=[RetrievedNode("Refunds are issued within 30 days of purchase.", '
                      'id="refunds-1"),',
                      '                       RetrievedNode("Our office is in Berlin.", id="office-1")],',
                      '    expected_context_ids=["refunds-1"],  # the chunks that should come back', ")"]
        else:
            lines += [
                '    retrieval_context=["Refunds are issued within 30 days of purchase.", "Our office is in Berlin."],',
                ")",
            ]
    lines += ["metrics = ["] + [f"    {m}(model=judge)," for m in metrics] + ["]"]
    lines += ["result = evaluate(test_cases=[case], metrics=metrics)", "print(result.summary())"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the terminal
def _ask(q: Question, read: Callable[[str], str], out: TextIO) -> Any:
    shown = "/".join(c.upper() if c == q.default else c for c in q.choices)
    while True:
        raw = read(f"{q.text} [{shown}] ").strip()
        if not raw:
            return _normalise(q.key, q.default)
        try:
            return _normalise(q.key, raw)
        except AnswerError:
            out.write(f"  Please answer {' or '.join(q.choices)}.\n")
            out.flush()


def _render(rec: Recommendation) -> str:
    if not rec.picks:
        return "No contextjudge metric fits yet.\n\n" + "\n".join(f"- {n}" for n in rec.notes) + "\n"
    width = max(len(p.metric) for p in rec.picks)
    lines = ["Metrics that fit your app:", ""]
    lines += [f"  {p.metric.ljust(width)}  {p.why}" for p in rec.picks]
    if rec.notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in rec.notes]
    lines += ["", "Paste this to start:", "", rec.snippet, ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run ``contextjudge recommend``; returns the exit code."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    parser = argparse.ArgumentParser(
        prog="contextjudge recommend",
        description="Answer a few questions about your app and get the contextjudge metrics that fit it, with why "
                    "and a snippet to paste.")
    parser.add_argument("what", nargs="?", choices=["metrics"], help=argparse.SUPPRESS)
    parser.add_argument("--answers", metavar="SPEC",
                        help="answers without asking: key=value pairs separated by commas, or a JSON object. Keys: "
                             + ", ".join(f"{q.key} ({'/'.join(q.choices)})" for q in QUESTIONS))
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        given = parse_answers(args.answers) if args.answers else {}
    except AnswerError as exc:
        print(f"contextjudge recommend: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    interactive = _isatty(stdin)
    if not interactive and not args.answers:
        print("contextjudge recommend: error: not a terminal, so nothing can be asked; pass --answers, e.g. "
              "--answers retrieves=yes,reference=no,multi_turn=no,judge=local,images=no", file=sys.stderr)
        return EXIT_ERROR
    values: dict[str, Any] = {}

    def read(prompt: str) -> str:
        stdout.write(prompt)
        stdout.flush()
        line = stdin.readline()
        if not line:
            raise EOFError
        return line

    try:
        for q in QUESTIONS:
            if q.key in given:
                values[q.key] = given[q.key]
            elif interactive:
                values[q.key] = _ask(q, read, stdout)
            else:
                values[q.key] = _normalise(q.key, q.default)
            if q.key == "retrieves" and values[q.key] is False:
                break  # nothing else matters without retrieval
    except (EOFError, KeyboardInterrupt):
        stdout.write("\n")
        print("contextjudge recommend: stopped before all questions were answered.", file=sys.stderr)
        return EXIT_ERROR
    answers = Answers(**{**vars(Answers()), **values})
    rec = recommend(answers)
    if args.format == "json":
        stdout.write(json.dumps(rec.to_dict(), indent=2) + "\n")
    else:
        stdout.write(("\n" if interactive else "") + _render(rec))
    stdout.flush()
    return EXIT_OK


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

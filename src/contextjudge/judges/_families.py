"""Verdict families: what a judge is asked, one object per family, which every part of a judge reads.

A verdict family is one kind of question a judge answers for a test case: is each retrieved node useful, is each
statement supported by the nodes, is each sentence of a node relevant, does each statement of the app's answer
address the question, or one 0-1 score for the case. A ``VerdictFamily`` holds what the judge client, the jury, the
tiers, judge repeats, the parser, the spend ledger, image preparation and the embedded judge need to know of it
(the answer schema, whether it answers per item or per case, whether verdicts cite the context, the answer's size,
the calibration key), so none of them compares family names.

Families are registered by name (``family(name)``, ``families()``, ``register_family``). A request names its
family by its protocol ``task`` (the wire name: stored in the judge-call rows, part of the verdict-cache key), and
where two families share a task (answer relevancy asks ``sentence_relevance`` of the answer's statements) by
``JudgeRequest.family`` too, which the cache key leaves out, so stores, caches and calibration files written before
families were objects still read the same.

Adding a family: one ``VerdictFamily`` here (or ``register_family`` for one of your own), a prompt in
``_templates.BaseTemplate``, and the embedded judge's method named after it (``_local._scoring.Scorer``'s
``_<name>``); the embedded judge refuses to start while a registered family has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from ..errors import ConfigurationError
from ._schemas import Rubric, SupportVerdicts, Verdicts

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import BaseModel

__all__ = ["ANSWER_RELEVANCE", "CALIBRATION_KEYS", "NODE_USEFULNESS", "OUTPUT_TOKENS_BASE", "OUTPUT_TOKENS_PER_ITEM",
           "OUTPUT_TOKENS_RUBRIC", "OUTPUT_TOKENS_TEXT", "RUBRIC_RECALL", "SENTENCE_RELEVANCE", "STATEMENT_SUPPORT", "TASKS", "Task",
           "VerdictFamily", "calibration_keys", "families", "family", "family_of_request", "find_family", "register_family"]

# the judge protocol's tasks: what a request asks, on the wire (``protocol.JudgeRequest.task``)
Task = Literal["node_usefulness", "statement_support", "sentence_relevance", "rubric_recall"]
TASKS: tuple[str, ...] = get_args(Task)

# answer tokens reserved per judged item (a verdict with its id and a one-sentence reason) and per answer
OUTPUT_TOKENS_PER_ITEM = 60
OUTPUT_TOKENS_BASE = 20
# a rubric score with its reason, and a free-text reason
OUTPUT_TOKENS_RUBRIC = 120
OUTPUT_TOKENS_TEXT = 250

# the calibration key's suffix of a family judged against the app's own answer (``reference_kind="actual_output"``)
ANSWER_SUFFIX = ".actual_output"


@dataclass(frozen=True)
class VerdictFamily:
    """One verdict family (see the module docstring)."""

    name: str
    """The registry key; what metrics name, and the embedded judge's method is named after (``_<name>``)."""
    task: Task
    """The protocol task a request of this family carries (the wire name, stored with each judge call)."""
    item_kind: str = "nodes"
    """What its items are: ``nodes`` (retrieved nodes, ids ``n<rank>``), ``node_sentences`` (sentences of nodes, ids
    ``n<rank>.s<k>`` with the node as ``parent``), ``statements`` (of the reference; the app's answer's with
    ``reference_kind="actual_output"``), ``answer_statements`` (of the app's answer, always), ``none`` (one score)."""
    per_item: bool = True
    """One verdict per item, keyed by id; False: one 0.0-1.0 score for the whole case (``Answer.score``)."""
    cites_context: bool = False
    """Each item is judged against the request's ``context`` (the retrieved nodes) and a yes names the ids that back it
    (``node_ids``). Image evidence from the question or answers then stays out of the context, so it is never taken
    for a retrieved node."""
    calibrated: bool = True
    """Its verdicts carry confidences that a calibration file may threshold and the embedded judge may learn."""
    calibration: str = ""
    """Its calibration key (thresholds, learned weights, jury weights); empty: its name."""
    by_answer: bool = False
    """Judged against the app's own answer (``reference_kind="actual_output"``) it has a calibration key of its own,
    ``<calibration>.actual_output`` (utilization beside precision, faithfulness beside recall)."""
    description: str = ""

    @property
    def schema(self) -> type[BaseModel]:
        """The answer schema sent for structured output."""
        if not self.per_item:
            return Rubric
        return SupportVerdicts if self.cites_context else Verdicts

    def calibration_key(self, reference_kind: str | None = None) -> str:
        """The key of its thresholds and learned weights in a calibration file for a request with
        ``reference_kind``."""
        base = self.calibration or self.name
        return base + ANSWER_SUFFIX if self.by_answer and reference_kind == "actual_output" else base

    def calibration_keys(self) -> tuple[str, ...]:
        """Every calibration key it may have (none when it is not calibrated)."""
        if not self.calibrated:
            return ()
        base = self.calibration or self.name
        return (base, base + ANSWER_SUFFIX) if self.by_answer else (base,)

    def judges_answer(self, reference_kind: str | None = None) -> bool:
        """Whether its items are the statements of the app's own answer (faithfulness, answer relevancy)."""
        return self.item_kind == "answer_statements" or (
            self.item_kind == "statements" and reference_kind == "actual_output")

    def output_tokens(self, items: int) -> int:
        """The answer tokens a call of this family reserves for ``items`` judged items (no answer cap set)."""
        if not self.per_item:
            return OUTPUT_TOKENS_RUBRIC
        if items <= 0:
            return OUTPUT_TOKENS_TEXT
        return OUTPUT_TOKENS_BASE + OUTPUT_TOKENS_PER_ITEM * items


NODE_USEFULNESS = VerdictFamily(
    "node_usefulness", "node_usefulness", by_answer=True,
    description="is each retrieved node useful for arriving at the reference (or answering the input)? (contextual "
                "precision; context utilization against the actual output)")
SENTENCE_RELEVANCE = VerdictFamily(
    "sentence_relevance", "sentence_relevance", item_kind="node_sentences",
    description="is each sentence of each retrieved node relevant to the input? (contextual relevancy)")
STATEMENT_SUPPORT = VerdictFamily(
    "statement_support", "statement_support", item_kind="statements", cites_context=True, by_answer=True,
    description="is each statement of the reference supported by the retrieved nodes, and by which? (contextual "
                "recall; faithfulness for the actual output's statements)")
# answer relevancy is asked as sentence relevance on the wire (its stored task and cache keys stay those), and its
# thresholds and learned weights live under sentence_relevance in calibration files, as they always have
ANSWER_RELEVANCE = VerdictFamily(
    "answer_relevance", "sentence_relevance", item_kind="answer_statements", calibration="sentence_relevance",
    description="does each statement of the actual output address the input? (answer relevancy)")
RUBRIC_RECALL = VerdictFamily(
    "rubric_recall", "rubric_recall", item_kind="none", per_item=False, calibrated=False,
    description="one 0.0-1.0 score: how well the answer matches the reference given the context (rubric recall)")

_REGISTRY: dict[str, VerdictFamily] = {}


def register_family(fam: VerdictFamily) -> VerdictFamily:
    """Add ``fam`` to the registry and return it. Raises ``ConfigurationError`` when its name is taken by another
    family, or its task is none of the protocol's. The embedded judge refuses to start (``LocalJudge(...)`` raises
    ``ConfigurationError`` naming the family) while a registered family has no method of its own there."""
    if not isinstance(fam, VerdictFamily):
        raise ConfigurationError(f"register_family takes a VerdictFamily, got {type(fam).__name__}.")
    have = _REGISTRY.get(fam.name)
    if have is not None and have != fam:
        raise ConfigurationError(f"the verdict family {fam.name!r} is registered already, as {have!r}.")
    if fam.task not in TASKS:
        raise ConfigurationError(f"the verdict family {fam.name!r} names the task {fam.task!r}; the judge protocol's "
                                 f"tasks are {', '.join(TASKS)}.")
    _REGISTRY[fam.name] = fam
    return fam


# the embedded judge answers each of these (tests/test_families.py checks it, and so does the embedded judge's start)
for _fam in (NODE_USEFULNESS, SENTENCE_RELEVANCE, STATEMENT_SUPPORT, ANSWER_RELEVANCE, RUBRIC_RECALL):
    register_family(_fam)


def families() -> tuple[VerdictFamily, ...]:
    """Every registered family, in registration order."""
    return tuple(_REGISTRY.values())


def family(name: str | VerdictFamily) -> VerdictFamily:
    """The family named ``name`` (a family is returned as it is); ``ConfigurationError`` naming it when none is."""
    if isinstance(name, VerdictFamily):
        return name
    got = _REGISTRY.get(name) if isinstance(name, str) else None
    if got is None:
        raise ConfigurationError(f"unknown verdict family {name!r}; the families are {', '.join(_REGISTRY)}. "
                                 "Name one of them, or register yours with register_family.")
    return got


def find_family(name: str | None) -> VerdictFamily | None:
    """The family named ``name``, or None."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


class _NamesFamily(Protocol):
    """What ``family_of_request`` reads of a request (``JudgeRequest`` is one): the family it names, else its task. A
    Protocol here, since the request's module imports this one."""

    @property
    def family(self) -> str | None: ...
    @property
    def task(self) -> str: ...


def family_of_request(request: _NamesFamily | dict[str, Any]) -> VerdictFamily:
    """The family of a request (or of its dump): the one it names, else its task's."""
    if isinstance(request, dict):
        return family(request.get("family") or request.get("task") or "")
    return family(request.family or request.task)


def calibration_keys() -> tuple[str, ...]:
    """Every calibration key of the registered families, each once, in registration order."""
    return tuple(dict.fromkeys(k for f in _REGISTRY.values() for k in f.calibration_keys()))


# the built-in families' calibration keys, as a calibration file names them (``calibration.FAMILIES``)
CALIBRATION_KEYS = calibration_keys()

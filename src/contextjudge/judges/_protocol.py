"""The judge protocol: what one judge request asks and the shape of a judge's answer.

A request asks for one verdict family for one test case, with every item (node, statement or sentence) at once,
each under a short stable id. The request travels with the prompt message, in
``HumanMessage.additional_kwargs["contextjudge_request"]`` (a plain dict, ``JudgeRequest.model_dump()``), so a judge
that understands it (the embedded judge, the test fakes) can answer without reading the prompt text. Other chat
models read only the prompt text. Verdicts are keyed by id, never by position.

Tasks:
    node_usefulness     is item (a retrieved node) useful for arriving at ``reference`` for ``input``?
                        (contextual precision: reference = expected_output; utilization: reference = actual_output;
                        turn precision: reference = the turn's expected content or the case's expected_outcome)
    statement_support   is item (a sentence of ``reference``) supported by the ``context`` nodes, and by which ids?
                        (contextual recall, turn recall)
    sentence_relevance  is item (a sentence of a node; ids "n<rank>.s<k>") relevant to ``input``?
                        (contextual relevancy, turn relevancy)
    rubric_recall       one 0.0-1.0 score: how well ``answer`` matches ``reference`` given ``context``.

Each task is asked by a verdict family (``_families.VerdictFamily``: its schema, shape, answer size, calibration
key), named like the task. Answer relevancy asks ``sentence_relevance`` of the app's answer's statements against
``input``, and names its own family, ``family="answer_relevance"`` (the field is left out of the verdict-cache key;
the task is what is stored). ``JudgeRequest.verdict_family`` is the request's family object.

``history`` holds the earlier turns of a conversation window as ``{"role", "content"}`` dicts; ``input`` is then the
last user message, so "what about its price?" can be resolved against the history.

Wrapper judges. A judge made of other judges (``tiered.TieredJudge``, ``calibration.CalibratedJudge``) implements
``WrapperJudge``, as pydantic-ai's ``FallbackModel`` is a model made of models: the judge client hands it each request
with itself as ``InnerClients``, and the wrapper asks the judges it wraps, each through its own client in the same run
(cache, retries, budget and concurrency as for any judge). A wrapper may give the client of a judge it wraps an
``Adjustment``, which that client applies to every answer it reads (before caching it or merging repeats) and which
names and identifies it. The client knows nothing else of any wrapper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._families import Task, VerdictFamily, family

if TYPE_CHECKING:  # pragma: no cover
    from .._result import Usage
    from ._schemas import Answer

__all__ = ["REQUEST_KEY", "Adjustment", "InnerClients", "InnerJudge", "Item", "JudgeRequest", "Task", "WrapperJudge",
           "request_from_message_kwargs", "wrapper_of"]

REQUEST_KEY = "contextjudge_request"
PROTOCOL_VERSION = 1



class Item(BaseModel):
    """One thing to judge, or one piece of evidence, under a short stable id."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    # For sentence_relevance: the id of the node the sentence belongs to. Evidence items carry rank here too.
    parent: str | None = None
    # Images (multimodal) travel as URLs or data URLs; text-only judges get them described in the text.
    images: list[str] = Field(default_factory=list)


class JudgeRequest(BaseModel):
    """One judge request: one verdict family for one test case (or one turn of a conversation)."""

    model_config = ConfigDict(extra="forbid")

    version: int = PROTOCOL_VERSION
    task: Task
    metric: str = ""
    input: str
    history: list[dict[str, str]] = Field(default_factory=list)
    reference: str | None = None
    reference_kind: Literal["expected_output", "actual_output", "expected_outcome"] | None = None
    answer: str | None = None
    items: list[Item] = Field(default_factory=list)
    context: list[Item] = Field(default_factory=list)
    # the verdict family when it is not the task's own (answer relevancy); left out of the verdict-cache key
    family: str | None = None

    @model_validator(mode="after")
    def _known_family(self) -> JudgeRequest:
        fam = family(self.family or self.task)  # an unknown family fails here, with its name
        if fam.task != self.task:
            raise ValueError(f"the verdict family {fam.name!r} is asked as the task {fam.task!r}, not {self.task!r}.")
        return self

    @property
    def verdict_family(self) -> VerdictFamily:
        """The request's verdict family: the one it names, else its task's."""
        return family(self.family or self.task)


def request_from_message_kwargs(kwargs: dict[str, Any]) -> JudgeRequest | None:
    """Read the request that travels beside a prompt, or None when the message has none."""
    raw = kwargs.get(REQUEST_KEY)
    if raw is None:
        return None
    return raw if isinstance(raw, JudgeRequest) else JudgeRequest.model_validate(raw)


Build = Callable[[JudgeRequest], str]


class Adjustment(Protocol):
    """What a wrapper judge changes in the answers of a judge it wraps (a calibrated judge: its thresholds)."""

    def name(self, judge_name: str) -> str:
        """The name the adjusted judge goes by (results, budgets, logs), from the wrapped judge's."""

    def identity(self, judge_identity: str) -> str:
        """The identity of the adjusted judge (so of its verdict-cache keys), from the wrapped judge's as called."""

    def __call__(self, request: JudgeRequest, verdicts: dict[str, dict[str, Any]]) -> None:
        """Change the parsed ``verdicts`` (keyed by item id) of one answer to ``request`` in place."""


class InnerJudge(Protocol):
    """A judge a wrapper asks: its own judge client, in the wrapper's run."""

    name: str
    identity: str

    async def ask(self, request: JudgeRequest, build: Build) -> Answer:
        """Ask ``request`` of this judge (``build`` renders its prompt) and return its verdicts by id."""

    async def complete_text(self, prompt: str) -> tuple[str, Usage]:
        """A plain prompt and this judge's text answer."""


class InnerClients(Protocol):
    """What the judge client hands a wrapper judge: the run and the clients of the judges it wraps."""

    name: str
    ctx: Any  # the run's ``context.RunContext`` (its ``add_tier`` counts a tiered judge's items and cost)

    def client_for(self, model: Any, adjust: Adjustment | None = None) -> InnerJudge:
        """The client of ``model`` in this run, with this client's template and options (one per model and
        adjustment), its answers changed by ``adjust`` when given."""


class WrapperJudge(Protocol):
    """A judge made of other judges (see the module docstring); the judge client calls only these methods."""

    def contextjudge_identity(self, clients: InnerClients, identity: str) -> str:
        """Its identity in a run (its verdict-cache and result key): ``identity`` is the one its own parameters
        give."""

    def contextjudge_billed(self) -> tuple[Any, ...]:
        """The judges whose calls it makes under their own names, each priced and budgeted on its own (empty when
        its calls go out under its own name)."""

    async def contextjudge_ask(self, request: JudgeRequest, build: Build, clients: InnerClients) -> Answer:
        """Answer ``request`` by asking the judges it wraps through ``clients``."""

    async def contextjudge_text(self, prompt: str, clients: InnerClients) -> tuple[str, Usage]:
        """A plain prompt's text answer (the opt-in LLM-written reason), from the judge it wraps that writes it."""


def wrapper_of(model: Any) -> WrapperJudge | None:
    """``model`` when it is a wrapper judge (it has ``contextjudge_ask``), else None; read from the class, so asking
    costs one attribute lookup per judge client."""
    return model if callable(getattr(type(model), "contextjudge_ask", None)) else None

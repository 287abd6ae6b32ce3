"""A jury of judges: every juror answers every item, and the jury's verdict aggregates theirs.

``Jury([judge, judge, ...], aggregate="majority" | "mean" | "weighted")`` is a chat model passed as ``model=`` like
any other, and a model string ``"jury:local,openai:gpt-4o-mini"`` names one (jurors separated by commas, each a
model string ``model=`` takes; ``jury[mean]:...`` picks another aggregate). The jurors' model strings are resolved by
``_models`` (its ``Jury`` subclass and ``parse_jury``), which imports this module; this one never imports it. Like ``TieredJudge`` it is a wrapper judge (``protocol.WrapperJudge``): the judge
client hands it each request and it asks every juror through that juror's own judge client in the run, so the verdict
cache, retries, token and dollar budgets, the spend ledger and ``contextjudge estimate`` count every juror's calls
under the juror's own name.

Aggregation, per item:

- ``majority``: yes when more jurors say yes than no; a tie goes to the mean confidence (yes at >= 0.5) when every
  juror gave one, else to the first juror (the foreperson). The jury's confidence is the share of jurors saying yes.
- ``mean``: the mean of the jurors' chances of yes (a juror without a confidence counts 1 for yes, 0 for no);
  yes at >= 0.5.

A juror's ``confidence`` is its certainty in its own verdict, read on the side of that verdict: its chance of yes is
``max(c, 1 - c)`` when it says yes and ``min(c, 1 - c)`` when it says no. So an LLM juror's ``{"verdict": "no",
"confidence": 1.0}`` (sure of no) and the embedded judge's ``{"verdict": "no", "confidence": 0.0}`` (a chance of yes
of 0) both count 0 for yes, and no juror's number can ever vote against the verdict it gave.
- ``weighted``: the same mean, weighted. ``weights`` is one number per juror, or per verdict family
  (``{"node_usefulness": [...], ...}``, ``calibration.FAMILIES``); ``Jury.weights_from(reports)`` makes them from
  each juror's agreement with the user's labels (its ``contextjudge calibrate`` report: kappa, floored at 0; a
  family where no juror agrees above chance weighs every juror equally).

Each verdict keeps every juror's: ``verdict["jurors"]`` maps the juror's name to its verdict and confidence, so
``calibrate`` measures each juror's agreement beside the jury's. When any juror fails, the item has no verdict (the
request fails with the juror's error): a jury missing a juror is a different jury, never a silent one.
``rubric_recall`` (one score per case) is the jurors' mean (weighted for ``weighted``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, PrivateAttr

from ..errors import ConfigurationError
from ._naming import judge_identity, judge_name
from ._protocol import Build, InnerClients, JudgeRequest
from ._schemas import Answer

if TYPE_CHECKING:  # pragma: no cover
    from .._result import Usage

__all__ = ["AGGREGATES", "Jury"]

AGGREGATES = ("majority", "mean", "weighted")


class Jury(BaseChatModel):
    """A jury of judges (see the module docstring). ``jurors``: two or more chat models (``judges.Jury``, the name
    users import, also takes model strings: ``_models.Jury`` resolves them first);
    ``aggregate``: ``"majority"``, ``"mean"`` or ``"weighted"``; ``weights``: for ``"weighted"``, one per juror or a
    dict of family -> one per juror (default: equal)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    jurors: list[BaseChatModel]
    aggregate: str = "majority"
    weights: dict[str, list[float]] | list[float] | None = None
    _names: list[str] = PrivateAttr(default_factory=list)
    _label: str = PrivateAttr(default="")

    def __init__(self, jurors: Sequence[Any], aggregate: str = "majority",
                 weights: dict[str, list[float]] | list[float] | None = None, **kwargs: Any) -> None:
        if isinstance(jurors, (str, BaseChatModel)) or not isinstance(jurors, Sequence):
            raise ConfigurationError("Jury takes a list of judges: Jury(['local', ChatOpenAI(...)]) or the model "
                                     "string 'jury:local,openai:gpt-4o-mini'.")
        if len(jurors) < 2:
            raise ConfigurationError(f"Jury needs at least two jurors, got {len(jurors)}: one judge is not a jury.")
        agg = str(aggregate).strip().lower()
        if agg not in AGGREGATES:
            raise ConfigurationError(f"Jury: aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}.")
        resolved = list(jurors)
        if not all(isinstance(j, BaseChatModel) for j in resolved):
            raise ConfigurationError("Jury: every juror must be a LangChain chat model here; pass model strings to "
                                     "contextjudge.judges.Jury, which resolves them.")
        if any(isinstance(j, Jury) for j in resolved):
            raise ConfigurationError("Jury: a juror cannot itself be a Jury; list every judge in one jury.")
        super().__init__(jurors=resolved, aggregate=agg, weights=_check_weights(weights, len(resolved)), **kwargs)
        names = [judge_name(j) for j in self.jurors]
        seen: dict[str, int] = {}
        self._names = []
        for n in names:  # two jurors of one model (e.g. two temperatures) stay apart in the per-juror record
            seen[n] = seen.get(n, 0) + 1
            self._names.append(n if names.count(n) == 1 else f"{n}#{seen[n]}")
        self._label = f"jury[{agg}]({', '.join(self._names)})"

    # ------------------------------------------------------------------------------------------- identity
    @property
    def _llm_type(self) -> str:
        return "contextjudge-jury"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # every juror, the aggregate and the weights: all change what a verdict can be
        return {"judge": self._label, "jurors": [judge_identity(j) for j in self.jurors], "aggregate": self.aggregate,
                "weights": self.weights}

    @property
    def juror_names(self) -> list[str]:
        """The jurors' names as the per-juror verdicts and reports give them, in order."""
        return list(self._names)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError(
            "Jury is asked through contextjudge's judge client (pass it as model= to a metric, evaluate() or "
            "calibrate), which sends each juror its own requests; it does not answer chat messages itself.")

    # ------------------------------------------------------------------------------------------- weights
    def weights_for(self, request: JudgeRequest | None = None) -> list[float]:
        """The jurors' weights for ``request``'s verdict family (equal unless ``aggregate="weighted"`` with
        weights)."""
        n = len(self.jurors)
        if self.aggregate != "weighted" or self.weights is None:
            return [1.0] * n
        if isinstance(self.weights, dict):
            fam = request.verdict_family.calibration_key(request.reference_kind) if request is not None else None
            got = self.weights.get(fam) if fam else None
            return list(got) if got else [1.0] * n
        return list(self.weights)

    @classmethod
    def weights_from(cls, reports: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
        """Per verdict family, one weight per juror from each juror's ``calibrate`` report on the user's labels
        (in the jurors' order): its kappa, floored at 0; equal weights for a family where none is above 0."""
        families = sorted({k for r in reports for k, v in r.items() if isinstance(v, dict) and "kappa" in v})
        out: dict[str, list[float]] = {}
        for fam in families:
            ks = [max(0.0, float((r.get(fam) or {}).get("kappa") or 0.0)) for r in reports]
            out[fam] = ks if sum(ks) > 0 else [1.0] * len(reports)
        return out

    # ------------------------------------------------------------------------------------------- wrapper judge
    def contextjudge_identity(self, clients: InnerClients, identity: str) -> str:
        """Its own: every juror, the aggregate and the weights (``_identifying_params``)."""
        return identity

    def contextjudge_billed(self) -> tuple[Any, ...]:
        """Every juror: each is priced and budgeted under its own name."""
        return tuple(self.jurors)

    async def contextjudge_text(self, prompt: str, clients: InnerClients) -> tuple[str, Usage]:
        """The first juror (the foreperson) writes text."""
        return await clients.client_for(self.jurors[0]).complete_text(prompt)

    async def contextjudge_ask(self, request: JudgeRequest, build: Build, clients: InnerClients) -> Answer:
        """Ask every juror the whole request at once, and aggregate their verdicts item by item."""
        answers = await asyncio.gather(*(clients.client_for(j).ask(request, build) for j in self.jurors))
        weights = self.weights_for(request)
        merged = Answer(method=answers[0].method)
        for a in answers:
            merged.usage.add(a.usage)
        if not request.verdict_family.per_item:
            scores = [(a.score, w) for a, w in zip(answers, weights, strict=True) if a.score is not None]
            total = sum(w for _, w in scores)
            merged.score = sum(s * w for s, w in scores) / total if total else None
            merged.reason = answers[0].reason
            return merged
        for it in request.items:
            votes = [a.verdicts.get(it.id) for a in answers]
            if any(v is None for v in votes):
                continue  # a juror without this item: the client re-asks or reports the missing id
            merged.verdicts[it.id] = self._decide(votes, weights)  # type: ignore[arg-type]
        return merged

    def _decide(self, votes: list[dict[str, Any]], weights: list[float]) -> dict[str, Any]:
        says = [v.get("verdict") == "yes" for v in votes]
        confs = [v.get("confidence") if isinstance(v.get("confidence"), (int, float)) else None for v in votes]
        p_yes = [_chance_of_yes(s, c) for s, c in zip(says, confs, strict=True)]
        if self.aggregate == "majority":
            yes, no = sum(says), len(says) - sum(says)
            if yes != no:
                decided = yes > no
            elif all(c is not None for c in confs):
                decided = sum(p_yes) / len(p_yes) >= 0.5
            else:
                decided = says[0]
            confidence = yes / len(says)
        else:
            total = sum(weights)
            confidence = sum(p * w for p, w in zip(p_yes, weights, strict=True)) / total if total else 0.5
            decided = confidence >= 0.5
        word = "yes" if decided else "no"
        # the jury's reason and evidence come from the first juror who voted as the jury did
        lead = next((v for v, s in zip(votes, says, strict=True) if s == decided), votes[0])
        out = {k: v for k, v in lead.items() if k not in ("verdict", "confidence", "jurors")}
        out.update(verdict=word, confidence=round(confidence, 6),
                   jurors={n: {"verdict": v.get("verdict"), "confidence": c}
                           for n, v, c in zip(self._names, votes, confs, strict=True)})
        return out


def _chance_of_yes(says_yes: bool, confidence: float | None) -> float:
    """A juror's chance of yes: its confidence read as certainty in its own verdict (see the module docstring); a
    juror without a (finite) confidence counts 1 for yes, 0 for no."""
    if confidence is None or confidence != confidence or confidence in (float("inf"), float("-inf")):
        return 1.0 if says_yes else 0.0
    c = min(1.0, max(0.0, float(confidence)))
    return max(c, 1.0 - c) if says_yes else min(c, 1.0 - c)


def _check_weights(weights: Any, n: int) -> dict[str, list[float]] | list[float] | None:
    if weights is None:
        return None

    def one(ws: Any, where: str) -> list[float]:
        try:
            got = [float(w) for w in ws]
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"Jury: {where} must be numbers, one per juror, got {ws!r}.") from exc
        if len(got) != n or any(w < 0 for w in got) or not sum(got) > 0:
            raise ConfigurationError(f"Jury: {where} must be {n} non-negative numbers (one per juror, not all 0), "
                                     f"got {ws!r}.")
        return got

    if isinstance(weights, dict):
        return {str(k): one(v, f"weights[{k!r}]") for k, v in weights.items()}
    return one(weights, "weights")

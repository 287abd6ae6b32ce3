"""Tiered judging: a cheap judge answers every item, and only the items it is unsure of go to a strong judge.

``TieredJudge(strong, cheap="local", band=(0.3, 0.7))`` is a chat model passed as ``model=`` like any other. It is a
wrapper judge (``protocol.WrapperJudge``): the judge client hands it each request, and it asks its two tiers, each
through its own judge client in the run, so caching, retries, the token budget and the run's concurrency apply to
each tier as to any judge:

1. the cheap judge answers the whole request;
2. the items whose confidence lies in ``band`` (inclusive), and the items the cheap judge gave no confidence for,
   go to the strong judge in one sub-request holding only those ids;
3. the verdicts are merged by id, each marked ``"tier": "cheap"`` or ``"strong"``.

The band is stated around the cheap judge's own decision point, 0.5. When the cheap tier is a calibrated judge
(``cheap="@contextjudge-calibration.json"``), whose verdict flips at the threshold ``t`` fitted for the request's
verdict family instead, the band moves with it, to ``(low + t - 0.5, high + t - 0.5)`` clipped to [0, 1]: the
uncertain items are those near where its verdict flips, not those near 0.5.

``rubric_recall`` (one score per case, no items) goes to the strong judge. When the strong tier fails, the request
fails (a ``JudgeError`` naming how many items were sent up and why), never the cheap verdicts in silence, unless
``fallback=True``: then those items keep the cheap verdict, marked ``"tier": "cheap-fallback"`` with the
``"fallback_reason"``. The run counts items and cost per tier (``RunContext.tiers``, ``EvaluationResult.tiers``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, PrivateAttr

from ..errors import ConfigurationError, JudgeError, JudgeUnavailableError
from ._budget import _sub_request
from ._calibration import CalibratedJudge
from ._models import resolve_model
from ._naming import judge_identity, judge_name
from ._protocol import Build, InnerClients, JudgeRequest
from ._schemas import Answer

if TYPE_CHECKING:  # pragma: no cover
    from .._result import Usage

__all__ = ["TieredJudge"]

logger = logging.getLogger("contextjudge")

CHEAP, STRONG, FALLBACK = "cheap", "strong", "cheap-fallback"


class TieredJudge(BaseChatModel):
    """A judge in two tiers: ``cheap`` (default: the embedded judge) answers every item; the items whose confidence
    falls in ``band`` (inclusive), or that carry no confidence, are asked again of ``strong`` (any LangChain chat
    model, or a model string as ``model=`` takes), item by item within the same request.

    ``fallback=True`` keeps the cheap verdict when the strong tier fails, and says so on each such verdict
    (``"tier": "cheap-fallback"``, ``"fallback_reason"``); by default those items are errors.

    It is only called through contextjudge's judge client (metrics, ``evaluate``, ``calibrate``); asked directly
    as a chat model, it says so.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    strong: BaseChatModel
    cheap: BaseChatModel
    band: tuple[float, float] = (0.3, 0.7)
    fallback: bool = False
    _label: str = PrivateAttr(default="")

    def __init__(self, strong: Any, cheap: Any = "local", band: tuple[float, float] = (0.3, 0.7),
                 fallback: bool = False, **kwargs: Any) -> None:
        try:
            low, high = (float(b) for b in band)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"TieredJudge: band must be two numbers (low, high), got {band!r}. Pass e.g. "
                                     "band=(0.3, 0.7).") from exc
        if not 0.0 <= low <= high <= 1.0:
            raise ConfigurationError(f"TieredJudge: band must satisfy 0 <= low <= high <= 1, got {band!r}. Items "
                                     "whose cheap confidence lies in [low, high] go to the strong judge; pass e.g. "
                                     "band=(0.3, 0.7).")
        if strong is None:
            raise ConfigurationError("TieredJudge needs a strong judge: pass a LangChain chat model or a model name "
                                     "as strong=, e.g. TieredJudge(ChatOpenAI(model='gpt-4.1-mini')).")
        super().__init__(strong=resolve_model(strong), cheap=resolve_model(cheap),
                         band=(low, high), fallback=bool(fallback), **kwargs)
        if isinstance(self.strong, TieredJudge) or isinstance(self.cheap, TieredJudge):
            raise ConfigurationError("TieredJudge: a tier cannot itself be a TieredJudge; give each tier one judge.")
        self._label = f"tiered({judge_name(self.cheap)} -> {judge_name(self.strong)}, band {low:g}-{high:g})"

    # ------------------------------------------------------------------------------------------- identity
    @property
    def _llm_type(self) -> str:
        return "contextjudge-tiered"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # both judges, the band and the fallback: all change what a verdict can be
        return {"judge": self._label, "cheap": judge_identity(self.cheap), "strong": judge_identity(self.strong),
                "band": list(self.band), "fallback": self.fallback}

    def band_for(self, request: JudgeRequest | None = None) -> tuple[float, float]:
        """The band for ``request``: ``band`` as given, or, when the cheap tier is a calibrated judge with a threshold
        ``t`` for the request's verdict family, ``band`` moved by ``t - 0.5`` (clipped to [0, 1]), so it stays
        around the confidence at which the cheap verdict flips."""
        low, high = self.band
        if request is None or not isinstance(self.cheap, CalibratedJudge):
            return low, high
        t = self.cheap.calibration.thresholds.get(request.verdict_family.calibration_key(request.reference_kind))
        if t is None:
            return low, high
        shift = t - 0.5
        return min(1.0, max(0.0, low + shift)), min(1.0, max(0.0, high + shift))

    def sends_up(self, confidence: Any, band: tuple[float, float] | None = None) -> bool:
        """Whether an item with this cheap ``confidence`` goes to the strong judge (``band``: ``band_for`` the
        request; the band as given when omitted)."""
        if confidence is None:
            return True
        low, high = band or self.band
        return low <= float(confidence) <= high

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError(
            "TieredJudge is asked through contextjudge's judge client (pass it as model= to a metric, evaluate() or "
            "calibrate), which sends each tier its own requests; it does not answer chat messages itself.")

    # ------------------------------------------------------------------------------------------- wrapper judge
    def contextjudge_identity(self, clients: InnerClients, identity: str) -> str:
        """Its own: both judges, the band and the fallback (``_identifying_params``)."""
        return identity

    def contextjudge_billed(self) -> tuple[Any, ...]:
        """Both tiers: each is priced and budgeted under its own name."""
        return (self.cheap, self.strong)

    async def contextjudge_text(self, prompt: str, clients: InnerClients) -> tuple[str, Usage]:
        """The strong tier writes text."""
        return await clients.client_for(self.strong).complete_text(prompt)

    async def contextjudge_ask(self, request: JudgeRequest, build: Build, clients: InnerClients) -> Answer:
        """Ask ``request`` of the cheap tier, then its uncertain items of the strong tier, and merge the verdicts (see
        the module docstring)."""
        cheap_client, strong_client = clients.client_for(self.cheap), clients.client_for(self.strong)
        ctx = clients.ctx
        if not request.verdict_family.per_item:
            ans = await strong_client.ask(request, build)
            ctx.add_tier(STRONG, items=1, final=1, usage=ans.usage)
            return ans
        cheap = await cheap_client.ask(request, build)
        band = self.band_for(request)
        up = [it for it in request.items if self.sends_up(cheap.verdicts.get(it.id, {}).get("confidence"), band)]
        merged = Answer(verdicts={vid: {**v, "tier": CHEAP} for vid, v in cheap.verdicts.items()}, method=cheap.method)
        merged.usage.add(cheap.usage)
        ctx.add_tier(CHEAP, items=len(request.items), final=len(request.items) - len(up), usage=cheap.usage)
        if not up:
            return merged
        sub = _sub_request(request, up)
        try:
            strong = await strong_client.ask(sub, build)
        except JudgeError as exc:
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
            if not self.fallback:
                ctx.add_tier(STRONG, items=len(up), final=0, errors=len(up))
                raise JudgeUnavailableError(
                    f"The strong tier of {clients.name!r} ({strong_client.name!r}) failed on the {len(up)} of "
                    f"{len(request.items)} items sent up (cheap confidence in [{band[0]:g}, {band[1]:g}] or none), "
                    f"so they have no verdict: {why}. Fix the strong judge, or pass TieredJudge(..., fallback=True) to keep the cheap "
                    "verdicts for them (recorded on each verdict).", status_code=getattr(exc, "status_code", None),
                ) from exc
            ctx.add_tier(STRONG, items=len(up), final=0, errors=len(up))
            ctx.add_tier(FALLBACK, items=len(up), final=len(up))
            logger.warning("contextjudge: the strong tier %s failed on %d item(s); keeping the cheap verdicts "
                           "(fallback=True): %s", strong_client.name, len(up), why)
            for it in up:
                v = merged.verdicts.get(it.id)
                if v is not None:
                    v.update(tier=FALLBACK, fallback_reason=f"the strong judge {strong_client.name!r} failed: {why}")
            return merged
        merged.usage.add(strong.usage)
        ctx.add_tier(STRONG, items=len(up), final=len(up), usage=strong.usage)
        for vid, v in strong.verdicts.items():
            before = merged.verdicts.get(vid, {})
            merged.verdicts[vid] = {**v, "tier": STRONG, "cheap_verdict": before.get("verdict"),
                                    "cheap_confidence": before.get("confidence")}
        return merged

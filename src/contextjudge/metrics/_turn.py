"""The turn metrics: precision, recall and relevancy of each assistant turn's retrieval in a conversation.

For each assistant turn that carries ``retrieval_context``, the window is the last ``window_size`` turns up to it.
The judged input is the last user message in the window, with the window's earlier turns as history. Each node
is judged once, for its own turn. The score is the mean over those turns.

Reasons number exchanges as people count them (exchange 1 is the first user message and its answer, exchange 2 the
second...), not by position in ``turns`` (where the first two answers are turns 1 and 3). Verdicts keep the position
as ``turn`` (what the store keys nodes by) and carry the exchange number as ``exchange``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from .._result import Usage
from ..cases.testcase import ConversationalTestCase, Turn
from ..errors import ConfigurationError, InvalidTestCaseError, MissingTestCaseParamsError
from ..judges import (
    JudgeClient,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)
from ._base import BaseMetric, Outcome
from ._cores import node_usefulness, sentence_relevance, statement_support
from ._formulas import mean, weighted_cumulative_precision

__all__ = ["TurnContextualPrecisionMetric", "TurnContextualRecallMetric", "TurnContextualRelevancyMetric"]


class _TurnMetric(BaseMetric):
    conversational = True
    needs_reference = False

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 strict_mode: bool = False, async_mode: bool = True, verbose_mode: bool = False,
                 evaluation_template: Any = None, window_size: int = 10, **kwargs: Any) -> None:
        super().__init__(threshold, model, include_reason, strict_mode, async_mode, verbose_mode,
                         evaluation_template, **kwargs)
        if not isinstance(window_size, int) or window_size < 1:
            raise ConfigurationError(f"{self.name}: window_size must be a positive integer (the number of turns "
                                     f"judged together), got {window_size!r}. Pass e.g. window_size=10.")
        self.window_size = window_size

    def check(self, test_case: Any) -> None:
        super().check(test_case)
        judged = [i for i, t in enumerate(test_case.turns) if t.role == "assistant" and t.retrieval_context is not None]
        if not judged:
            raise MissingTestCaseParamsError(self.name, ["turns[].retrieval_context"])
        for i in judged:
            if not self._window(test_case.turns, i)[0]:
                before = any(t.role == "user" and t.content for t in test_case.turns[:i])
                hint = (f"the last user turn is more than window_size={self.window_size} turns back: raise "
                        "window_size" if before else "add the user message this turn answers before it")
                raise InvalidTestCaseError(
                    f"{self.name}: turns[{i}] (exchange {self.exchanges(test_case.turns)[i]}) is an assistant turn "
                    "with retrieval_context but no user question in "
                    f"its window, so there is nothing to judge its retrieval against; {hint}.",
                    field=f"turns[{i}]")
        if self.needs_reference and not test_case.expected_outcome:
            lacking = [i for i in judged if not test_case.turns[i].expected_output]
            if lacking:
                raise MissingTestCaseParamsError(self.name, ["expected_outcome"])

    def _window(self, turns: list[Turn], idx: int) -> tuple[str, list[dict[str, str]]]:
        window = turns[max(0, idx - self.window_size + 1): idx + 1]
        users = [i for i, t in enumerate(window) if t.role == "user"]
        if not users:
            return "", [{"role": t.role, "content": t.content} for t in window[:-1]]
        last_user = users[-1]
        history = [{"role": t.role, "content": t.content} for t in window[:last_user]]
        return window[last_user].content, history

    async def _turn(self, client: JudgeClient, case: ConversationalTestCase, idx: int, query: str,
                    history: list[dict[str, str]]) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def exchanges(turns: list[Turn]) -> dict[int, int]:
        """Each assistant turn's exchange number (1-based): how many user messages came up to it (at least 1)."""
        out, users = {}, 0
        for i, t in enumerate(turns):
            if t.role == "user":
                users += 1
            elif t.role == "assistant":
                out[i] = max(1, users)
        return out

    async def _compute(self, case: ConversationalTestCase, client: JudgeClient) -> Outcome:
        ex = self.exchanges(case.turns)
        targets = [i for i, t in enumerate(case.turns) if t.role == "assistant" and t.retrieval_context is not None]
        skipped = [i for i, t in enumerate(case.turns) if t.role == "assistant" and t.retrieval_context is None]
        jobs: list[Callable[[], Awaitable[Outcome]]] = []
        for i in targets:
            query, history = self._window(case.turns, i)  # check() made sure each has a user question
            jobs.append(functools.partial(self._turn, client, case, i, query, history))
        if self.async_mode:
            outcomes = await asyncio.gather(*(j() for j in jobs))
        else:
            outcomes = [await j() for j in jobs]
        usage = Usage()
        verdicts: list[dict[str, Any]] = []
        parts = []
        for i, out in zip(targets, outcomes, strict=True):
            usage.add(out.usage)
            for v in out.verdicts:
                verdicts.append({"turn": i, "exchange": ex[i], **v})
            parts.append(f"exchange {ex[i]}: {out.score:.2f}")
        scores = [o.score for o in outcomes]
        score = mean(scores)
        reason = f"Mean over {len(targets)} exchange(s) with retrieval ({'; '.join(parts)})."
        worst = min(range(len(outcomes)), key=lambda j: outcomes[j].score)
        reason += f" Lowest, exchange {ex[targets[worst]]}: {outcomes[worst].reason}"
        if skipped:
            reason += f" Not judged (no retrieval): exchange(s) {', '.join(str(ex[i]) for i in skipped)}."
        # with judge repeats: repeat r's score is the mean over turns of each turn's repeat-r score
        k = max((len(o.repeat_scores) for o in outcomes if o.repeat_scores), default=0)
        repeat_scores = [mean([o.repeat_scores[r] if o.repeat_scores and r < len(o.repeat_scores) else o.score
                               for o in outcomes]) for r in range(k)] if k > 1 else None
        return Outcome(score, verdicts, reason, usage=usage, repeat_scores=repeat_scores,
                       details={"turn_scores": dict(zip(targets, scores, strict=True)), "skipped_turns": skipped,
                                "exchange_scores": {ex[i]: sc for i, sc in zip(targets, scores, strict=True)},
                                "exchanges": {i: ex[i] for i in targets + skipped}},
                       judged=any(o.judged for o in outcomes))


class TurnContextualRelevancyMetric(_TurnMetric):
    """Per assistant turn: share of retrieved sentences relevant to the user's message in context."""

    name = "Turn Contextual Relevancy"
    key = "turn_contextual_relevancy"
    aliases = ("turn_relevancy",)
    family = "sentence_relevance"
    always_gated = False
    default_template = TurnContextualRelevancyTemplate
    required_params = ("turns",)

    async def _turn(self, client, case, idx, query, history):
        return await sentence_relevance(client, metric=self.key, input=query, history=history,
                                        nodes=case.turns[idx].retrieval_context or [], formula=self.score_labels)


class TurnContextualPrecisionMetric(_TurnMetric):
    """Per assistant turn: are the nodes useful for the expected content ranked first?"""

    name = "Turn Contextual Precision"
    key = "turn_contextual_precision"
    aliases = ("turn_precision",)
    family = "node_usefulness"
    reference_kind = "expected_outcome"
    judges_nodes = True
    default_template = TurnContextualPrecisionTemplate
    required_params = ("turns",)
    needs_reference = True

    @classmethod
    def score_labels(cls, labels: list[bool]) -> float:
        """Weighted cumulative precision of one turn's node verdicts in rank order."""
        return weighted_cumulative_precision(labels)

    async def _turn(self, client, case, idx, query, history):
        turn = case.turns[idx]
        return await node_usefulness(client, metric=self.key, input=query, history=history,
                                     reference=turn.expected_output or case.expected_outcome,
                                     reference_kind="expected_outcome", nodes=turn.retrieval_context or [],
                                     formula=self.score_labels)


class TurnContextualRecallMetric(_TurnMetric):
    """Per assistant turn: share of the expected content's sentences that the turn's retrieval supports."""

    name = "Turn Contextual Recall"
    key = "turn_contextual_recall"
    aliases = ("turn_recall",)
    family = "statement_support"
    reference_kind = "expected_output"
    default_template = TurnContextualRecallTemplate
    required_params = ("turns",)
    needs_reference = True

    async def _turn(self, client, case, idx, query, history):
        turn = case.turns[idx]
        return await statement_support(client, metric=self.key, input=query, history=history,
                                       reference=turn.expected_output or case.expected_outcome or "",
                                       nodes=turn.retrieval_context or [], formula=self.score_labels)

"""The single-turn metrics: contextual precision, recall, relevancy, context utilization, rubric context recall,
faithfulness and answer relevancy."""

from __future__ import annotations

from ..cases.testcase import LLMTestCase
from ..judges import (
    AnswerRelevancyTemplate,
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    ContextUtilizationTemplate,
    FaithfulnessTemplate,
    JudgeClient,
    JudgeRequest,
    RubricContextRecallTemplate,
)
from ._base import BaseMetric, Outcome, node_items
from ._cores import answer_relevance, node_usefulness, sentence_relevance, statement_support
from ._formulas import weighted_cumulative_precision

__all__ = [
    "AnswerRelevancyMetric",
    "ContextUtilizationMetric",
    "ContextualPrecisionMetric",
    "ContextualRecallMetric",
    "ContextualRelevancyMetric",
    "FaithfulnessMetric",
    "RubricContextRecallMetric",
]


class _NodeUsefulness(BaseMetric):
    """Precision-style, against ``reference_kind``'s text (the expected output, or the app's own answer): are the nodes
    useful for it ranked above the others? Not registered: the two metrics below are its two references."""

    family = "node_usefulness"
    judges_nodes = True

    @classmethod
    def score_labels(cls, labels: list[bool]) -> float:
        """Weighted cumulative precision of the nodes' verdicts in rank order."""
        return weighted_cumulative_precision(labels)

    async def _compute(self, tc: LLMTestCase, client: JudgeClient) -> Outcome:
        kind = str(self.reference_kind)
        return await node_usefulness(client, metric=self.key, input=tc.input, reference=getattr(tc, kind),
                                     reference_kind=kind, nodes=tc.retrieval_context or [], formula=self.score_labels)


class ContextualPrecisionMetric(_NodeUsefulness):
    """Are the nodes useful for the expected output ranked above the others? (input, expected_output, retrieval)"""

    name = "Contextual Precision"
    key = "contextual_precision"
    aliases = ("precision",)
    reference_kind = "expected_output"
    label_field = "labels"
    default_template = ContextualPrecisionTemplate
    required_params = ("input", "expected_output", "retrieval_context")


class ContextUtilizationMetric(_NodeUsefulness):
    """Precision against the app's own answer: are the nodes it used ranked first? (input, actual_output, retrieval)"""

    name = "Context Utilization"
    key = "context_utilization"
    aliases = ("utilization",)
    reference_kind = "actual_output"
    label_field = "utilization_labels"
    always_gated = False
    default_template = ContextUtilizationTemplate
    required_params = ("input", "actual_output", "retrieval_context")


class _StatementSupport(BaseMetric):
    """Recall-style, of ``reference_kind``'s text (the expected output, or the app's own answer): how much of it, statement by
    statement, the retrieved nodes support. Not registered: contextual recall and faithfulness are its two references."""

    family = "statement_support"

    async def _compute(self, tc: LLMTestCase, client: JudgeClient) -> Outcome:
        kind = str(self.reference_kind)
        return await statement_support(client, metric=self.key, input=tc.input, reference=getattr(tc, kind) or "",
                                       nodes=tc.retrieval_context or [], reference_kind=kind,
                                       formula=self.score_labels)


class ContextualRecallMetric(_StatementSupport):
    """How much of the expected output the retrieval supports, sentence by sentence. (input, expected_output, ...)"""

    name = "Contextual Recall"
    key = "contextual_recall"
    aliases = ("recall",)
    reference_kind = "expected_output"
    label_field = "statement_labels"
    default_template = ContextualRecallTemplate
    required_params = ("input", "expected_output", "retrieval_context")


class ContextualRelevancyMetric(BaseMetric):
    """How much of the retrieved text is relevant to the input, sentence by sentence. (input, retrieval_context)"""

    name = "Contextual Relevancy"
    key = "contextual_relevancy"
    aliases = ("relevancy",)
    family = "sentence_relevance"
    label_field = "relevance_labels"  # a node's label counts once per sentence of it
    always_gated = False
    default_template = ContextualRelevancyTemplate
    required_params = ("input", "retrieval_context")

    async def _compute(self, tc: LLMTestCase, client: JudgeClient) -> Outcome:
        return await sentence_relevance(client, metric=self.key, input=tc.input, nodes=tc.retrieval_context or [],
                                        formula=self.score_labels)


class FaithfulnessMetric(_StatementSupport):
    """How much of the app's answer the retrieval backs, statement by statement (groundedness).
    (input, actual_output, retrieval_context)

    Each sentence of ``actual_output`` is one statement; one judge call asks, for all of them by id, whether the
    retrieved nodes support it. Score = supported / statements. The reason names the unsupported statements and the
    judge's note on what the context says instead. A statement the judge leaves unsettled ("not sure", a malformed
    answer) is re-asked once, then the case gets an error, never a guessed verdict.
    """

    name = "Faithfulness"
    key = "faithfulness"
    aliases = ("groundedness",)
    reference_kind = "actual_output"
    label_field = "answer_statement_labels"
    always_gated = False
    default_template = FaithfulnessTemplate
    required_params = ("input", "actual_output", "retrieval_context")


class AnswerRelevancyMetric(BaseMetric):
    """How much of the app's answer addresses the question, statement by statement. (input, actual_output)

    One judge call asks, for every sentence of ``actual_output`` by id, whether it helps answer ``input``.
    Score = relevant / statements; the reason names the statements off the question.
    """

    name = "Answer Relevancy"
    key = "answer_relevancy"
    aliases = ("answer_relevance", "response_relevancy")
    family = "answer_relevance"  # calibration key sentence_relevance, as ever (``judges.ANSWER_RELEVANCE``)
    reference_kind = "actual_output"
    default_template = AnswerRelevancyTemplate
    required_params = ("input", "actual_output")

    async def _compute(self, tc: LLMTestCase, client: JudgeClient) -> Outcome:
        return await answer_relevance(client, metric=self.key, input=tc.input, answer=tc.actual_output or "",
                                      formula=self.score_labels)


class RubricContextRecallMetric(BaseMetric):
    """One judge call scores, on an anchored 0-1 scale, how well the answer recalls the reference given the context.

    Uses ``context`` when set, else ``retrieval_context``; with neither, the answer is judged against the reference
    alone (Opik's ContextRecall accepts that too).
    """

    name = "Rubric Context Recall"
    key = "rubric_context_recall"
    aliases = ("rubric_recall",)
    family = "rubric_recall"  # one 0-1 score per case, no per-item verdicts: no label field
    reference_kind = "expected_output"
    default_template = RubricContextRecallTemplate
    required_params = ("input", "actual_output", "expected_output")

    async def _compute(self, tc: LLMTestCase, client: JudgeClient) -> Outcome:
        from ..cases.testcase import RetrievedNode  # noqa: PLC0415

        nodes = [RetrievedNode(t) for t in tc.context] if tc.context else (tc.retrieval_context or [])
        req = JudgeRequest(task="rubric_recall", metric=self.key, input=tc.input, reference=tc.expected_output,
                           reference_kind="expected_output", answer=tc.actual_output, context=node_items(nodes))
        ans = await client.ask(req, client.template.generate_verdicts)
        score = min(1.0, max(0.0, float(ans.score or 0.0)))
        repeats = (ans.verdicts.get("rubric") or {}).get("votes")  # judge repeats: each repeat's score
        return Outcome(score, [{"score": score, "reason": ans.reason}], ans.reason or f"Rubric score {score:.2f}.",
                       usage=ans.usage, repeat_scores=[min(1.0, max(0.0, x)) for x in repeats] if repeats else None)

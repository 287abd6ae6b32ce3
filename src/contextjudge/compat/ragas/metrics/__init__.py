"""``ragas.metrics`` names for the context metrics, each a face over one of contextjudge's metrics.

=====================================  =====================================  ==========================
Ragas                                  contextjudge                           score
=====================================  =====================================  ==========================
``LLMContextPrecisionWithReference``,  ``ContextualPrecisionMetric``           average precision of the
``ContextPrecision``                                                          nodes useful for reference
``LLMContextPrecisionWithoutReference``, ``ContextUtilizationMetric``          the same, against response
``ContextUtilization``
``LLMContextRecall``, ``ContextRecall`` ``ContextualRecallMetric``            supported / all sentences
                                                                              of the reference
``ContextRelevance``                   ``ContextualRelevancyMetric``          relevant / all sentences
                                                                              of the contexts
``Faithfulness``                       ``FaithfulnessMetric``                 supported / all sentences
                                                                              of the response
``ResponseRelevancy``,                 ``AnswerRelevancyMetric``              relevant / all sentences
``AnswerRelevancy``                                                           of the response (not by
                                                                              generated questions)
``NonLLMContextPrecisionWithReference`` ``RankedPrecisionMetric``             rank-weighted precision, no
``IDBasedContextPrecision``            ``PrecisionAtKMetric``                 judge (texts by similarity,
``NonLLMContextRecall``,               ``RecallAtKMetric``                    or ids)
``IDBasedContextRecall``
=====================================  =====================================  ==========================

docs/metrics.md says where each definition differs from Ragas' (response relevancy, duplicates, string similarity).

``metric.single_turn_ascore(sample)`` / ``single_turn_score(sample)`` return the score (a float) and raise when the
judge fails, as Ragas does; inside ``evaluate`` a failure is NaN with the reason beside it. The lower-case
instances (``context_precision``, ``context_recall``, ``context_utilization``) are Ragas 0.1's spelling.
"""

from __future__ import annotations

from typing import Any

from ...._aio import run_sync
from ....metrics import (
    AnswerRelevancyMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    FaithfulnessMetric,
    PrecisionAtKMetric,
    RankedPrecisionMetric,
    RecallAtKMetric,
)
from ..dataset_schema import sample_of, sample_to_case
from ..llms import judge_of

__all__ = [
    "AnswerRelevancy",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "ContextUtilization",
    "Faithfulness",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "LLMContextPrecisionWithReference",
    "LLMContextPrecisionWithoutReference",
    "LLMContextRecall",
    "Metric",
    "NonLLMContextPrecisionWithReference",
    "NonLLMContextRecall",
    "ResponseRelevancy",
    "answer_relevancy",
    "context_precision",
    "context_recall",
    "context_relevance",
    "context_utilization",
    "faithfulness",
]


class Metric:
    """A Ragas-named context metric: its name (the result column) and judge (``llm``, else ``evaluate``'s)."""

    name = ""
    _cls: Any = None

    def __init__(self, llm: Any = None, name: str | None = None, max_retries: int = 1, **_: Any) -> None:
        self.llm = llm
        if name:
            self.name = name

    def build(self, llm: Any = None) -> Any:
        """The contextjudge metric this one stands for, judged by its own ``llm`` or else ``llm``."""
        if not getattr(self._cls, "needs_judge", True):
            metric = self._cls(threshold=0.5, **self._options())
        else:
            judge = judge_of(self.llm) if self.llm is not None else judge_of(llm)
            metric = self._cls(model=judge, threshold=0.5)
        metric.name = self.name  # the column name Ragas users expect
        return metric

    def _options(self) -> dict[str, Any]:
        return {}

    async def single_turn_ascore(self, sample: Any, callbacks: Any = None, timeout: float | None = None) -> float:
        """The score of one ``SingleTurnSample`` (a float in [0, 1]); a judge failure raises."""
        metric = self.build()
        case = sample_to_case(sample_of(sample), input_optional=not getattr(metric, "needs_judge", True))
        return float(await metric.a_measure(case))

    def single_turn_score(self, sample: Any, callbacks: Any = None, timeout: float | None = None) -> float:
        """``single_turn_ascore`` run to completion from synchronous code."""
        return run_sync(self.single_turn_ascore(sample, callbacks, timeout))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class LLMContextPrecisionWithReference(Metric):
    """Ragas' ``LLMContextPrecisionWithReference``, scored by contextjudge's ``ContextualPrecisionMetric``."""

    name = "llm_context_precision_with_reference"
    _cls = ContextualPrecisionMetric


class ContextPrecision(LLMContextPrecisionWithReference):
    """Ragas' ``ContextPrecision`` (the reference-based precision under its short name)."""

    name = "context_precision"


class LLMContextPrecisionWithoutReference(Metric):
    """Ragas' ``LLMContextPrecisionWithoutReference``, scored by contextjudge's ``ContextUtilizationMetric``."""

    name = "llm_context_precision_without_reference"
    _cls = ContextUtilizationMetric


class ContextUtilization(LLMContextPrecisionWithoutReference):
    """Ragas' ``ContextUtilization`` (precision against the response, no reference needed)."""

    name = ContextUtilizationMetric.key  # Ragas' name is our key


class LLMContextRecall(Metric):
    """Ragas' ``LLMContextRecall``, scored by contextjudge's ``ContextualRecallMetric``."""

    name = "context_recall"
    _cls = ContextualRecallMetric


ContextRecall = LLMContextRecall


class ContextRelevance(Metric):
    """Ragas' ``ContextRelevance``, scored by contextjudge's ``ContextualRelevancyMetric``."""

    name = "nv_context_relevance"
    _cls = ContextualRelevancyMetric


class Faithfulness(Metric):
    """Ragas' ``Faithfulness`` (user_input, response, retrieved_contexts), scored by ``FaithfulnessMetric``: each
    sentence of the response supported by the contexts, or not, in one judge call."""

    name = FaithfulnessMetric.key  # Ragas' name is our key
    _cls = FaithfulnessMetric


class ResponseRelevancy(Metric):
    """Ragas' ``ResponseRelevancy`` (user_input, response), scored by ``AnswerRelevancyMetric``: the share of the
    response's sentences that address the question, in one judge call. Ragas generates questions from the response
    and compares them with the input by embeddings; ``embeddings`` and ``strictness`` are accepted and unused."""

    name = AnswerRelevancyMetric.key  # Ragas' name is our key
    _cls = AnswerRelevancyMetric

    def __init__(self, llm: Any = None, embeddings: Any = None, name: str | None = None, strictness: int = 3,
                 **kwargs: Any) -> None:
        super().__init__(llm=llm, name=name, **kwargs)
        self.embeddings = embeddings
        self.strictness = strictness


AnswerRelevancy = ResponseRelevancy


class _Ranking(Metric):
    """A judge-free Ragas metric: no ``llm`` is used (one given is ignored)."""


class NonLLMContextPrecisionWithReference(_Ranking):
    """Ragas' ``NonLLMContextPrecisionWithReference`` (retrieved_contexts, reference_contexts): a retrieved context
    is relevant when its string similarity to a reference context reaches ``threshold`` (difflib's ratio here);
    the score is rank-weighted precision (``RankedPrecisionMetric``). No judge."""

    name = "non_llm_context_precision_with_reference"
    _cls: Any = RankedPrecisionMetric

    def __init__(self, distance_measure: Any = None, threshold: float = 0.5, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.threshold = float(threshold)
        self.distance_measure = distance_measure

    def _options(self) -> dict[str, Any]:
        return {"similarity_threshold": self.threshold}


class NonLLMContextRecall(NonLLMContextPrecisionWithReference):
    """Ragas' ``NonLLMContextRecall``: the share of reference contexts some retrieved context matches (string
    similarity >= ``threshold``), by ``RecallAtKMetric``. No judge."""

    name = "non_llm_context_recall"
    _cls = RecallAtKMetric


class IDBasedContextPrecision(_Ranking):
    """Ragas' ``IDBasedContextPrecision`` (retrieved_context_ids, reference_context_ids): relevant retrieved ids /
    retrieved ids, by ``PrecisionAtKMetric``. No judge."""

    name = "id_based_context_precision"
    _cls: Any = PrecisionAtKMetric


class IDBasedContextRecall(_Ranking):
    """Ragas' ``IDBasedContextRecall``: reference ids retrieved / reference ids, by ``RecallAtKMetric``. No judge."""

    name = "id_based_context_recall"
    _cls = RecallAtKMetric


faithfulness = Faithfulness()
answer_relevancy = ResponseRelevancy()
context_precision = ContextPrecision()
context_recall = LLMContextRecall()
context_utilization = ContextUtilization()
context_relevance = ContextRelevance()

"""Ragas' spelling: ``evaluate(dataset, metrics=[context_precision, context_recall, context_utilization], llm=...)``.

``dataset`` may be a dict of lists, a list of dicts, a pandas DataFrame or a ``datasets.Dataset``, with Ragas'
old column names (question / answer / contexts / ground_truth) or the new ones (user_input / response /
retrieved_contexts / reference). ``llm`` is any LangChain chat model (or "local"). The result has ``to_pandas()``,
``result["context_precision"]`` (the per-row scores) and prints the mean of each metric.

Semantics: ``context_precision`` is contextjudge's ContextualPrecisionMetric (nodes judged against the reference),
``context_utilization`` is ContextUtilizationMetric (against the response) and ``context_recall`` is
ContextualRecallMetric (sentences of the reference supported by the contexts). All verdicts of one row and metric
come from one judge request, not one per context.
"""

from __future__ import annotations

from typing import Any, Iterable

from .._result import EvaluationResult
from ..engine.evaluate import evaluate as _evaluate
from ..cases.testcase import LLMTestCase
from ..errors import ContextJudgeError, MetricNotFoundError
from ..metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextUtilizationMetric

__all__ = [
    "ContextPrecision",
    "ContextRecall",
    "ContextUtilization",
    "EvaluationResult",
    "LLMContextPrecisionWithReference",
    "LLMContextPrecisionWithoutReference",
    "LLMContextRecall",
    "RagasResult",
    "context_precision",
    "context_recall",
    "context_utilization",
    "evaluate",
]

_COLUMNS = {
    "input": ("user_input", "question"),
    "output": ("response", "answer"),
    "contexts": ("retrieved_contexts", "contexts"),
    "reference": ("reference", "ground_truth", "ground_truths"),
}


class _RagasMetric:
    """A Ragas-style metric spec; ``evaluate`` turns it into the contextjudge metric with the run's judge."""

    name = ""
    _cls: Any = None

    def __init__(self, llm: Any = None, name: str | None = None, **_: Any) -> None:
        self.llm = llm
        if name:
            self.name = name

    def build(self, llm: Any) -> Any:
        metric = self._cls(model=self.llm if self.llm is not None else llm, threshold=0.5)
        metric.name = self.name  # the column name Ragas users expect
        return metric

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class LLMContextPrecisionWithReference(_RagasMetric):
    name = "context_precision"
    _cls = ContextualPrecisionMetric


class LLMContextPrecisionWithoutReference(_RagasMetric):
    name = "context_utilization"
    _cls = ContextUtilizationMetric


class LLMContextRecall(_RagasMetric):
    name = "context_recall"
    _cls = ContextualRecallMetric


ContextPrecision = LLMContextPrecisionWithReference
ContextUtilization = LLMContextPrecisionWithoutReference
ContextRecall = LLMContextRecall

context_precision = LLMContextPrecisionWithReference()
context_utilization = LLMContextPrecisionWithoutReference()
context_recall = LLMContextRecall()


def _rows(dataset: Any) -> list[dict[str, Any]]:
    if isinstance(dataset, dict):
        keys = list(dataset)
        n = len(dataset[keys[0]]) if keys else 0
        for k in keys:
            if len(dataset[k]) != n:
                raise ContextJudgeError(f"dataset column {k!r} has {len(dataset[k])} rows, expected {n}: every "
                                        "column of a dict dataset must have the same length.")
        return [{k: dataset[k][i] for k in keys} for i in range(n)]
    if hasattr(dataset, "to_dict") and hasattr(dataset, "columns"):  # pandas DataFrame
        return dataset.to_dict("records")
    if hasattr(dataset, "to_list") and hasattr(dataset, "column_names"):  # datasets.Dataset
        return list(dataset.to_list())
    if hasattr(dataset, "samples"):  # ragas EvaluationDataset
        return [s.model_dump() if hasattr(s, "model_dump") else dict(s) for s in dataset.samples]
    if isinstance(dataset, Iterable):
        rows = list(dataset)
        if all(isinstance(r, dict) for r in rows):
            return rows
    raise ContextJudgeError(f"dataset must be a dict of lists, a list of dicts, a pandas DataFrame or a "
                            f"datasets.Dataset, not {type(dataset).__name__}.")


def _get(row: dict[str, Any], field: str) -> Any:
    for name in _COLUMNS[field]:
        if name in row and row[name] is not None:
            val = row[name]
            if name == "ground_truths" and isinstance(val, (list, tuple)):
                return " ".join(str(v) for v in val)
            return val
    return None


def _to_case(i: int, row: dict[str, Any]) -> LLMTestCase:
    question = _get(row, "input")
    if not question:
        raise ContextJudgeError(f"dataset row {i} has no question: name the column 'user_input' or 'question'.")
    contexts = _get(row, "contexts")
    if contexts is not None and hasattr(contexts, "tolist"):
        contexts = contexts.tolist()
    return LLMTestCase(input=str(question), actual_output=_get(row, "output"), expected_output=_get(row, "reference"),
                       retrieval_context=list(contexts) if contexts is not None else None)


class RagasResult:
    """Ragas' result shape: per-row scores per metric, ``to_pandas()``, and the means when printed."""

    def __init__(self, rows: list[dict[str, Any]], names: list[str], result: EvaluationResult) -> None:
        self._rows = rows
        self._names = names
        self.evaluation = result
        self.scores: list[dict[str, float | None]] = [
            {n: next((m.score for m in tr.metrics_data if m.name == n), None) for n in names}
            for tr in result.test_results
        ]

    def __getitem__(self, name: str) -> list[float | None]:
        if name not in self._names:
            raise MetricNotFoundError(f"no metric {name!r} in this result; use one of {self._names}")
        return [s[name] for s in self.scores]

    def mean(self, name: str) -> float | None:
        vals = [v for v in self[name] if v is not None]
        return sum(vals) / len(vals) if vals else None

    def to_pandas(self):
        import pandas as pd  # noqa: PLC0415

        df = pd.DataFrame(self._rows)
        for n in self._names:
            df[n] = self[n]
            errors = [next((m.error for m in tr.metrics_data if m.name == n), None)
                      for tr in self.evaluation.test_results]
            if any(errors):
                df[f"{n}_error"] = errors
        return df

    def __repr__(self) -> str:
        return repr({n: self.mean(n) for n in self._names})


def evaluate(dataset: Any, metrics: list[Any] | None = None, llm: Any = None, embeddings: Any = None,
             raise_exceptions: bool = False, show_progress: bool = True, **kwargs: Any) -> RagasResult:
    """Score ``dataset`` with Ragas-style metrics. Default metrics: context precision, recall and utilization."""
    specs = list(metrics) if metrics is not None else [context_precision, context_recall, context_utilization]
    built = []
    for spec in specs:
        if isinstance(spec, type) and issubclass(spec, _RagasMetric):
            spec = spec()
        if not isinstance(spec, _RagasMetric):
            raise ContextJudgeError(f"{spec!r} is not one of contextjudge.compat.ragas' metrics "
                                    "(context_precision, context_recall, context_utilization).")
        built.append(spec.build(llm))
    rows = _rows(dataset)
    cases = [_to_case(i, r) for i, r in enumerate(rows)]
    allowed = {"max_concurrency", "judge_options", "store", "run_id", "run_name"}
    result = _evaluate(cases, built, show_progress=None if show_progress else False, raise_exceptions=raise_exceptions,
                       **{k: v for k, v in kwargs.items() if k in allowed})
    return RagasResult(rows, [m.name for m in built], result)

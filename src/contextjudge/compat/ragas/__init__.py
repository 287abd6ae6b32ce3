"""Ragas' spelling of the contextjudge API, 0.1 to 0.4: ``from contextjudge.compat.ragas import evaluate, ...``.

    from contextjudge.compat.ragas import EvaluationDataset, SingleTurnSample, evaluate
    from contextjudge.compat.ragas.llms import LangchainLLMWrapper
    from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference, LLMContextRecall

    result = evaluate(dataset=EvaluationDataset(samples=[SingleTurnSample(...)]),
                      metrics=[LLMContextPrecisionWithReference(), LLMContextRecall()],
                      llm=LangchainLLMWrapper(chat_model))      # or llm=chat_model, or llm="local"
    result.to_pandas()

``dataset`` may also be a dict of lists, a list of dicts, a pandas DataFrame or a ``datasets.Dataset``, with Ragas'
old column names (question / answer / contexts / ground_truth) or the new ones (user_input / response /
retrieved_contexts / reference). The submodules mirror Ragas': ``metrics`` (and ``metrics.collections``), ``llms``,
``dataset_schema``, ``messages``, ``run_config``. Every metric is one of contextjudge's, scored by its ``evaluate``:
all verdicts of one row and metric come from one judge request, keyed by id. See docs/coming-from-ragas.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..._aio import run_sync
from ...engine import aevaluate as _aevaluate
from ...errors import ConfigurationError, ContextJudgeError
from .dataset_schema import (
    EvaluationDataset,
    EvaluationResult,
    MultiTurnSample,
    SingleTurnSample,
    sample_of,
    sample_to_case,
)
from .llms import LangchainLLMWrapper, judge_of, llm_factory
from .metrics import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    ContextUtilization,
    LLMContextPrecisionWithoutReference,
    LLMContextPrecisionWithReference,
    LLMContextRecall,
    Metric,
    context_precision,
    context_recall,
    context_utilization,
)
from .run_config import RunConfig

__all__ = [
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "ContextUtilization",
    "EvaluationDataset",
    "EvaluationResult",
    "LLMContextPrecisionWithReference",
    "LLMContextPrecisionWithoutReference",
    "LLMContextRecall",
    "LangchainLLMWrapper",
    "MultiTurnSample",
    "RagasResult",
    "RunConfig",
    "SingleTurnSample",
    "aevaluate",
    "context_precision",
    "context_recall",
    "context_utilization",
    "evaluate",
    "llm_factory",
]

RagasResult = EvaluationResult  # the name this module used before


def _rows(dataset: Any) -> list[dict[str, Any]] | None:
    """The dataset's rows as the user named their columns (None for an EvaluationDataset)."""
    if isinstance(dataset, EvaluationDataset):
        return None
    if hasattr(dataset, "samples") and isinstance(dataset.samples, list):  # a Ragas EvaluationDataset
        return [s.model_dump(exclude_none=True) if hasattr(s, "model_dump") else dict(s) for s in dataset.samples]
    if isinstance(dataset, dict):
        keys = list(dataset)
        n = len(dataset[keys[0]]) if keys else 0
        for k in keys:
            if len(dataset[k]) != n:
                raise ContextJudgeError(f"dataset column {k!r} has {len(dataset[k])} rows, expected {n}: every "
                                        "column of a dict dataset must have the same length.")
        return [{k: dataset[k][i] for k in keys} for i in range(n)]
    if hasattr(dataset, "to_dict") and hasattr(dataset, "columns"):  # pandas DataFrame
        return list(dataset.to_dict("records"))
    if hasattr(dataset, "to_list") and hasattr(dataset, "column_names"):  # datasets.Dataset
        return list(dataset.to_list())
    if isinstance(dataset, Iterable) and not isinstance(dataset, (str, bytes)):
        items = list(dataset)
        return [r.model_dump(exclude_none=True) if hasattr(r, "model_dump") else r for r in items]
    raise ContextJudgeError(f"dataset must be an EvaluationDataset, a dict of lists, a list of dicts, a pandas "
                            f"DataFrame or a datasets.Dataset, not {type(dataset).__name__}.")


def _metric_spec(spec: Any) -> Metric:
    if isinstance(spec, type) and issubclass(spec, Metric):
        return spec()
    if isinstance(spec, Metric):
        return spec
    name = getattr(spec, "name", None) or type(spec).__name__
    raise ConfigurationError(f"{name!r} is not one of contextjudge.compat.ragas' metrics: use one of "
                             f"{', '.join(_metric_names())} from contextjudge.compat.ragas.metrics.")


def _metric_names() -> list[str]:
    from . import metrics as m  # noqa: PLC0415

    return [n for n in m.__all__ if n[:1].isupper() and n != "Metric"]


async def aevaluate(dataset: Any, metrics: list[Any] | None = None, llm: Any = None, embeddings: Any = None,
                    experiment_name: str | None = None, callbacks: Any = None, run_config: RunConfig | None = None,
                    token_usage_parser: Any = None, raise_exceptions: bool = False,
                    column_map: dict[str, str] | None = None, show_progress: bool = True,
                    batch_size: int | None = None, **kwargs: Any) -> EvaluationResult:
    """Ragas' ``aevaluate``: score ``dataset`` with the context ``metrics`` (default: context precision, recall
    and utilization), judged by ``llm`` (a Ragas LLM wrapper, a LangChain chat model or "local"). Unscored rows are
    NaN; ``raise_exceptions=True`` stops at the first failure instead. contextjudge's own keywords (``store``,
    ``run_id``, ``judge_options``, ``max_concurrency``) may be added."""
    specs = [_metric_spec(s) for s in (metrics if metrics is not None
                                         else [context_precision, context_recall, context_utilization])]
    judge = judge_of(llm)
    built = [s.build(judge) for s in specs]
    names = [m.name for m in built]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"two metrics share a name ({names}); give one of them name=... so each has its "
                                 "own column.")
    no_question = all(not getattr(m, "needs_judge", True) for m in built)  # only the judge-free ranking metrics
    rows = _rows(dataset)
    samples = [sample_of(r) for r in rows] if rows is not None else list(dataset.samples)
    if column_map:
        samples = [sample_of({**s.model_dump(), **{ours: s.model_dump().get(theirs) for ours, theirs
                                                   in column_map.items() if theirs in s.model_dump()}})
                   for s in samples]
    cases, keep = [], []
    failed: dict[int, str] = {}
    for i, s in enumerate(samples):
        try:
            cases.append(sample_to_case(s, i, input_optional=no_question))
            keep.append(i)
        except ContextJudgeError as exc:
            if raise_exceptions:
                raise
            failed[i] = str(exc)
    allowed = {"max_concurrency", "judge_options", "store", "run_id", "run_name", "model", "run_config"}
    extra = {k: v for k, v in kwargs.items() if k in allowed}
    if run_config is not None:
        from ...judges import JudgeOptions  # noqa: PLC0415

        extra.setdefault("max_concurrency", run_config.max_workers)
        opts = extra.get("judge_options") or JudgeOptions()
        extra["judge_options"] = dataclasses.replace(opts, attempt_timeout=float(run_config.timeout),
                                                     max_attempts=max(1, int(run_config.max_retries) + 1))
    if experiment_name:
        extra.setdefault("run_name", experiment_name)
    result = await _aevaluate(cases, built, show_progress=None if show_progress else False,
                              raise_exceptions=raise_exceptions, skip_on_missing_params=False, **extra)
    # rows that could not become a case keep their place, with the reason as each metric's error
    from ..._result import TestResult  # noqa: PLC0415

    for tr, i in zip(result.test_results, keep, strict=False):
        tr.index = i
    result.test_results.extend(TestResult(index=i, name=None, test_case=None, error=msg) for i, msg in failed.items())
    result.test_results.sort(key=lambda tr: tr.index)
    return EvaluationResult(samples, names, result, rows=rows)


def evaluate(dataset: Any, metrics: list[Any] | None = None, llm: Any = None, embeddings: Any = None,
             **kwargs: Any) -> EvaluationResult:
    """Ragas' ``evaluate`` (sync; works inside a running event loop too). See ``aevaluate``."""
    kwargs.pop("allow_nest_asyncio", None)
    kwargs.pop("return_executor", None)
    return run_sync(aevaluate(dataset, metrics, llm, embeddings, **kwargs))

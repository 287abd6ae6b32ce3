"""``ragas.dataset_schema`` names: ``SingleTurnSample``, ``MultiTurnSample``, ``EvaluationDataset`` and the result
of ``evaluate`` (``EvaluationResult``: ``scores``, ``to_pandas()``, ``total_tokens()``, ``total_cost()``)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..._result import EvaluationResult as _CoreResult
from ...cases.testcase import LLMTestCase, RetrievedNode
from ...errors import ContextJudgeError, MetricNotFoundError
from .messages import AIMessage, HumanMessage, ToolMessage

__all__ = ["EvaluationDataset", "EvaluationResult", "MultiTurnSample", "SingleTurnSample", "TokenUsage",
           "sample_of", "sample_to_case"]



def _pandas() -> Any:
    """pandas, or an ImportError that says which extra installs it (as the core's ``to_pandas()`` does)."""
    try:
        import pandas  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("this needs pandas: pip install 'contextjudge[pandas]' (or pip install pandas)") from exc
    return pandas

class SingleTurnSample(BaseModel):
    """One question, what was retrieved and answered, and the reference (Ragas 0.2-0.4 field names)."""

    model_config = ConfigDict(extra="allow")

    user_input: str | None = None
    retrieved_contexts: list[str] | None = None
    reference_contexts: list[str] | None = None
    retrieved_context_ids: list[str | int] | None = None
    reference_context_ids: list[str | int] | None = None
    response: str | None = None
    multi_responses: list[str] | None = None
    reference: str | None = None
    rubrics: dict[str, str] | None = None
    persona_name: str | None = None
    query_style: str | None = None
    query_length: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as a dict."""
        return self.model_dump(exclude_none=True)

    def get_features(self) -> list[str]:
        """The names of the fields that are set."""
        return list(self.to_dict())


class MultiTurnSample(BaseModel):
    """A conversation as Ragas keeps it (messages). The context metrics are single-turn, in Ragas and here: a
    multi-turn sample in ``evaluate`` gets NaN with the reason in the ``<metric>_error`` column."""

    model_config = ConfigDict(extra="allow")

    user_input: list[HumanMessage | AIMessage | ToolMessage]
    reference: str | None = None
    reference_tool_calls: list[Any] | None = None
    rubrics: dict[str, str] | None = None
    reference_topics: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as a dict."""
        return self.model_dump(exclude_none=True)


_OLD = {"question": "user_input", "answer": "response", "contexts": "retrieved_contexts",
        "ground_truth": "reference", "ground_truths": "reference"}


def _new_names(row: dict[str, Any]) -> dict[str, Any]:
    """A row with Ragas 0.1's column names (question/answer/contexts/ground_truth) renamed to 0.2's."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        new = _OLD.get(k, k)
        if k == "ground_truths" and isinstance(v, (list, tuple)):
            v = " ".join(str(x) for x in v)
        if new in out and out[new] is not None:
            continue
        out[new] = v
    return out


def _clean(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays from pandas / datasets
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def sample_of(row: Any) -> SingleTurnSample | MultiTurnSample:
    """A ``SingleTurnSample`` or ``MultiTurnSample`` from a sample or a dict row (old Ragas column names renamed)."""
    if isinstance(row, (SingleTurnSample, MultiTurnSample)):
        return row
    if isinstance(row, BaseModel):
        row = row.model_dump()
    if not isinstance(row, dict):
        raise ContextJudgeError(f"a dataset row must be a dict or a SingleTurnSample, not {type(row).__name__}.")
    data = {k: _clean(v) for k, v in _new_names(row).items()}
    if isinstance(data.get("user_input"), list):
        return MultiTurnSample(**data)
    return SingleTurnSample(**data)


def _list_cell(value: Any) -> Any:
    """A CSV cell holding a Python or JSON list (as pandas writes one) back to the list."""
    if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        import ast  # noqa: PLC0415

        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
        return parsed if isinstance(parsed, list) else value
    return value


NO_INPUT = "(no user_input)"  # the input of a sample scored only by ids or texts (the ranking metrics need none)


def sample_to_case(sample: Any, index: int | None = None, *, input_optional: bool = False) -> LLMTestCase:
    """The contextjudge test case of a single-turn sample (``retrieved_context_ids`` become the nodes' ids, and a
    sample with ids only gets one node per id, its text the id; ``reference_context_ids`` become
    ``expected_context_ids``). ``input_optional``: the metric needs no question (the judge-free ranking ones)."""
    where = "" if index is None else f"dataset row {index}: "
    if isinstance(sample, MultiTurnSample):
        raise ContextJudgeError(f"{where}a MultiTurnSample has no retrieved_contexts per turn; the context metrics "
                                "score SingleTurnSample rows.")
    if not sample.user_input and input_optional:
        sample = sample.model_copy(update={"user_input": NO_INPUT})
    if not sample.user_input:
        raise ContextJudgeError(f"{where}the sample has no user_input: the context metrics judge the retrieval "
                                "against the question, so set user_input (the old column name 'question' works too).")
    nodes = None
    if sample.retrieved_contexts is not None:
        ids = sample.retrieved_context_ids or []
        nodes = [RetrievedNode(text=str(t), id=str(ids[k]) if k < len(ids) else None)
                 for k, t in enumerate(sample.retrieved_contexts)]
    elif sample.retrieved_context_ids is not None:
        nodes = [RetrievedNode(text=str(i), id=str(i)) for i in sample.retrieved_context_ids]
    expected_ids = None if sample.reference_context_ids is None else [str(i) for i in sample.reference_context_ids]
    return LLMTestCase(input=sample.user_input, actual_output=sample.response, expected_output=sample.reference,
                       retrieval_context=nodes, context=sample.reference_contexts,
                       expected_context_ids=expected_ids)


class EvaluationDataset:
    """Samples, single-turn or multi-turn: ``from_list``, ``from_pandas``, ``from_dict``, ``from_hf_dataset``,
    ``from_jsonl``, ``to_pandas``, ``to_list``; indexing, ``len`` and iteration as in Ragas."""

    def __init__(self, samples: list[Any], backend: str | None = None, name: str | None = None) -> None:
        self.samples = [sample_of(s) for s in samples]
        kinds = {type(s) for s in self.samples}
        if len(kinds) > 1:
            raise ContextJudgeError("an EvaluationDataset holds one kind of sample: all SingleTurnSample or all "
                                    "MultiTurnSample.")
        self.name = name
        self.backend = backend

    @classmethod
    def from_list(cls, data: list[dict[str, Any]], **kwargs: Any) -> EvaluationDataset:
        """A dataset from a list of dict rows (Ragas' old and new column names both work)."""
        return cls([sample_of(r) for r in data], **kwargs)

    from_dict = from_list

    @classmethod
    def from_pandas(cls, dataframe: Any, **kwargs: Any) -> EvaluationDataset:
        """A dataset from a pandas DataFrame, one row a sample."""
        return cls.from_list(dataframe.to_dict("records"), **kwargs)

    @classmethod
    def from_hf_dataset(cls, dataset: Any, **kwargs: Any) -> EvaluationDataset:
        """A dataset from a Hugging Face ``datasets.Dataset``, one row a sample."""
        return cls.from_list(list(dataset.to_list()), **kwargs)

    @classmethod
    def from_jsonl(cls, path: str, **kwargs: Any) -> EvaluationDataset:
        """A dataset from a JSONL file, one object a line."""
        import json  # noqa: PLC0415

        with open(path, encoding="utf-8") as fh:
            return cls.from_list([json.loads(line) for line in fh if line.strip()], **kwargs)

    @classmethod
    def from_csv(cls, path: str, **kwargs: Any) -> EvaluationDataset:
        """Rows of a CSV file; list columns (retrieved_contexts, ...) written by ``to_csv`` are read back as lists."""
        pd = _pandas()

        df = pd.read_csv(path)
        rows = [{k: _list_cell(v) for k, v in r.items()} for r in df.to_dict("records")]
        return cls.from_list(rows, **kwargs)

    def to_csv(self, path: str) -> None:
        """Write the samples to a CSV file (needs pandas)."""
        self.to_pandas().to_csv(path, index=False)

    def to_jsonl(self, path: str) -> None:
        """Write the samples to a JSONL file, one object a line."""
        import json  # noqa: PLC0415

        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in self.to_list())

    def to_hf_dataset(self) -> Any:
        """The samples as a Hugging Face ``datasets.Dataset`` (needs ``datasets``)."""
        from datasets import Dataset  # noqa: PLC0415 - only this method needs it

        return Dataset.from_list(self.to_list())

    def is_multi_turn(self) -> bool:
        """Whether the samples are ``MultiTurnSample`` objects."""
        return bool(self.samples) and isinstance(self.samples[0], MultiTurnSample)

    def get_sample_type(self) -> type:
        """The class of the samples (``SingleTurnSample`` for an empty dataset)."""
        return type(self.samples[0]) if self.samples else SingleTurnSample

    def features(self) -> list[str]:
        """The names of the fields set on any sample, sorted."""
        return sorted({k for s in self.samples for k in s.to_dict()})

    def to_list(self) -> list[dict[str, Any]]:
        """The samples as dicts of their set fields."""
        return [s.to_dict() for s in self.samples]

    def to_pandas(self) -> Any:
        """The samples as a pandas DataFrame, without the columns no sample sets."""
        pd = _pandas()

        return pd.DataFrame([s.model_dump() for s in self.samples]).dropna(axis=1, how="all")

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.samples)

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return type(self)(self.samples[idx])
        return self.samples[idx]

    def __repr__(self) -> str:
        return f"EvaluationDataset(features={self.features()}, len={len(self)})"


@dataclass
class TokenUsage:
    """Ragas' ``TokenUsage``: the judge's input and output tokens over a run, and which model spent them."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""


class EvaluationResult:
    """Ragas' result shape over contextjudge's: ``scores`` (one dict per row, NaN where unscored), ``result[name]``
    (a metric's per-row scores), ``to_pandas()`` (the dataset's columns, then one float column per metric, and a
    ``<metric>_error`` column where a row failed), ``total_tokens()``, ``total_cost()``, and the means when printed.
    ``evaluation`` is contextjudge's own ``EvaluationResult`` (reasons, verdicts, usage, run id)."""

    def __init__(self, samples: list[Any], names: list[str], result: _CoreResult,
                 rows: list[dict[str, Any]] | None = None) -> None:
        self.samples = samples
        self._rows = rows  # the rows as the user named the columns, for to_pandas
        self._names = names
        self.evaluation = result
        self.run_id = result.run_id
        by_index = {tr.index: tr for tr in result.test_results}
        self._results = [by_index.get(i) for i in range(len(samples))]
        self.scores: list[dict[str, float]] = []
        self._errors: dict[str, list[str | None]] = {n: [] for n in names}
        for tr in self._results:
            row = {}
            for n in names:
                m = next((x for x in (tr.metrics_data if tr else []) if x.name == n), None)
                score = m.score if m is not None else None
                row[n] = float("nan") if score is None else float(score)
                err = (m.error if m is not None else (tr.error if tr else None)) if score is None else None
                self._errors[n].append(err)
            self.scores.append(row)

    @property
    def dataset(self) -> EvaluationDataset:
        """The samples that were scored, as an ``EvaluationDataset``."""
        return EvaluationDataset(self.samples)

    def __getitem__(self, name: str) -> list[float]:
        if name not in self._names:
            raise MetricNotFoundError(f"no metric {name!r} in this result; use one of {self._names}")
        return [s[name] for s in self.scores]

    def _nanmean(self, name: str) -> float:
        vals = [v for v in self[name] if not math.isnan(v)]
        return sum(vals) / len(vals) if vals else float("nan")

    def mean(self, name: str) -> float:
        """A metric's mean over the rows it scored (NaN rows left out; NaN when none scored)."""
        return self._nanmean(name)

    def to_pandas(self, batch_size: int | None = None, batched: bool = False) -> Any:
        """The dataset's columns, one score column per metric, and ``<metric>_error`` where a row failed."""
        pd = _pandas()

        if self._rows is not None:
            base = pd.DataFrame(self._rows)
        else:
            base = pd.DataFrame([s.model_dump() for s in self.samples]).dropna(axis=1, how="all")
        scores = pd.DataFrame(self.scores, columns=self._names, dtype=float)
        df = pd.concat([base.reset_index(drop=True), scores], axis=1)
        for n in self._names:
            if any(self._errors[n]):
                df[f"{n}_error"] = self._errors[n]
        return df

    def total_tokens(self) -> TokenUsage:
        """The judge's tokens over the run, as Ragas' ``TokenUsage``."""
        usage = self.evaluation.usage
        return TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                          model=", ".join(self.evaluation.judges()))

    def total_cost(self, cost_per_input_token: float | None = None, cost_per_output_token: float | None = None,
                   per_model_costs: dict[str, tuple[float, float]] | None = None) -> float:
        """The judge's cost in USD: from the prices given (per token), else contextjudge's own price table."""
        usage = self.evaluation.usage
        if per_model_costs:
            judges = self.evaluation.judges()
            price = next((per_model_costs[j] for j in judges if j in per_model_costs), None)
            if price is None:
                raise ContextJudgeError(f"total_cost(per_model_costs=...) has no price for the judge(s) {judges}.")
            cost_per_input_token, cost_per_output_token = price
        if cost_per_input_token is not None or cost_per_output_token is not None:
            return usage.input_tokens * (cost_per_input_token or 0.0) + usage.output_tokens * (
                cost_per_output_token or 0.0)
        if usage.cost is None:
            raise ContextJudgeError("this judge has no price in contextjudge's table: pass cost_per_input_token= and "
                                    "cost_per_output_token= (USD per token), as in Ragas.")
        return usage.cost

    def __repr__(self) -> str:
        return "{" + ", ".join(f"'{n}': {self._nanmean(n):.4f}" for n in self._names) + "}"

"""``deepeval.dataset`` names: ``EvaluationDataset``, ``Golden``, ``ConversationalGolden``.

``EvaluationDataset`` holds goldens and test cases, loads goldens (and test cases) from JSON, JSONL and CSV files
with DeepEval's key names, and drives an ``@observe``-decorated app over its goldens:

    for golden in dataset.evals_iterator(metrics=[...]):
        app(golden.input)          # every @observe span of this call belongs to this golden's trace

When the loop ends, the traces are scored by contextjudge's ``evaluate`` (the spans that carry metrics, and with
``metrics=`` one end-to-end case per trace) and the results table is printed, as in DeepEval; the result is kept
on ``dataset.evaluation_result``. Confident AI calls (``push``, ``pull``, ``queue``) raise a clear error: there is
no hosted platform here.
"""

from __future__ import annotations

import asyncio
import csv
import inspect
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..._json import loads as read_json
from ...cases.goldens import Golden as _CoreGolden
from ...errors import ConfigurationError, ContextJudgeError
from .test_case import ConversationalTestCase, LLMTestCase, ToolCall, Turn

__all__ = ["ConversationalGolden", "EvaluationDataset", "Golden"]

logger = logging.getLogger("contextjudge")

_DELIMITER = ";"


@dataclass
class Golden(_CoreGolden):
    """DeepEval's ``Golden``: contextjudge's golden with DeepEval's other fields (kept, not judged).

    ``Golden(input=...)`` as in DeepEval; ``input`` is the one required field.
    """

    input: str = ""
    actual_output: str | None = None
    comments: str | None = None
    tools_called: list[Any] | None = None
    expected_tools: list[Any] | None = None
    source_file: str | None = None
    name: str | None = None
    custom_column_key_values: dict[str, str] | None = None
    multimodal: bool = False
    token_cost: float | None = None
    input_token_count: int | None = None
    output_token_count: int | None = None
    expectations: Any = None
    expected_labels: Any = None
    images_mapping: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.input, str) or not self.input.strip():
            raise ConfigurationError("Golden(input=...) needs a non-empty input string: the question to ask the app.")
        if self.additional_metadata is None:
            self.additional_metadata = {}


@dataclass
class ConversationalGolden:
    """DeepEval's multi-turn golden: a scenario to simulate, the outcome to reach, and optionally the turns."""

    scenario: str
    expected_outcome: str | None = None
    user_description: str | None = None
    context: list[str] | None = None
    additional_metadata: dict[str, Any] | None = None
    comments: str | None = None
    name: str | None = None
    custom_column_key_values: dict[str, str] | None = None
    turns: list[Any] | None = None
    persona: Any = None
    id: str | None = None
    multimodal: bool = False
    expectations: Any = None
    expected_labels: Any = None
    images_mapping: dict[str, Any] | None = None


_GOLDEN_FIELDS = {f.name for f in fields(Golden)}
_CONV_FIELDS = {f.name for f in fields(ConversationalGolden)}


def _split(value: Any, delimiter: str) -> list[str] | None:
    if value is None or value == "":
        return None
    if isinstance(value, list):
        return [str(v) for v in value]
    return [p for p in str(value).split(delimiter)]


def _tools(value: Any) -> list[ToolCall] | None:
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [ToolCall(name=v.strip()) for v in value.split(";") if v.strip()]
    if isinstance(value, dict):
        value = [value]
    return [v if isinstance(v, ToolCall) else ToolCall(**v) if isinstance(v, dict) else ToolCall(name=str(v))
            for v in value]


def _json_field(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


class EvaluationDataset:
    """Goldens and test cases, as in DeepEval; single-turn (``Golden``) or multi-turn (``ConversationalGolden``)."""

    def __init__(self, goldens: list[Any] | None = None, test_cases: list[Any] | None = None) -> None:
        self._goldens: list[_CoreGolden] = []  # DeepEval's Golden is a core Golden with its extra fields
        self._conversational_goldens: list[ConversationalGolden] = []
        self._llm_test_cases: list[Any] = []
        self._conversational_test_cases: list[Any] = []
        goldens = list(goldens or [])
        self._multi_turn = bool(goldens) and isinstance(goldens[0], ConversationalGolden)
        for g in goldens:
            self.add_golden(g)
        for tc in test_cases or []:
            self.add_test_case(tc)
        self._pending: list[tuple[Any, Any]] = []
        self.evaluation_result: Any = None

    def __repr__(self) -> str:
        return (f"EvaluationDataset(goldens={len(self.goldens)}, test_cases={len(self.test_cases)}, "
                f"_multi_turn={self._multi_turn})")

    def __len__(self) -> int:
        return len(self.goldens)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.goldens)

    # ---------------------------------------------------------------------------------------------- contents
    @property
    def goldens(self) -> list[Any]:
        """The goldens this dataset holds: the conversational ones once it holds those, else the single-turn ones."""
        return list(self._conversational_goldens if self._multi_turn else self._goldens)

    @goldens.setter
    def goldens(self, value: list[Any]) -> None:
        self._goldens, self._conversational_goldens = [], []
        value = list(value or [])
        self._multi_turn = bool(value) and isinstance(value[0], ConversationalGolden)
        for g in value:
            self.add_golden(g)

    @property
    def test_cases(self) -> list[Any]:
        """The test cases this dataset holds, conversational or single-turn as its goldens are."""
        return list(self._conversational_test_cases if self._multi_turn else self._llm_test_cases)

    @test_cases.setter
    def test_cases(self, value: list[Any]) -> None:
        self._llm_test_cases, self._conversational_test_cases = [], []
        for tc in value or []:
            self.add_test_case(tc)

    def add_golden(self, golden: Any) -> None:
        """Add a ``Golden``, ``ConversationalGolden`` or dict row; single-turn and conversational goldens never mix."""
        if isinstance(golden, ConversationalGolden):
            if self._goldens:
                raise ConfigurationError("this dataset holds single-turn Goldens; a ConversationalGolden cannot join "
                                         "them. Use a second EvaluationDataset for conversations.")
            self._multi_turn = True
            self._conversational_goldens.append(golden)
        elif isinstance(golden, _CoreGolden):
            if self._conversational_goldens:
                raise ConfigurationError("this dataset holds ConversationalGoldens; a single-turn Golden cannot join "
                                         "them. Use a second EvaluationDataset.")
            self._goldens.append(golden)
        elif isinstance(golden, dict):
            self.add_golden(_golden_from_row(golden, f"golden {len(self.goldens)}"))
        else:
            raise ConfigurationError(f"add_golden takes a Golden or ConversationalGolden, not {type(golden).__name__}.")

    def add_test_case(self, test_case: Any) -> None:
        """Add an ``LLMTestCase`` or ``ConversationalTestCase``; anything else raises ``ConfigurationError``."""
        from ...cases.testcase import ConversationalTestCase as _Conv  # noqa: PLC0415
        from ...cases.testcase import LLMTestCase as _LLM  # noqa: PLC0415

        if isinstance(test_case, _Conv):
            self._conversational_test_cases.append(test_case)
        elif isinstance(test_case, _LLM):
            self._llm_test_cases.append(test_case)
        else:
            raise ConfigurationError(f"add_test_case takes an LLMTestCase or ConversationalTestCase, not "
                                     f"{type(test_case).__name__}.")

    # ----------------------------------------------------------------------------------------------- loading
    def add_goldens_from_json_file(self, file_path: str, input_key_name: str = "input", **keys: Any) -> None:
        """Goldens from a JSON file holding a list of objects (DeepEval's ``*_key_name`` arguments rename keys)."""
        rows = _read_json(file_path, keys.pop("encoding_type", "utf-8"))
        for i, row in enumerate(rows):
            self.add_golden(_golden_from_row(_rename(row, input_key_name, keys), f"{file_path}[{i}]"))

    def add_goldens_from_jsonl_file(self, file_path: str, input_key_name: str = "input", **keys: Any) -> None:
        """Goldens from a JSONL file, one object a line."""
        encoding = keys.pop("encoding_type", "utf-8")
        for n, line in enumerate(Path(file_path).read_text(encoding=encoding).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = read_json(line)
            except json.JSONDecodeError as exc:
                raise ContextJudgeError(f"{file_path}:{n}: not a JSON object ({exc.msg}).") from exc
            self.add_golden(_golden_from_row(_rename(row, input_key_name, keys), f"{file_path}:{n}"))

    def add_goldens_from_csv_file(self, file_path: str, input_col_name: str = "input", **cols: Any) -> None:
        """Goldens from a CSV file with a header row; list columns (context, retrieval_context) are split on
        ``context_col_delimiter`` / ``retrieval_context_col_delimiter`` (default ";")."""
        for i, row in enumerate(_read_csv(file_path)):
            row = _rename(row, input_col_name, cols)
            for key in ("context", "retrieval_context"):
                row[key] = _split(row.get(key), cols.get(f"{key}_col_delimiter", _DELIMITER))
            self.add_golden(_golden_from_row(row, f"{file_path}:{i + 2}"))

    def add_test_cases_from_json_file(self, file_path: str, input_key_name: str, actual_output_key_name: str,
                                      **keys: Any) -> None:
        """Test cases from a JSON file holding a list of objects (DeepEval's ``*_key_name`` arguments rename keys)."""
        rows = _read_json(file_path, keys.pop("encoding_type", "utf-8"))
        keys["actual_output_key_name"] = actual_output_key_name
        for row in rows:
            self.add_test_case(_case_from_row(_rename(row, input_key_name, keys)))

    def add_test_cases_from_csv_file(self, file_path: str, input_col_name: str, actual_output_col_name: str,
                                     **cols: Any) -> None:
        """Test cases from a CSV file with a header row; list columns are split as in ``add_goldens_from_csv_file``."""
        cols["actual_output_col_name"] = actual_output_col_name
        for row in _read_csv(file_path):
            row = _rename(row, input_col_name, cols)
            for key in ("context", "retrieval_context"):
                row[key] = _split(row.get(key), cols.get(f"{key}_col_delimiter", _DELIMITER))
            self.add_test_case(_case_from_row(row))

    def save_as(self, file_type: str, directory: str, file_name: str | None = None,
                include_test_cases: bool = False) -> str:
        """Write the goldens to ``directory`` as json, jsonl or csv; returns the file's path."""
        if file_type not in ("json", "jsonl", "csv"):
            raise ConfigurationError(f"save_as(file_type={file_type!r}): use 'json', 'jsonl' or 'csv'.")
        Path(directory).mkdir(parents=True, exist_ok=True)
        path = Path(directory) / f"{file_name or 'dataset'}.{file_type}"
        rows = [_golden_row(g) for g in self.goldens]
        if file_type == "json":
            path.write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
        elif file_type == "jsonl":
            path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows), encoding="utf-8")
        else:
            names = sorted({k for r in rows for k in r})
            with path.open("w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=names)
                w.writeheader()
                for r in rows:
                    w.writerow({k: _DELIMITER.join(v) if isinstance(v, list) else v for k, v in r.items()})
        return str(path)

    def push(self, *_: Any, **__: Any) -> None:
        """Refuse clearly: DeepEval's push/pull/queue talk to Confident AI, which contextjudge does not use."""
        raise ContextJudgeError("EvaluationDataset.push() uploads to Confident AI, which contextjudge does not use: "
                                "keep goldens in a file (save_as) or your repository.")

    pull = queue = push

    # ------------------------------------------------------------------------------------------- evaluation
    def evals_iterator(self, metrics: list[Any] | None = None, hyperparameters: Any = None,
                       identifier: str | None = None, display_config: Any = None, cache_config: Any = None,
                       error_config: Any = None, async_config: Any = None, **kwargs: Any) -> Iterator[Any]:
        """Yield each golden inside its own trace; when the loop ends, score the traces and print the results.

        Call the app (``@observe``-decorated, from ``contextjudge.compat.deepeval.tracing``) in the loop's body
        with ``golden.input``; for an async app, ``dataset.evaluate(app(golden.input))`` hands its coroutine over
        to be awaited (concurrently, each in its golden's trace) when the loop ends.
        """
        from ..._tracing import Trace, _trace  # noqa: PLC0415 - the trace the loop body's spans attach to

        if self._multi_turn:
            raise ConfigurationError("evals_iterator() runs an @observe app over single-turn Goldens; for "
                                     "ConversationalGoldens build ConversationalTestCase objects and call "
                                     "evaluate(test_cases=..., metrics=[TurnContextual...Metric(...)]).")
        if not self._goldens:
            logger.warning("contextjudge: evals_iterator() on a dataset with no goldens: nothing to run or score")
            return
        traces: list[Trace] = []
        self._pending = []
        for i, golden in enumerate(self.goldens):
            trace = Trace(golden=golden, index=i)
            traces.append(trace)
            token = _trace.set(trace)
            try:
                yield golden
            finally:
                try:
                    _trace.reset(token)
                except ValueError:  # pragma: no cover - the loop was resumed from another context
                    _trace.set(None)
        if self._pending:
            from ..._aio import run_sync  # noqa: PLC0415

            run_sync(_await_pending(self._pending))
            self._pending = []
        from ._evaluate import evaluate_traces  # noqa: PLC0415

        self.evaluation_result = evaluate_traces(traces, metrics, hyperparameters=hyperparameters,
                                                 identifier=identifier, display_config=display_config,
                                                 cache_config=cache_config, error_config=error_config,
                                                 async_config=async_config, **kwargs)

    def evaluate(self, task: Any) -> None:
        """Inside ``evals_iterator``: hand over the app's coroutine (or task) for this golden."""
        from ..._tracing import _trace  # noqa: PLC0415

        if not inspect.isawaitable(task):
            raise ConfigurationError("dataset.evaluate(task) takes the coroutine or asyncio task of the app's call, "
                                     "e.g. dataset.evaluate(app(golden.input)), inside evals_iterator().")
        trace = _trace.get()
        if trace is None:
            raise ConfigurationError("dataset.evaluate(task) is called inside `for golden in "
                                     "dataset.evals_iterator(): ...`.")
        self._pending.append((trace, task))


async def _await_pending(pending: list[tuple[Any, Any]]) -> None:
    from ..._tracing import _trace, type_name  # noqa: PLC0415

    async def one(trace: Any, aw: Any) -> None:
        token = _trace.set(trace)  # a coroutine not yet started runs in this task's context, inside its trace
        try:
            trace.output = await aw
        except Exception as exc:  # noqa: BLE001 - one failing golden never stops the run
            trace.error = f"{type_name(exc)}: {exc}"
        finally:
            _trace.reset(token)

    await asyncio.gather(*(one(t, aw) for t, aw in pending))


# ---------------------------------------------------------------------------------------------------- helpers
def _read_json(path: str, encoding: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text(encoding=encoding))
    except FileNotFoundError as exc:
        raise ContextJudgeError(f"{path!r} does not exist: check the path.") from exc
    except json.JSONDecodeError as exc:
        raise ContextJudgeError(f"{path}: not valid JSON ({exc}).") from exc
    if isinstance(data, dict):
        data = data.get("goldens", data.get("test_cases", data.get("data", [data])))
    if not isinstance(data, list):
        raise ContextJudgeError(f"{path}: expected a list of objects.")
    return data


def _read_csv(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(fh)]
    except FileNotFoundError as exc:
        raise ContextJudgeError(f"{path!r} does not exist: check the path.") from exc


def _rename(row: dict[str, Any], input_name: str, names: dict[str, Any]) -> dict[str, Any]:
    """DeepEval's ``<field>_key_name`` / ``<field>_col_name`` arguments: the file's name for each field."""
    out = dict(row)
    mapping = {"input": input_name}
    for arg, value in names.items():
        for suffix in ("_key_name", "_col_name"):
            if arg.endswith(suffix) and isinstance(value, str):
                mapping[arg[: -len(suffix)].replace("addtional", "additional")] = value
    for ours, theirs in mapping.items():
        if theirs != ours and theirs in row:
            out[ours] = out.pop(theirs)
    return out


def _golden_from_row(row: dict[str, Any], where: str) -> Any:
    if row.get("scenario") and not row.get("input"):
        data = {k: _json_field(v) for k, v in row.items() if k in _CONV_FIELDS and v is not None}
        return ConversationalGolden(**data)
    if not row.get("input"):
        raise ContextJudgeError(f"{where}: a golden needs an 'input' (got keys {sorted(row)}); name the column with "
                                "input_key_name= / input_col_name=.")
    data = {k: _json_field(v) for k, v in row.items() if k in _GOLDEN_FIELDS and v is not None}
    for key in ("tools_called", "expected_tools"):
        if key in data:
            data[key] = _tools(data[key])
    extra = {k: v for k, v in row.items() if k not in _GOLDEN_FIELDS and v is not None}
    if extra:
        data["additional_metadata"] = {**(data.get("additional_metadata") or {}), **extra}
    return Golden(**data)


def _case_from_row(row: dict[str, Any]) -> Any:
    known = {"input", "actual_output", "expected_output", "context", "retrieval_context", "name",
             "additional_metadata", "tools_called", "expected_tools", "comments"}
    data = {k: _json_field(v) for k, v in row.items() if k in known and v is not None}
    if row.get("turns"):
        turns = [t if isinstance(t, Turn) else Turn(**t) for t in _json_field(row["turns"])]
        return ConversationalTestCase(turns=turns, expected_outcome=row.get("expected_outcome"))
    return LLMTestCase(**data)


def _golden_row(g: Any) -> dict[str, Any]:
    row = {}
    for f in fields(g):
        v = getattr(g, f.name)
        if v in (None, {}, [], False) or f.name == "multimodal":
            continue
        row[f.name] = [t.model_dump() if hasattr(t, "model_dump") else t for t in v] if isinstance(v, list) else v
    return row

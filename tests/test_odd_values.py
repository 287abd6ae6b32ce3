"""Any user value: node metadata and other free-form fields that are not JSON never abort a run.

One ``np.float32`` in one node's metadata used to make ``evaluate()`` raise and return nothing for any case.
Values are converted to plain JSON data when a node or test case is made (``contextjudge.cases.testcase.jsonable``).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from contextjudge import ConversationalTestCase, LLMTestCase, RetrievedNode, Turn, evaluate
from contextjudge.cases.testcase import jsonable
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric, TurnContextualRelevancyMetric
from contextjudge.report import write_report
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge


class Colour(enum.Enum):
    RED = "red"


class Opaque:
    def __str__(self) -> str:
        return "an opaque object"


ODD = {"f32": np.float32(0.25), "i64": np.int64(7), "arr": np.arange(3), "zero_d": np.array(1.5), "raw": b"\xffab",
       "tags": {"b", "a"}, "when": datetime.datetime(2026, 11, 23, 12, 0), "price": decimal.Decimal("9.99"),
       "uid": uuid.UUID(int=5), "colour": Colour.RED, "obj": Opaque(), 3: "int key",
       "nested": {"deep": [np.float64(1.0), (np.int8(2), {np.int16(9)})]}}


@pytest.mark.parametrize("value, expected", [
    (np.float32(0.25), 0.25), (np.int64(7), 7), (np.bool_(True), True), (np.arange(2), [0, 1]),
    (b"\xffab", "\ufffdab"), ({"b", "a"}, ["a", "b"]), ((1, 2), [1, 2]), (datetime.date(2026, 1, 2), "2026-01-02"),
    (decimal.Decimal("1.5"), "1.5"), (Colour.RED, "red"), (Opaque(), "an opaque object"), ({1: 2}, {"1": 2}),
    (None, None), ("text", "text"),
])
def test_jsonable(value, expected):
    assert jsonable(value) == expected


def _cases():
    node = RetrievedNode("Paris is the capital of France.", id=np.int64(4), score=np.float32(0.9), metadata=ODD)
    single = LLMTestCase(input="What is the capital of France?", expected_output="Paris is the capital.",
                         retrieval_context=[node, RetrievedNode("Bananas are yellow.", metadata={"x": np.nan})],
                         additional_metadata={"run": np.int32(3), "raw": b"x"})
    conv = ConversationalTestCase(turns=[
        Turn(role="user", content="Capital of France?"),
        Turn(role="assistant", content="Paris.", retrieval_context=[node], additional_metadata={"t": np.float16(1)}),
    ], additional_metadata={"session": uuid.UUID(int=1)})
    return single, conv


def test_odd_metadata_is_converted_at_construction_and_documented():
    single, conv = _cases()
    meta = single.retrieval_context[0].metadata
    json.dumps(meta)  # plain JSON now
    assert meta["f32"] == 0.25 and meta["arr"] == [0, 1, 2] and meta["tags"] == ["a", "b"] and meta["3"] == "int key"
    assert single.retrieval_context[0].score == pytest.approx(0.9) and single.retrieval_context[0].id == "4"
    assert single.additional_metadata == {"run": 3, "raw": "x"}
    json.dumps(conv.turns[1].additional_metadata)
    assert "np.float32" in (RetrievedNode.__doc__ or "") or "numpy" in (RetrievedNode.__doc__ or "")


def test_evaluate_store_exports_and_report_with_odd_values(tmp_path):
    single, conv = _cases()
    # a value put in after construction is not seen by the conversion: the exports still cope
    single.retrieval_context[1].metadata["late"] = np.float32(2.5)
    store = open_store(str(tmp_path / "results.db"))
    result = evaluate([single, conv], [ContextualPrecisionMetric(model=FakeJudge()),
                                        ContextualRelevancyMetric(model=FakeJudge()),
                                        TurnContextualRelevancyMetric(model=FakeJudge())],
                      show_progress=False, store=store)
    scores = [m for tr in result for m in tr.metrics_data]
    assert len(scores) == 3 and all(m.error is None for m in scores), [m.error for m in scores]
    lines = result.to_jsonl().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    assert len(result.to_pandas()) == 3
    again = evaluate([single], [ContextualPrecisionMetric(model=FakeJudge())], show_progress=False, store=store,
                     run_id=result.run_id)  # resumes from the store: the stored case reads back
    assert again.test_results[0].metrics_data[0].score == scores[0].score
    html = write_report(str(tmp_path / "report.html"), store=store, run=result.run_id)
    assert "Paris is the capital of France." in Path(html).read_text(encoding="utf-8")

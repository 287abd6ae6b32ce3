"""``LazyCase``: a captured call whose test case is assembled on first use, off the request path."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from contextjudge import LLMTestCase, MetricResult
from contextjudge.capture import CapturedCase
from contextjudge.cases.identity import new_case_id
from contextjudge.errors import CaptureError

from ._cases import record_to_case
from ._record import Record

__all__ = ["LazyCase"]

logger = logging.getLogger("contextjudge")

_ASSEMBLY_LOCK = threading.RLock()  # guards every LazyCase's one-time assembly (re-entrant: see LazyCase)


class LazyCase(CapturedCase):
    """A captured call whose ``LLMTestCase`` is assembled on first use, off the request path.

    The request path only creates this object and hands it to the scorer: the record it holds was snapshotted while
    the call ran (node texts, ids, scores and metadata copied as they were). ``test_case``, ``metadata`` and
    ``golden_id`` assemble it on first access, once, under a lock: on the scorer's worker thread in background
    mode, else on whichever thread first reads the case. Goldens are matched at assembly, before anyone sees the
    test case. If assembly fails, the failure is logged, the case leaves its scorer, and reading it raises
    ``CaptureError``. Copied or pickled, it becomes a plain ``CapturedCase``.
    """

    def __init__(self, record: Record) -> None:
        # Not CapturedCase.__init__: its three assembled fields are the properties below.
        self.source = "llama_index"
        self._case_id: str | None = None  # a uuid4 costs a system call: drawn on first read
        self.root_run_id = record.span_id
        self.results: list[MetricResult] = []
        self.captured_at = time.time()
        self._record: Record | None = record
        self._callbacks: list[Any] = []  # when_assembled callbacks (the session's golden matching)
        self._fields: list[Any] | None = None  # [test_case, metadata, golden_id] once assembled
        self._ready = False
        self._failed = False

    # ------------------------------------------------------------------------------------------ assembly
    @property
    def assembled(self) -> bool:
        """Whether the test case has been assembled (successfully or not)."""
        return self._ready or self._failed

    def assemble(self) -> bool:
        """Assemble now if not done yet; False when assembly failed (logged once)."""
        try:
            self._assembled()
        except CaptureError:
            return False
        return True

    def _assembled(self) -> list[Any]:
        if self._ready:
            return self._fields  # type: ignore[return-value]
        with _ASSEMBLY_LOCK:
            if self._fields is None:
                if self._failed:
                    raise CaptureError("contextjudge could not assemble this captured llama_index call (logged).")
                self._assemble()
            return self._fields

    def when_assembled(self, callback: Any) -> None:
        with _ASSEMBLY_LOCK:
            if not self._ready and not self._failed:
                self._callbacks.append(callback)
                return
        if self._ready:
            callback(self)

    def _assemble(self) -> None:
        record = self._record
        try:
            assert record is not None
            built = record_to_case(record)
            self._fields = [built.test_case, built.metadata, built.golden_id]
            # The callbacks read the fields being filled in: this thread holds the (re-entrant) assembly lock.
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback(self)
        except Exception as exc:  # noqa: BLE001 - a bug or an exotic node must not reach the app or the session
            self._fields = None
            self._failed = True
            logger.exception("contextjudge: could not turn a llama_index %s into a test case",
                             getattr(record, "kind", "call"))
            raise CaptureError("contextjudge could not assemble this captured llama_index call (logged).") from exc
        finally:
            self._record = None
            self._callbacks = []
        self._ready = True

    # ------------------------------------------------------------------------------------------ fields
    @property  # type: ignore[override]
    def case_id(self) -> str:
        if self._case_id is None:
            with _ASSEMBLY_LOCK:
                if self._case_id is None:
                    self._case_id = new_case_id()
        return self._case_id

    @case_id.setter
    def case_id(self, value: str) -> None:
        self._case_id = value

    @property  # type: ignore[override]
    def test_case(self) -> LLMTestCase:
        return self._assembled()[0]

    @test_case.setter
    def test_case(self, value: LLMTestCase) -> None:
        self._assembled()[0] = value

    @property  # type: ignore[override]
    def metadata(self) -> dict[str, Any]:
        return self._assembled()[1]

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._assembled()[1] = value

    @property  # type: ignore[override]
    def golden_id(self) -> str | None:
        return self._assembled()[2]

    @golden_id.setter
    def golden_id(self, value: str | None) -> None:
        self._assembled()[2] = value

    def __repr__(self) -> str:
        if not self.assemble():
            return f"LazyCase(case_id={self.case_id!r}, not assembled: capture failed)"
        return CapturedCase.__repr__(self)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, CapturedCase) or not self.assemble():
            return False
        if isinstance(other, LazyCase) and not other.assemble():
            return False
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(CapturedCase))

    __hash__ = None  # type: ignore[assignment] - like CapturedCase: mutable, compared by value

    def __reduce__(self) -> Any:
        return CapturedCase, tuple(getattr(self, f.name) for f in dataclasses.fields(CapturedCase))

"""``TraceCollector``: spans in (from the receiver, a file or Phoenix), cases out to a capture session.

The window (``_window.TraceWindow``) holds spans by trace; the ``contextjudge-traces`` thread takes the traces that
are whole every ``settle`` seconds, reads their cases (``_cases.cases_of_trace``) and submits them to the session:
mode "worker" writes them with a queue row each for ``contextjudge worker`` (sampling, budgets and retention as for
any capture), mode "background" scores them here with the session's judge. The thread never raises: a trace that
cannot be read is counted (``traces_failed``) and logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from ._cases import cases_of_trace
from ._spans import Span
from ._window import OpenTrace, TraceWindow

__all__ = ["TraceCollector"]

logger = logging.getLogger("contextjudge")


class TraceCollector:
    """Assembles cases from spans and hands them to ``session`` (a ``CaptureSession``, or anything with
    ``submit(case)``)."""

    def __init__(self, session: Any, *, settle: float = 0.3, window: float = 30.0, max_traces: int = 10_000,
                 max_spans: int = 2_000, source: str = "otlp", background: bool = True) -> None:
        self.session = session
        self.source = source
        self.window = TraceWindow(settle=settle, window=window, max_traces=max_traces, max_spans=max_spans)
        self._lock = threading.Lock()
        self._counts = {"traces": 0, "cases": 0, "unknown_spans": 0, "traces_without_retrieval": 0,
                        "traces_failed": 0}
        self.on_cases: list[Any] = []  # callables given each trace's cases (tests, Phoenix write-back)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="contextjudge-traces", daemon=True)
            self._thread.start()

    @property
    def counts(self) -> dict[str, int]:
        """spans, traces, cases, unknown_spans, traces_without_retrieval, traces_failed, late (spans for a trace
        already assembled), evicted (traces assembled early to stay within ``max_traces``), expired (traces whose
        root never came), spans_dropped (past ``max_spans`` in one trace), open (traces held now)."""
        with self._lock:
            out = dict(self._counts)
        out.update(self.window.counts)
        out["open"] = len(self.window)
        return out

    def add(self, spans: Iterable[Span]) -> None:
        """Hold spans until their traces are whole."""
        self.window.add(spans)

    def assemble_due(self, *, everything: bool = False) -> int:
        """Read and submit the cases of the traces that are whole now (all with ``everything``); how many cases."""
        n = 0
        for trace in self.window.due(everything=everything):
            n += self._assemble(trace)
        return n

    def _assemble(self, trace: OpenTrace) -> int:
        try:
            cases, unknown = cases_of_trace(trace.spans, source=self.source)
        except Exception:  # noqa: BLE001 - one odd trace never stops the others
            logger.exception("contextjudge: could not read the cases of trace %s", trace.trace_id)
            with self._lock:
                self._counts["traces_failed"] += 1
            return 0
        with self._lock:
            self._counts["traces"] += 1
            self._counts["cases"] += len(cases)
            self._counts["unknown_spans"] += unknown
            if not cases:
                self._counts["traces_without_retrieval"] += 1
        for case in cases:
            self.session.submit(case)
        for listener in self.on_cases:
            try:
                listener(cases)
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: a trace listener failed")
        return len(cases)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.window.next_due())
            self._wake.clear()
            try:
                self.assemble_due()
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: trace assembly failed")

    def flush(self, timeout: float | None = None) -> bool:
        """Assemble every open trace now, and wait for the session to take its cases."""
        self.assemble_due(everything=True)
        flush = getattr(self.session, "flush", None)
        return bool(flush(timeout)) if flush is not None else True

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the thread and assemble what is left (the session is the caller's to close)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.assemble_due(everything=True)

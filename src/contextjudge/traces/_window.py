"""The open traces: spans held by trace until the trace is whole, within a bounded window and memory.

A trace is taken as whole ``settle`` seconds after its root span (one with no parent) arrived, or, for a trace whose
root never comes (an app killed mid-request, a root exported by another service), ``window`` seconds after its last
span. At most ``max_traces`` traces are open at once (the oldest is assembled early when a new one would pass it,
counted as ``evicted``) and at most ``max_spans`` spans are held per trace (the rest dropped and counted). A span
that arrives for a trace already assembled (within the last ``max_traces`` of them) is counted as ``late`` and
dropped: its trace's cases are already on their way.

Thread-safe: ``add`` is called from the receiver's request threads, ``due`` from its assembly thread.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._spans import Span

__all__ = ["OpenTrace", "TraceWindow"]


@dataclass
class OpenTrace:
    """One trace's spans so far."""

    trace_id: str
    spans: list[Span] = field(default_factory=list)
    first_seen: float = 0.0
    last_seen: float = 0.0
    root_seen: float | None = None  # when a span with no parent arrived
    dropped: int = 0


class TraceWindow:
    """Spans grouped by trace until each trace is whole; see the module's docstring."""

    def __init__(self, *, settle: float = 0.3, window: float = 30.0, max_traces: int = 10_000,
                 max_spans: int = 2_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.settle = settle
        self.window = window
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.clock = clock
        self._open: collections.OrderedDict[str, OpenTrace] = collections.OrderedDict()  # oldest first
        self._done: collections.OrderedDict[str, None] = collections.OrderedDict()  # recently assembled ids
        self._evicted: list[OpenTrace] = []
        self._lock = threading.Lock()
        self.counts = {"spans": 0, "late": 0, "evicted": 0, "spans_dropped": 0, "expired": 0}

    def __len__(self) -> int:
        """How many traces are open."""
        with self._lock:
            return len(self._open)

    def add(self, spans: Iterable[Span]) -> None:
        """Hold ``spans`` in their traces."""
        now = self.clock()
        with self._lock:
            for s in spans:
                self.counts["spans"] += 1
                if s.trace_id in self._done:
                    self.counts["late"] += 1
                    continue
                t = self._open.get(s.trace_id)
                if t is None:
                    t = self._open[s.trace_id] = OpenTrace(s.trace_id, first_seen=now)
                    if len(self._open) > self.max_traces:
                        _, oldest = self._open.popitem(last=False)
                        self._finish(oldest)
                        self._evicted.append(oldest)
                        self.counts["evicted"] += 1
                t.last_seen = now
                if len(t.spans) >= self.max_spans:
                    t.dropped += 1
                    self.counts["spans_dropped"] += 1
                    continue
                t.spans.append(s)
                if s.parent_id is None and t.root_seen is None:
                    t.root_seen = now

    def _finish(self, t: OpenTrace) -> None:
        self._done[t.trace_id] = None
        while len(self._done) > self.max_traces:
            self._done.popitem(last=False)

    def due(self, *, everything: bool = False) -> list[OpenTrace]:
        """The traces that are whole now (all of them with ``everything``), taken out of the window."""
        now = self.clock()
        with self._lock:
            out, self._evicted = self._evicted, []
            for tid, t in list(self._open.items()):
                whole = t.root_seen is not None and now - t.root_seen >= self.settle
                expired = now - t.last_seen >= self.window
                if everything or whole or expired:
                    del self._open[tid]
                    self._finish(t)
                    if expired and not whole and not everything:
                        self.counts["expired"] += 1
                    out.append(t)
            return out

    def next_due(self) -> float:
        """Seconds until the next trace may be due (at most ``settle``)."""
        return self.settle if self.settle > 0 else 0.05

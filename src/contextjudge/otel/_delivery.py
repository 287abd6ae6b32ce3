"""What the span exporters an ``OTelExporter`` built delivered (``_Counting``), so a flush can say what did not reach
the collector."""

from __future__ import annotations

import threading
from typing import Any


class _Counting:
    """A span exporter that hands spans to another and counts what it delivered, failed to deliver, and is still
    sending (so a flush can say what did not reach the collector)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.delivered = 0
        self.failed = 0
        self.pending = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

        n = len(spans)
        with self._lock:
            self.pending += n
        ok = False
        try:
            result = self.inner.export(spans)
            ok = result == SpanExportResult.SUCCESS
            if not ok:
                self.last_error = f"the exporter returned {getattr(result, 'name', result)}"
            return result
        except Exception as exc:  # noqa: BLE001
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return SpanExportResult.FAILURE
        finally:
            with self._lock:
                self.pending -= n
                if ok:
                    self.delivered += n
                else:
                    self.failed += n

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        flush = getattr(self.inner, "force_flush", None)
        return bool(flush(timeout_millis)) if callable(flush) else True

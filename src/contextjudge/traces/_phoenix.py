"""A running Phoenix as a source of spans and a place for scores: its REST API (``/v1``), with the standard library's
HTTP client (no Phoenix package needed on contextjudge's side).

``PhoenixSource.spans()`` pages through ``GET /v1/projects/{project}/spans`` (each page read as a Phoenix span export,
``_spans.from_phoenix``); ``annotate(case, result)`` writes one metric's score on the case's retriever span with
``POST /v1/span_annotations`` (annotator kind ``LLM``, or ``CODE`` for a score that no model judged; the result's
label is ``pass`` / ``fail`` and its explanation the reason; the identifier ``contextjudge`` makes a second run update
the annotation rather than add one). Phoenix shows them on the span, under its annotations.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from ..cases.provenance import otel_of
from ..errors import ConfigurationError
from ._spans import Span, from_phoenix

__all__ = ["PhoenixSource"]

logger = logging.getLogger("contextjudge")


class PhoenixSource:
    """One Phoenix server (``url``, e.g. ``http://127.0.0.1:6006``) and project."""

    def __init__(self, url: str, *, project: str = "default", api_key: str | None = None, page: int = 1000,
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.project = project
        self.api_key = api_key
        self.page = page
        self.timeout = timeout
        self.counts = {"annotations": 0, "annotations_failed": 0}

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ConfigurationError(f"Phoenix at {self.url} answered {exc.code} to {method} {path}: {detail}") \
                from None
        except (urllib.error.URLError, OSError) as exc:
            raise ConfigurationError(f"cannot reach Phoenix at {self.url} ({exc}); is it running? "
                                     "(`phoenix serve`, or --phoenix URL)") from None
        return json.loads(text) if text else None

    def spans(self, *, start_time: str | None = None) -> Iterator[list[Span]]:
        """The project's spans, a page at a time (oldest pages last, as Phoenix returns them)."""
        cursor = None
        project = urllib.parse.quote(self.project, safe="")
        while True:
            query = {"limit": str(self.page)}
            if cursor:
                query["cursor"] = cursor
            if start_time:
                query["start_time"] = start_time
            doc = self._request("GET", f"/v1/projects/{project}/spans?{urllib.parse.urlencode(query)}")
            records = (doc or {}).get("data") or []
            yield from_phoenix(records)
            cursor = (doc or {}).get("next_cursor")
            if not cursor or not records:
                return

    def annotate(self, case: Any, result: Any) -> None:
        """Write ``result`` (a ``MetricResult``) on the retriever span ``case`` came from; failures are logged and
        counted, never raised (a scoring run is not stopped by Phoenix)."""
        where = otel_of(getattr(case, "test_case", case)) or {}
        span_id = where.get("retriever_span_id") or where.get("span_id")
        if not span_id or result.score is None:
            return
        model = str(result.evaluation_model or "")
        body = {"data": [{
            "span_id": span_id, "name": result.name, "identifier": "contextjudge",
            "annotator_kind": "CODE" if model in ("", "no-judge") else "LLM",
            "result": {"score": float(result.score), "label": "pass" if result.success else "fail",
                       "explanation": (result.reason or "")[:4000]},
            "metadata": {"judge": model, "threshold": result.threshold, "source": "contextjudge"},
        }]}
        try:
            self._request("POST", "/v1/span_annotations?sync=true", body)
            self.counts["annotations"] += 1
        except ConfigurationError as exc:
            self.counts["annotations_failed"] += 1
            logger.warning("contextjudge: could not write a score to Phoenix: %s", exc)

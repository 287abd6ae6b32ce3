"""The contract of capture: what an integration hands a session (``CapturedCase``) and what it gets back.

An integration builds ``CapturedCase`` objects; a case built later (off the request path) implements the lazy
assembly hook (``assembled``, ``assemble()``, ``when_assembled()``). Results go back to the framework with the one
payload of ``result_event``. ``AppAdapter`` is what an integration offers ``contextjudge eval --app``, and
``GoldenFailure`` what it returns for a golden whose app call raised.

What a session knows of a case it holds (its position, whether it is scored, stored or sampled) is kept on the case
object under the ``marks`` names below, never in sets of ``id()``s: Python reuses the address of a freed object.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._result import MetricResult
from ..cases.goldens import Goldens
from ..cases.identity import GOLDEN_ID_KEY, new_case_id
from ..cases.provenance import APP_ERROR_KEY, GOLDEN_INDEX_KEY
from ..cases.testcase import ConversationalTestCase, LLMTestCase

__all__ = ["AppAdapter", "CapturedCase", "GoldenFailure", "Mode", "ResultCallback", "default_metrics", "describe_seen",
           "mark", "marked", "no_retrieval_message", "result_event"]

Mode = Literal["background", "deferred", "off", "worker"]

# what a session keeps on each case it holds (on the case, never by id(), which Python reuses)
POSITION = "_contextjudge_position"
DONE = "_contextjudge_scored"
STORED = "_contextjudge_stored"
SAMPLED = "_contextjudge_sampled"  # the sampling's decision: True, False (left out), absent (not decided yet)


def marked(case: CapturedCase, mark_name: str, default: Any = None) -> Any:
    """The session's mark ``mark_name`` on ``case`` (``DONE``, ``STORED``, ``SAMPLED``, ``POSITION``)."""
    return case.__dict__.get(mark_name, default)


def mark(case: CapturedCase, mark_name: str, value: Any = True) -> None:
    """Set the session's mark ``mark_name`` on ``case``."""
    case.__dict__[mark_name] = value


@dataclass
class CapturedCase:
    """A test case assembled from a framework run, with where it came from.

    ``root_run_id`` is the id of the framework's own record the case came from (a LangChain root run, a LlamaIndex
    query span); result events carry it as ``origin_id``.
    """

    test_case: LLMTestCase | ConversationalTestCase
    source: str = ""
    case_id: str = field(default_factory=new_case_id)
    root_run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    results: list[MetricResult] = field(default_factory=list)
    golden_id: str | None = None
    captured_at: float = field(default_factory=time.time)

    # The lazy-assembly hook: a case whose test case is built later (off the request path) says so here.
    @property
    def assembled(self) -> bool:
        """Whether the test case exists yet (successfully or not); always True for a plain ``CapturedCase``."""
        return True

    def assemble(self) -> bool:
        """Build the test case now if it is built lazily; False when that failed (the session then drops it)."""
        return True

    def when_assembled(self, callback: Callable[[CapturedCase], Any]) -> None:
        """Call ``callback(self)`` once the test case exists: now for a plain case, at assembly for a lazy one
        (a session matches goldens this way, before anyone reads the test case)."""
        callback(self)


ResultCallback = Callable[[CapturedCase, MetricResult], None]


def result_event(case: CapturedCase, result: MetricResult, *, run_id: str | None = None) -> dict[str, Any]:
    """The one payload a scored result is reported with, in every framework.

    ``origin_id`` is the framework record the case came from (LangChain's root run id, LlamaIndex's query span
    id).

    Two shapes of case are scored: one retrieval (an ``LLMTestCase``: ``input`` is its question) and a whole
    conversation (a ``ConversationalTestCase``: ``conversation`` is True, ``input`` is None and ``source`` names the
    conversation, ``thread:<id>`` in LangChain).
    """
    tc = case.test_case
    return {"metric": result.name, "score": result.score, "success": result.success, "threshold": result.threshold,
            "reason": result.reason, "error": result.error, "error_type": result.error_type,
            "evaluation_model": result.evaluation_model, "case_id": case.case_id, "origin_id": case.root_run_id,
            "source": case.source, "golden_id": case.golden_id, "run_id": run_id,
            "input": getattr(tc, "input", None), "conversation": isinstance(tc, ConversationalTestCase)}


def describe_seen(seen: dict[str, dict[str, int]]) -> str:
    """What the app's calls ran, by kind, in words (``{"tools": {"search": 2}}`` -> ``"tools: search (2)"``)."""
    parts = []
    for kind, bucket in seen.items():
        if set(bucket) == {""}:
            parts.append(f"{kind}: {bucket['']}")
        elif bucket:
            parts.append(f"{kind}: " + ", ".join(f"{k} ({n})" if n > 1 else k for k, n in bucket.items()))
    return "; ".join(parts) or "nothing but the call itself"


def no_retrieval_message(seen: dict[str, Any] | None, shapes: str) -> str:
    """What a golden's error case says when the app's run on it retrieved nothing capture sees (``contextjudge
    eval``): what the run ran (``seen``, as ``CaptureSession.note_root`` takes it) and the shapes captured."""
    buckets: dict[str, dict[str, int]] = {}
    for kind, value in (seen or {}).items():
        if isinstance(value, int):
            buckets[kind] = {"": value}
        else:
            items = [value] if isinstance(value, str) else list(value or ())
            buckets[kind] = {str(v): 1 for v in items}
    return (f"the app's run on this golden retrieved nothing that capture sees (it ran {describe_seen(buckets)}). "
            f"Captured: {shapes}. See 'What is captured' in the README (README.md#what-is-captured).")


def default_metrics(model: Any = None, *, expected_output: bool | None = None, goldens: Any = ()) -> list[Any]:
    """The metrics capture uses when none are given: ``metrics.default_metrics`` (the one default set) for what the
    goldens carry. With ``expected_output=False`` (no goldens), only those that need nothing but the app's run."""
    from ..metrics import default_metrics as defaults  # noqa: PLC0415

    return defaults(model, goldens=goldens, expected_output=expected_output)


@dataclass
class GoldenFailure:
    """A golden whose app call raised in ``contextjudge eval``: it becomes an error case, counted and gated."""

    golden: Any
    index: int
    error: BaseException

    def test_case(self) -> LLMTestCase:
        """The error case: the golden's input and expected output, no retrieval, and the app's error under
        ``provenance.APP_ERROR_KEY`` (every metric of it is then an error result that says what happened)."""
        g = self.golden
        meta: dict[str, Any] = {APP_ERROR_KEY: {"type": type(self.error).__name__,
                                                "message": str(self.error)[:2000]}, GOLDEN_INDEX_KEY: self.index}
        if getattr(g, "id", None):
            meta[GOLDEN_ID_KEY] = g.id
        return LLMTestCase(input=g.input, expected_output=g.expected_output, additional_metadata=meta,
                           id=f"golden-{g.id}" if getattr(g, "id", None) else None)


class AppAdapter:
    """What an integration offers ``contextjudge eval --app``: run goldens through an app with capture attached.

    Integrations register an instance under the entry-point group ``contextjudge.apps``.
    """

    name = "app"
    accepts = "apps"
    """What this adapter runs, in words, for the error shown when no adapter matches an object."""

    def matches(self, obj: Any) -> bool:  # pragma: no cover - interface
        """Whether this adapter runs ``obj``."""
        raise NotImplementedError

    def collect(self, obj: Any, goldens: Goldens, *, concurrency: int = 4,
                progress: Callable[[], Any] | None = None) -> list[CapturedCase | GoldenFailure]:
        """Run every golden's input through ``obj`` with capture in mode "off"; return the captured cases, in the
        goldens' order, and a ``GoldenFailure`` for each golden whose app call raised (never only a log line).
        ``progress()`` is called once as each golden's app call finishes (successfully or not)."""
        raise NotImplementedError  # pragma: no cover - interface

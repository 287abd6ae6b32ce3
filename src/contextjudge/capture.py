"""The public spelling of capture's framework-agnostic half (it lives in ``contextjudge.engine.capture``).

Integrations and users import ``CaptureSession``, ``CapturedCase``, ``AppAdapter``, ``result_event`` and
``in_judge_call`` from here. ``CaptureScorer`` is the session's name before 0.2, kept for one release.
"""

from .engine.capture import (
    AppAdapter,
    CapturedCase,
    CaptureScorer,
    CaptureSession,
    GoldenFailure,
    Mode,
    default_metrics,
    in_judge_call,
    result_event,
)

__all__ = ["AppAdapter", "CaptureScorer", "CaptureSession", "CapturedCase", "GoldenFailure", "Mode", "default_metrics",
           "in_judge_call", "result_event"]

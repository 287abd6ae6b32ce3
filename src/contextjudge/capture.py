"""The public spelling of capture's framework-agnostic half (it lives in ``contextjudge.engine.capture``).

Integrations and users import ``CaptureSession``, ``CapturedCase``, ``AppAdapter``, ``result_event`` and
``in_judge_call`` from here, and, for production capture, ``Sampling`` with the metadata keys the integrations record
on a ``CapturedCase`` for its filters and key (``THREAD_KEY``, ``RETRIEVER_NAME_KEY``, ``CHAIN_KEY``, ``TAGS_KEY``,
``RUN_METADATA_KEY``), and ``IdleConversations``, which submits an integration's open conversations once they go
idle (``CaptureSession(conversation_idle=...)``). ``CaptureScorer`` is the session's name before 0.2, kept for one release.
"""

from .engine.capture import (
    AppAdapter,
    CapturedCase,
    CaptureScorer,
    CaptureSession,
    GoldenFailure,
    IdleConversations,
    Mode,
    default_metrics,
    in_judge_call,
    no_retrieval_message,
    result_event,
)
from .engine.sampling import CHAIN_KEY, RETRIEVER_NAME_KEY, RUN_METADATA_KEY, TAGS_KEY, THREAD_KEY, Sampling

__all__ = ["CHAIN_KEY", "RETRIEVER_NAME_KEY", "RUN_METADATA_KEY", "TAGS_KEY", "THREAD_KEY", "AppAdapter",
           "CaptureScorer", "CaptureSession", "CapturedCase", "GoldenFailure", "IdleConversations", "Mode", "Sampling", "default_metrics",
           "in_judge_call", "no_retrieval_message", "result_event"]

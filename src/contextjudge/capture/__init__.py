"""Capture, the framework-agnostic half: what integrations hand over, and the session that scores or keeps it.

Integrations and users import from here: ``CapturedCase`` (with its lazy-assembly hook) and ``result_event`` (the
one payload of a result event), ``CaptureSession`` (what both integrations' ``instrument()`` return), ``AppAdapter``
and ``GoldenFailure`` (``contextjudge eval --app``), ``in_judge_call``, ``IdleConversations`` (submits an
integration's open conversations once they go idle, ``CaptureSession(conversation_idle=...)``), and, for production
capture, ``Sampling`` with the metadata keys the integrations record on a ``CapturedCase`` for its filters and key
(``THREAD_KEY``, ``RETRIEVER_NAME_KEY``, ``CHAIN_KEY``, ``TAGS_KEY``, ``RUN_METADATA_KEY``; they live in
``contextjudge.cases.provenance`` with every other key of a captured case).

Inside: ``_case`` (the contract), ``_session`` (the session: intake, sampling, goldens, flush, close),
``_kept`` (the cases held in memory and the counters), ``_scoring`` (one case scored in the run), one object per
mode (``_background``: the scoring task on the shared loop; ``_keep``: modes "deferred" and "off"; ``_writer``: mode
"worker"'s writer thread), all with the interface of ``_mode.CaptureMode``; ``_sampling``, ``_conversations`` (idle
conversations), ``_roots`` (no silent nothing) and ``_exit`` (sessions closed at interpreter exit).
"""

from ..cases.provenance import CHAIN_KEY, RETRIEVER_NAME_KEY, RUN_METADATA_KEY, TAGS_KEY, THREAD_KEY
from ..judges import JUDGE_TAG, in_judge_call
from ._case import (
    AppAdapter,
    CapturedCase,
    GoldenFailure,
    Mode,
    default_metrics,
    no_retrieval_message,
    result_event,
)
from ._conversations import IdleConversations
from ._goldens import GoldenCases, golden_cases, retriever_names  # for `contextjudge eval --app`, not in __all__
from ._sampling import Sampling
from ._seen import prompt_snippets, reader_of  # the answer's LLM call, for the integrations and traces
from ._session import CaptureSession
from ._tools import search_result, tool_output_items

__all__ = ["CHAIN_KEY", "JUDGE_TAG", "RETRIEVER_NAME_KEY", "RUN_METADATA_KEY", "TAGS_KEY", "THREAD_KEY", "AppAdapter",
           "CaptureSession", "CapturedCase", "GoldenFailure", "IdleConversations", "Mode", "Sampling",
           "default_metrics", "in_judge_call", "no_retrieval_message", "result_event", "search_result", "tool_output_items"]

"""Sampling of captured cases: which cases of production traffic are judged.

CONTRACT (issue 17; the lead wrote the names, the capture-core helper fills them in):

- ``Sampling(rate=1.0, key=None, retrievers=None, chains=None, tags=None, metadata=None)`` (frozen dataclass), and
  ``Sampling.sampled(case) -> bool``: filters first (retriever name in ``retrievers``; chain name in ``chains``;
  any of ``tags``; every ``metadata`` item equal), then a deterministic draw: a stable hash of the case's key below
  ``rate``. The key: ``key(case)`` when given (a user function; None falls through), else the conversation
  (``THREAD_KEY`` in the case's metadata, so a conversation is judged whole or not at all), else the normalised
  input (so reruns pick the same cases).
- What the integrations record on ``CapturedCase.metadata`` for the filters and the key (names below).
"""

from __future__ import annotations

__all__ = ["CHAIN_KEY", "RETRIEVER_NAME_KEY", "RUN_METADATA_KEY", "TAGS_KEY", "THREAD_KEY"]

# keys of CapturedCase.metadata, written by the integrations (LangChain, LlamaIndex, @observe) at capture
THREAD_KEY = "thread_id"          # the conversation's id (thread_id, session_id or conversation_id), when there is one
RETRIEVER_NAME_KEY = "retriever"  # the retriever's name (LangChain run name / class; LlamaIndex retriever class)
CHAIN_KEY = "chain"               # the root chain / graph / engine's name
TAGS_KEY = "tags"                 # list[str]: the call's tags (LangChain config tags; LlamaIndex instrument tags' keys)
RUN_METADATA_KEY = "run_metadata"  # dict: the call's metadata (LangChain config metadata; LlamaIndex instrument tags)

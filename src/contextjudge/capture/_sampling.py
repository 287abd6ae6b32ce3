"""Sampling of captured cases: which cases of production traffic are judged.

    Sampling(rate=0.1)                                    # 10% of conversations (or of distinct inputs)
    Sampling(rate=0.5, chains=["support_bot"], tags=["prod"], metadata={"tier": "free"})
    Sampling(rate=0.2, key=lambda case: case.metadata.get("user_id"))

- ``Sampling(rate=1.0, key=None, retrievers=None, chains=None, tags=None, metadata=None)`` (frozen dataclass), and
  ``Sampling.sampled(case) -> bool``: filters first (retriever name in ``retrievers``; chain name in ``chains``;
  any of ``tags``; every ``metadata`` item equal), then a deterministic draw: a stable hash of the case's key below
  ``rate``. The key: ``key(case)`` when given (a user function; None falls through), else the conversation
  (``THREAD_KEY`` in the case's metadata, so a conversation is judged whole or not at all), else the normalised
  input (so reruns pick the same cases).
- The filters and the key read what the integrations record on ``CapturedCase.metadata`` (``THREAD_KEY``,
  ``RETRIEVER_NAME_KEY``, ``CHAIN_KEY``, ``TAGS_KEY``, ``RUN_METADATA_KEY``), which live in ``cases.provenance``.

The draw is a BLAKE2b hash of the key, never Python's ``hash()`` (salted per process), so every process of an app,
and every rerun, makes the same decision for the same key.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..cases.goldens import normalize_input
from ..cases.provenance import CHAIN_KEY, RETRIEVER_NAME_KEY, RUN_METADATA_KEY, TAGS_KEY, THREAD_KEY
from ..errors import ConfigurationError

__all__ = ["Decision", "Sampling", "draw", "input_key"]

Decision = Literal["sampled", "unsampled", "filtered"]
"""What ``Sampling.decide`` says of a case: judged, not drawn, or left out by a filter."""

_SCALE = float(1 << 64)


def draw(key: str) -> float:
    """The key's place in [0, 1): the same on every machine, process and run (BLAKE2b, 64 bits)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def _names(value: Any) -> list[str]:
    """One name or several (a case that went through two retrievers) as a list of text."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [str(k) for k in value]
    if isinstance(value, Collection):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def _any_in(wanted: Collection[str], value: Any) -> bool:
    """Whether any name of ``value`` is one of ``wanted``."""
    return any(name in wanted for name in _names(value))


def _frozen(value: Any, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    names = frozenset(_names(value))
    if not names:
        raise ConfigurationError(f"Sampling({what}=...) is empty, so it would leave out every case; pass None to "
                                 f"filter nothing by {what}.")
    return names


@dataclass(frozen=True)
class Sampling:
    """Which captured cases are judged: the filters, then a deterministic draw at ``rate``.

    ``rate``: the share of keys judged (0 to 1). ``key(case) -> str | None``: the sampling key (None falls through
    to the conversation, then the normalised input). ``retrievers``, ``chains``: names of which one must match;
    ``tags``: a case with any of them passes; ``metadata``: items the call's metadata must all have (the integrations'
    ``RUN_METADATA_KEY``, else the captured case's own metadata).
    """

    rate: float = 1.0
    key: Callable[[Any], Any] | None = None
    retrievers: Collection[str] | None = None
    chains: Collection[str] | None = None
    tags: Collection[str] | None = None
    metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        rate = self.rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or math.isnan(rate) or not 0 <= rate <= 1:
            raise ConfigurationError(f"sample_rate must be a number from 0 to 1 (0.1 judges one case in ten), not "
                                     f"{rate!r}.")
        if self.key is not None and not callable(self.key):
            raise ConfigurationError("Sampling(key=...) must be a function of the captured case that returns its "
                                     f"sampling key (e.g. lambda case: case.metadata['user_id']), not {self.key!r}.")
        if self.metadata is not None and not isinstance(self.metadata, Mapping):
            raise ConfigurationError(f"Sampling(metadata=...) must be a mapping of items every judged case has, not "
                                     f"{self.metadata!r}.")
        object.__setattr__(self, "rate", float(rate))
        for what in ("retrievers", "chains", "tags"):
            object.__setattr__(self, what, _frozen(getattr(self, what), what))

    @classmethod
    def of(cls, sample_rate: float | None = None, sampling: Sampling | None = None) -> Sampling | None:
        """What a capture entry point's ``sample_rate`` / ``sampling`` arguments mean together (None: every case)."""
        if sampling is not None and not isinstance(sampling, Sampling):
            raise ConfigurationError(f"sampling= takes a contextjudge Sampling(...), not {type(sampling).__name__}.")
        if sample_rate is None:
            return sampling
        if sampling is not None and sampling.rate != float(sample_rate):
            raise ConfigurationError(f"sample_rate={sample_rate!r} and sampling=Sampling(rate={sampling.rate!r}) "
                                     "disagree: give the rate once (in Sampling, or as sample_rate).")
        return sampling if sampling is not None else cls(rate=sample_rate)

    @property
    def filters(self) -> bool:
        """Whether any filter is set."""
        return any(v is not None for v in (self.retrievers, self.chains, self.tags, self.metadata))

    @property
    def everything(self) -> bool:
        """True when every case is judged (rate 1, no filter): a session then skips the decision altogether."""
        return self.rate >= 1.0 and not self.filters

    # ------------------------------------------------------------------------------------------ the decision
    def sampled(self, case: Any) -> bool:
        """Whether ``case`` (a ``CapturedCase``) is judged."""
        return self.decide(case) == "sampled"

    def decide(self, case: Any) -> Decision:
        """``"filtered"`` when a filter leaves the case out, else ``"sampled"`` or ``"unsampled"`` by the draw."""
        if not self.passes(case):
            return "filtered"
        if self.rate >= 1.0:
            return "sampled"
        if self.rate <= 0.0:
            return "unsampled"
        return "sampled" if draw(self.key_of(case)) < self.rate else "unsampled"

    def passes(self, case: Any) -> bool:
        """Whether the filters let ``case`` through (no filter: always)."""
        if not self.filters:
            return True
        meta = getattr(case, "metadata", None) or {}
        if self.retrievers is not None and not _any_in(self.retrievers, meta.get(RETRIEVER_NAME_KEY)):
            return False
        if self.chains is not None and not _any_in(self.chains, meta.get(CHAIN_KEY)):
            return False
        if self.tags is not None and not _any_in(self.tags, meta.get(TAGS_KEY)):
            return False
        if self.metadata is not None:
            run_meta = meta.get(RUN_METADATA_KEY)
            run_meta = run_meta if isinstance(run_meta, Mapping) else {}
            for k, want in self.metadata.items():
                have = run_meta[k] if k in run_meta else meta.get(k, _MISSING)
                if have is _MISSING or have != want:
                    return False
        return True

    def key_of(self, case: Any) -> str:
        """The sampling key of ``case``: the user's key, else ``thread:<conversation id>``, else ``input:<normalised
        input>`` (prefixed, so a thread id never collides with an input)."""
        if self.key is not None:
            own = self.key(case)
            if own is not None:
                return f"key:{own}"
        meta = getattr(case, "metadata", None) or {}
        thread = meta.get(THREAD_KEY)
        if thread is not None and thread != "":
            return f"thread:{thread}"
        return f"input:{input_key(getattr(case, 'test_case', None))}"


_MISSING: Any = object()


def input_key(test_case: Any) -> str:
    """The normalised input of a test case (``goldens.normalize_input``): a conversation's first user turn."""
    text = getattr(test_case, "input", None)
    if text is None:
        for turn in getattr(test_case, "turns", None) or []:
            if getattr(turn, "role", None) == "user":
                text = getattr(turn, "content", None)
                break
    return normalize_input(str(text or ""))

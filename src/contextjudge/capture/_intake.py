"""A session's intake: each case counted, its sampling decided once, and its goldens matched.

The sampling decides on the app's thread when it can without assembling the case (a plain case; its filters and
key are in its metadata), else at the case's assembly, off the request path; either way before any judging or store
write. The goldens are matched at assembly too, so nobody reads a lazy case's test case on the app's thread.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ..cases.identity import golden_id_of, match_golden
from ..cases.provenance import CHAIN_INPUT_KEY, ESCAPED_KEY
from ..cases.testcase import LLMTestCase, escape_unstorable_fields
from ._case import POSITION, SAMPLED, CapturedCase, mark, marked
from ._kept import KeptCases
from ._sampling import Sampling

__all__ = ["Intake"]

logger = logging.getLogger("contextjudge")


class Intake:
    """Counts the cases submitted, and decides which are judged (``sampling``) and which golden each matches."""

    def __init__(self, kept: KeptCases, sampling: Sampling | None, goldens: Any) -> None:
        self.kept = kept
        self.goldens = goldens
        # no decision to make when every case is judged: the app's thread does not even look at the case
        self._sampler = None if sampling is None or sampling.everything else sampling
        self._fallback: Sampling | None = None
        self._warned_escaped = False

    def take(self, case: CapturedCase) -> bool:
        """Count ``case`` and set its sampling and golden hooks; False when the sampling left it out already."""
        counts = self.kept.counts
        with self.kept.lock:
            counts.seen += 1
            position = counts.seen - 1
            if self._sampler is None:
                counts.sampled += 1
        mark(case, POSITION, position)
        case.when_assembled(self.escape)  # first: the sampling, goldens, judge and store see storable text
        if self._sampler is not None:
            if case.assembled:
                if not self.decide(case):
                    return False
            else:
                case.when_assembled(self.decide)  # at its assembly, before its goldens are matched
        case.when_assembled(self.apply_golden)  # a lazy case: at its assembly, off the request path
        return True

    def escape(self, case: CapturedCase) -> None:
        """Escape the characters no store or HTTP body takes (a lone surrogate such as an end user's JSON
        "\\udce9", NUL) in the case's text, so it is judged and stored like any other case instead of making the
        store refuse the batch it is written in; counted (``counters["escaped"]``) and named in the case's metadata
        (``provenance.ESCAPED_KEY``: the fields changed) and in the log."""
        tc = case.test_case
        if tc is None:
            return
        try:
            fields = escape_unstorable_fields(tc)
            if not fields:
                return
            meta = dict(tc.additional_metadata or {})
            meta[ESCAPED_KEY] = fields
            tc.additional_metadata = meta
        except Exception:  # noqa: BLE001 - the store escapes its rows anyway; capture never breaks the app
            logger.debug("contextjudge: could not escape a captured case's text", exc_info=True)
            return
        with self.kept.lock:
            self.kept.counts.escaped += 1
            first, self._warned_escaped = not self._warned_escaped, True
        logger.log(logging.WARNING if first else logging.DEBUG,
                   "contextjudge: captured case %s held characters no store takes (a lone surrogate such as an end "
                   "user's \\udce9, or NUL) in %s; they are escaped (\\udce9, \\u0000) and the case is kept "
                   "(session.counters['escaped'] counts such cases)", case.case_id, ", ".join(fields))

    def decide(self, case: CapturedCase) -> bool:
        """The sampling's decision on ``case``, counted and kept on the case (it is made once)."""
        sampler = self._sampler
        known = marked(case, SAMPLED)
        if sampler is None or known is not None:
            return known is not False
        try:
            verdict = sampler.decide(case)
        except Exception:  # noqa: BLE001 - a user's key function that fails: sample by the default key instead
            if self._fallback is None:
                logger.exception("contextjudge: the sampling key function failed; cases are sampled by their "
                                 "conversation or input instead (fix the key function)")
                self._fallback = dataclasses.replace(sampler, key=None)
            try:
                verdict = self._fallback.decide(case)
            except Exception:  # noqa: BLE001
                logger.exception("contextjudge: could not sample a captured case; it is judged")
                verdict = "sampled"
        counts = self.kept.counts
        with self.kept.lock:
            if verdict == "sampled":
                counts.sampled += 1
            elif verdict == "filtered":
                counts.filtered += 1
            else:
                counts.unsampled += 1
        mark(case, SAMPLED, verdict == "sampled")
        return verdict == "sampled"

    def apply_golden(self, case: CapturedCase) -> None:
        """Fill the case's expected outputs from the goldens (see ``contextjudge.identity.match_golden``)."""
        if not len(self.goldens) or marked(case, SAMPLED) is False:
            return
        gid = match_golden(self.goldens, case.test_case, golden_id=case.golden_id or _meta_golden(case),
                           fallback_input=case.metadata.get(CHAIN_INPUT_KEY))
        if gid is not None and case.golden_id is None and isinstance(case.test_case, LLMTestCase):
            case.golden_id = gid


def _meta_golden(case: CapturedCase) -> str | None:
    try:
        return golden_id_of(case.metadata)
    except Exception:  # noqa: BLE001
        return None

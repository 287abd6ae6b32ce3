"""``AnswerSizes``: what each judge's answers to each task really take, so a call whose whole answer cap has no room
may reserve, and be sent with, the size it will really use."""

from __future__ import annotations

import collections
import threading

from ._tokens import output_estimate

__all__ = ["ANSWER_SIZES", "AnswerSizes", "SIZED_AFTER", "SIZED_MARGIN", "SIZED_SLACK", "SIZED_WINDOW"]


# a call that cannot reserve its whole answer cap may reserve the size this judge's answers really take, once this
# many answers of the judge to the task were seen: the largest of the last SIZED_WINDOW (per judged item), times
# SIZED_MARGIN, plus SIZED_SLACK tokens
SIZED_AFTER = 8
SIZED_WINDOW = 64
SIZED_MARGIN = 1.25
SIZED_SLACK = 16


class AnswerSizes:
    """What each judge's calls to each task really take, per (judge identity, task), over the last ``SIZED_WINDOW``
    calls: the answer as a multiple of ``output_estimate`` (the figure per judged item, so a request of any size is
    sized from answers to requests of other sizes), and how far the billed prompt passed its estimate (a tokenizer
    not at hand, a provider's own format tokens, a schema the request's options do not show: the estimate counts the
    chat format and the schema it can read), both as a ratio and in tokens. Process-wide
    (``ANSWER_SIZES``), bounded."""

    def __init__(self, keys: int = 256) -> None:
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[tuple[str, str], collections.deque[tuple[float, float, int]]] = (
            collections.OrderedDict())
        self._keys = keys

    def observe(self, judge: str, task: str | None, items: int, output_tokens: int, input_estimate: int = 0,
                input_tokens: int = 0) -> None:
        """Count one complete answer (not one cut by its cap) of ``output_tokens`` to a request of ``items``, whose
        prompt was estimated at ``input_estimate`` tokens and billed as ``input_tokens``."""
        if output_tokens <= 0:
            return
        ratio = output_tokens / output_estimate(task, items)
        over = max(0, int(input_tokens) - int(input_estimate)) if input_tokens > 0 else 0
        in_ratio = (input_tokens / input_estimate) if input_tokens > 0 and input_estimate > 0 else 1.0
        key = (judge, str(task))
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = collections.deque(maxlen=SIZED_WINDOW)
                while len(self._seen) > self._keys:
                    self._seen.popitem(last=False)
            seen.append((ratio, in_ratio, over))

    def size(self, judge: str, task: str | None, items: int, input_estimate: int) -> tuple[int, int] | None:
        """(prompt tokens, answer tokens) to reserve for such a request whose prompt is estimated at
        ``input_estimate`` (None until ``SIZED_AFTER`` calls were seen): the largest answer seen, the prompt's
        estimate raised by the most it was passed (as a ratio or in tokens, whichever is more), each with a margin."""
        with self._lock:
            seen = self._seen.get((judge, str(task)))
            if seen is None or len(seen) < SIZED_AFTER:
                return None
            top = max(r for r, _, _ in seen)
            in_ratio = max(r for _, r, _ in seen)
            over = max(o for _, _, o in seen)
        prompt = max(input_estimate * in_ratio, input_estimate + over)
        prompt = int(input_estimate + (prompt - input_estimate) * SIZED_MARGIN + 0.999)
        return prompt, int(top * output_estimate(task, items) * SIZED_MARGIN + 0.999) + SIZED_SLACK


ANSWER_SIZES = AnswerSizes()

"""Near-duplicate questions dropped (``_Seen``): the same normalised question, 80% of words shared, or 75% of
character trigrams shared."""

from __future__ import annotations

from ...cases.goldens import normalize_input

_STOP_WORDS = ("what which when where who whom whose why how does did do is are was were the a an of to in on for "
               "and or with about from this that these those there their your you i me my can could would should "
               "will have has had be been it its at by as")
_STOP = frozenset(_STOP_WORDS.split())


def _trigrams(norm: str) -> set[str]:
    text = f" {norm} "
    return {text[k:k + 3] for k in range(len(text) - 2)}


class _Seen:
    """The questions kept so far, and the near-duplicate test against them: the same after normalising, 80% of
    words shared, or 75% of character trigrams shared (typos and reordered words). Only the kept questions sharing a
    content word with the new one are compared (an inverted index), so thousands of questions stay fast."""

    def __init__(self) -> None:
        self.kept: list[tuple[set[str], set[str]]] = []
        self.exact: set[str] = set()
        self.index: dict[str, list[int]] = {}

    def add_if_new(self, question: str) -> bool:
        norm = normalize_input(question)
        if norm in self.exact:
            return False
        words = set(norm.split())
        grams = _trigrams(norm)
        content = {w for w in words if w not in _STOP and len(w) > 2} or words
        candidates = {k for w in content for k in self.index.get(w, ())}
        for k in candidates:
            owords, ograms = self.kept[k]
            if words and owords and len(words & owords) / len(words | owords) >= 0.8:
                return False
            shared = len(grams & ograms)
            if shared / (len(grams) + len(ograms) - shared) >= 0.75:
                return False
        self.exact.add(norm)
        for w in content:
            self.index.setdefault(w, []).append(len(self.kept))
        self.kept.append((words, grams))
        return True

"""Lexical evidence for the embedded judge: content words, their overlap, and answer-string occurrence."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["answer_occurs", "content_tokens", "lead_phrase", "lead_tokens", "normalize", "specifics", "token_recall"]

# Function words carry no evidence of relevance. A short fixed list keeps the judge language-light and deterministic.
_STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves s t d ll m re ve y one many much get got may might must shall
us using use used like well also would
""".split())  # noqa: SIM905 - a word list reads best as words

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = frozenset({"yes", "no", "true", "false"})
# Where a node's lead phrase (what it is about: "Harvey Lawrence Pekar (October 8, 1939 - ...) was an ...") ends.
_LEAD_END = re.compile(r"\s(?:is|was|are|were|has|had|refers?|may refer)\s|[(,;:]|\s[-\u2013\u2014]\s")


def normalize_keep_apostrophes(text: str) -> str:
    """Lower case with accents removed, apostrophes and punctuation kept ("doesn't" stays one word)."""
    text = unicodedata.normalize("NFKD", text or "")
    return "".join(c for c in text if not unicodedata.combining(c)).lower()


@lru_cache(maxsize=100_000)
def normalize(text: str) -> str:
    """Lower case, accents and punctuation removed, single spaces."""
    return " ".join(_NON_WORD.sub(" ", normalize_keep_apostrophes(text)).replace("_", " ").split())


def _stem(tok: str) -> str:
    # Plural "s" only ("cars" -> "car"); real stemming would tie the judge to one language.
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
        return tok[:-1]
    return tok


@lru_cache(maxsize=100_000)
def content_tokens(text: str) -> frozenset[str]:
    """The content words of ``text`` (normalized, stop words dropped, plural s stripped)."""
    return frozenset(_stem(t) for t in normalize(text).split() if t not in _STOPWORDS and (len(t) > 1 or t.isdigit()))


def token_recall(needle: frozenset[str], haystack: frozenset[str]) -> float:
    """Share of ``needle``'s content words that occur in ``haystack`` (0 when ``needle`` has none)."""
    if not needle:
        return 0.0
    return len(needle & haystack) / len(needle)


def answer_occurs(answer: str | None, text: str, max_words: int = 10) -> bool:
    """True when a short answer string occurs in ``text`` as whole words (articles and punctuation ignored).

    Only short answers count (a long answer is a paraphrase, not a string to find), and yes/no answers never do.
    """
    if not answer:
        return False
    a = _ARTICLES.sub(" ", normalize(answer))
    a = " ".join(a.split())
    if not a or a in _YES_NO or len(a.split()) > max_words or (len(a) < 2 and not a.isdigit()):
        return False
    t = " " + normalize(text) + " "
    return f" {a} " in t or f" {a} " in " " + " ".join(_ARTICLES.sub(" ", t).split()) + " "


def lead_phrase(text: str) -> str:
    """A text's lead phrase: its subject, up to the first "is/was/..." or bracket or comma (encyclopedic and product
    text usually opens with what it is about). Empty when there is no such phrase within the first 100 characters."""
    head = text.strip()[:100]
    m = _LEAD_END.search(head)
    return head[: m.start()].strip() if m else ""


@lru_cache(maxsize=100_000)
def lead_tokens(text: str) -> frozenset[str]:
    """The content words of ``lead_phrase(text)``."""
    return content_tokens(lead_phrase(text))


_NUMBER_WORDS = {w: str(i) for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"))}
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_][\w'\-]*", re.UNICODE)


@lru_cache(maxsize=100_000)
def is_number(specific: str) -> bool:
    """Whether one of ``specifics``' items is a number (they are digits; names are words)."""
    return specific[:1].isdigit()


def specifics(text: str) -> frozenset[str]:
    """What a statement asserts that a topic match does not prove: its numbers (digits, or number words from two to
    twenty, as digits) and its names (capitalised words other than a sentence's first word, lower-cased).

    "Employees may carry over 5 days to January." -> {"5", "january"}. A node that shares the statement's topic but
    not these does not support it.
    """
    out: set[str] = {n.replace(",", "") for n in _NUMBER.findall(text or "")}
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text or ""):
        for k, m in enumerate(_WORD.finditer(sentence)):
            w = m.group(0)
            low = w.lower()
            if low in _NUMBER_WORDS and low != "one":  # "one" is as often a word ("one of", "on one charge")
                out.add(_NUMBER_WORDS[low])
            elif k > 0 and w[0].isupper() and low not in _STOPWORDS and len(w) > 1:
                out.add(normalize(w))
    return frozenset(out)


@lru_cache(maxsize=100_000)
def _mentions(text: str) -> frozenset[str]:
    """Every word and number of ``text`` (number words also as digits): what ``specifics_in`` looks things up in,
    once per text however many statements are checked against it."""
    have = set(normalize(text).split()) | {n.replace(",", "") for n in _NUMBER.findall(text)}
    return frozenset(have | {_NUMBER_WORDS[w] for w in have if w in _NUMBER_WORDS})


def specifics_in(needle: frozenset[str], text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(found, missing): which of ``needle`` (from ``specifics``) occur in ``text`` as words or numbers."""
    if not needle:
        return frozenset(), frozenset()
    have = _mentions(text)
    found = frozenset(x for x in needle if x in have or all(p in have for p in x.split()))
    return found, needle - found


_NEGATION = frozenset({"not", "no", "never", "cannot", "none", "nobody", "nothing", "neither", "nor", "without",
                       "nowhere"})


def _is_cue(w: str) -> bool:
    return w in _NEGATION or w.endswith("n't") or w.endswith("n\u2019t")


def negated_near(text: str, words: frozenset[str], span: int = 4) -> bool:
    """Whether ``text`` says no about what ``words`` (content words, as ``content_tokens`` gives them) state: a
    negation whose scope, the content words among the next ``span`` (it runs to its right: "may not work remotely"),
    is all in ``words``. "Not business class" does not deny a text that names only economy class.
    "No dog has ever run after its tail" does not negate "Germany went through its worst inflation", however long the
    sentence that holds both, nor does "Popeye (though not the various films)" negate Popeye, nor "No. Flights under six
    hours ..." the flights (the scope ends at punctuation); a number is never what a negation negates here."""
    for clause in _CLAUSE.split(normalize_keep_apostrophes(text)):
        toks = re.findall(r"[^\W_][\w'\u2019]*", clause)
        for k, w in enumerate(toks):
            if _is_cue(w):
                scope = [_stem(n) for n in toks[k + 1: k + 1 + span]
                         if n not in _STOPWORDS and not _is_cue(n) and not n[0].isdigit()]
                if scope and all(n in words for n in scope):
                    return True
    return False


# where a negation's scope ends: "No. Flights under six hours are economy" does not negate the flights
_CLAUSE = re.compile(r"[.,;:!?()\[\]\"\u201c\u201d]|\s[-\u2013\u2014]\s")

"""Lexical evidence for the embedded judge: content words, their overlap, and answer-string occurrence."""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher
from functools import lru_cache

__all__ = ["answer_occurs", "content_tokens", "lead_phrase", "lead_tokens", "name_changed", "normalize", "range_denied",
           "specifics", "specifics_in", "spelled_numbers", "token_recall", "without_cues"]

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


# Numbers written as words: a small table rather than a library (ARCHITECTURE.md says why: word2number reads one whole
# string as one number and has had no release since 2017; num2words writes numbers as words, it does not read them).
_UNITS = {w: i for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"))}
_TENS = {w: 10 * i for i, w in enumerate(
    ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"), 2)}
_ORDINALS = {w: i for i, w in enumerate((
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth"), 1)}
_ORDINALS |= {w[:-1] + "ieth": v for w, v in _TENS.items()}  # twentieth .. ninetieth
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_NUMBER_WORDS = {w: str(i) for w, i in _UNITS.items() if i <= 19} | {"twenty": "20"}  # as they read alone
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_][\w'\-]*", re.UNICODE)


def _num(text: str) -> str:
    """A number's digits as ``specifics`` writes them ("1,000" -> "1000", "2.50" -> "2.5", 2e6 -> "2000000")."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


_DIGITS_SCALE = re.compile(r"(\d+(?:\.\d+)?)\s+(hundred|thousand|million|billion)\b")


def _joins(cur: float, value: int) -> bool:
    """Whether a number word of ``value`` continues the number read so far ("twenty" + "five"; not "five" "six")."""
    rest = int(cur) % 100
    return rest == 0 or (rest >= 20 and rest % 10 == 0 and value < 10)


@lru_cache(maxsize=100_000)
def spelled_numbers(text: str, ordinals: bool = True) -> tuple[str, ...]:
    """The numbers ``text`` writes with words, as digits: "twenty-five" -> "25", "fifth" -> "5", "two million" and
    "2 million" -> "2000000", "one hundred and five" -> "105". Ordinals only with ``ordinals``; "one" alone is not a
    number here (it is as often a word: "one of", "on one charge")."""
    low = normalize_keep_apostrophes(text or "").replace(",", "")
    out = []
    for m in _DIGITS_SCALE.finditer(low):
        v = float(m.group(1)) * _SCALES[m.group(2)]
        out.append(str(int(v)) if v.is_integer() else _num(str(v)))
    toks = normalize(low).split()
    i = 0
    while i < len(toks):
        total = cur = 0.0
        j, n = i, 0
        while j < len(toks):
            t = toks[j]
            if (t in _UNITS or t in _TENS) and (not n or cur and _joins(cur, _UNITS.get(t, _TENS.get(t, 0)))):
                cur += _UNITS.get(t, 0) + _TENS.get(t, 0)
            elif ordinals and t in _ORDINALS and (not n or cur and _joins(cur, _ORDINALS[t])):
                cur += _ORDINALS[t]
                n, j = n + 1, j + 1
                break
            elif t in _SCALES and n:
                cur = (cur or 1) * _SCALES[t]
                if _SCALES[t] >= 1000:
                    total, cur = total + cur, 0.0
            elif t == "and" and n and j + 1 < len(toks) and (toks[j + 1] in _UNITS or toks[j + 1] in _TENS):
                j += 1
                continue
            else:
                break
            n, j = n + 1, j + 1
        if n:
            ordinal_next = j < len(toks) and toks[j] in _ORDINALS and cur and _joins(cur, _ORDINALS[toks[j]])
            if toks[i:j] != ["one"] and not ordinal_next:  # without ordinals, "twenty-fifth" is no number
                out.append(str(int(total + cur)))
            i = j
        else:
            i += 1
    return tuple(out)


@lru_cache(maxsize=100_000)
def is_number(specific: str) -> bool:
    """Whether one of ``specifics``' items is a number (they are digits; names are words)."""
    return specific[:1].isdigit()


_CONNECTORS = frozenset({"of", "and", "for", "the", "&", "de", "on", "in"})
_CAPS_WORD = re.compile(r"[^\W\d_][\w'\-&]*|&", re.UNICODE)


@lru_cache(maxsize=100_000)
def name_runs(text: str) -> tuple[tuple[str, ...], ...]:
    """The runs of capitalised words of ``text`` ("the Graduate School of Linden University" -> ("Graduate",
    "School", "of", "Linden", "University")); connectors inside a run ("of", "and", "for", "the") are kept."""
    runs: list[tuple[str, ...]] = []
    for sentence in re.split(r"(?<=[.!?;:,()])\s+|\n+|[()\[\],;:]", text or ""):
        cur: list[str] = []
        for w in _CAPS_WORD.findall(sentence):
            if w[:1].isupper() or (w.lower() in _CONNECTORS and cur):
                cur.append(w)
            else:
                if cur:
                    runs.append(tuple(cur))
                cur = []
        if cur:
            runs.append(tuple(cur))
    return tuple(tuple(r[: max(k for k, w in enumerate(r) if w[:1].isupper()) + 1]) for r in runs)


def _acronym(run: tuple[str, ...]) -> str:
    caps = [w for w in run if w[:1].isupper() and not w.isupper()]
    return "".join(w[0] for w in caps).lower() if len(caps) >= 2 and len(caps) == sum(
        1 for w in run if w[:1].isupper()) else ""


def _acronyms(run: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The acronym of the name and of each part of it that opens or closes it, from a capitalised word to a
    capitalised word ("National Institutes of Health in Bethesda" -> "nihb", "nih", "hb", ...), with that part."""
    caps = [k for k, w in enumerate(run) if w[:1].isupper()]
    out: dict[str, tuple[str, ...]] = {}
    for a in caps:
        for b in caps:
            if b > a and (a == caps[0] or b == caps[-1]) and (acr := _acronym(run[a:b + 1])):
                out.setdefault(acr, run[a:b + 1])
    return out


@lru_cache(maxsize=100_000)
def _upper_tokens(text: str) -> frozenset[str]:
    """The all-capital words of ``text`` of 2 to 6 letters ("EU", "NIH"), lower-cased: what may be an acronym."""
    return frozenset(w.lower() for w in re.findall(r"\b[A-Z]{2,6}s?\b", text or ""))


def specifics(text: str) -> frozenset[str]:
    """What a statement asserts that a topic match does not prove: its numbers (digits, or number words from two
    up, as digits: "twenty-five" -> "25") and its names (capitalised words other than a sentence's first word,
    lower-cased).

    "Employees may carry over 5 days to January." -> {"5", "january"}. A node that shares the statement's topic but
    not these does not support it.
    """
    out: set[str] = {_num(n.replace(",", "")) for n in _NUMBER.findall(text or "")}
    out |= set(spelled_numbers(text or "", ordinals=False))
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text or ""):
        for k, m in enumerate(_WORD.finditer(sentence)):
            w = m.group(0)
            low = w.lower()
            if k > 0 and w[0].isupper() and low not in _STOPWORDS and len(w) > 1 and low not in _NUMBER_WORDS:
                out.add(normalize(w))
    return frozenset(out)


@lru_cache(maxsize=100_000)
def _mentions(text: str) -> frozenset[str]:
    """Every word and number of ``text`` (numbers in words and ordinals also as digits, a name's acronym: "European
    Union" -> "eu"): what ``specifics_in`` looks things up in, once per text however many statements are checked."""
    have = set(normalize(text).split()) | {_num(n.replace(",", "")) for n in _NUMBER.findall(text)}
    have |= set(spelled_numbers(text)) | {_NUMBER_WORDS[w] for w in have if w in _NUMBER_WORDS}
    return frozenset(have | {a for r in name_runs(text) for a in _acronyms(r)})


# A range a node states: "Android 10 or later", "at least 50 euros" (from the number up), "up to 30 hours", "9 or
# earlier" (up to the number). A statement's number inside it, or outside it and denied, is not missing.
_NUM = r"(\d+(?:\.\d+)*)"
_FROM = [re.compile(_NUM + r"\s*(?:\+|or (?:later|newer|above|higher|more|greater|after)\b)"),
         re.compile(r"\b(?:at least|a minimum of|minimum of|no less than|no fewer than|not less than)\s+"
                    r"(?:[^\W\d]+\s+){0,2}" + _NUM)]
_UPTO = [re.compile(_NUM + r"\s*or (?:earlier|older|below|lower|less|fewer|under)\b"),
         re.compile(r"\b(?:up to|at most|a maximum of|maximum of|no more than|not more than)\s+(?:[^\W\d]+\s+){0,2}"
                    + _NUM)]
_BELOW = re.compile(r"\b(?:before|below|under|earlier than|older than|lower than|less than|prior to)\s+"
                    r"(?:[^\W\d]+\s+){0,2}$")
_ABOVE = re.compile(r"\b(?:after|above|over|later than|newer than|higher than|more than|at least)\s+"
                    r"(?:[^\W\d]+\s+){0,2}$")


def _key(n: str) -> tuple[int, ...]:
    return tuple(int(p) for p in n.split(".") if p.isdigit())


def _near_words(text: str, start: int, end: int, span: int = 3) -> set[str]:
    before = re.findall(r"[^\W\d_]+", text[:start])[-span:]
    after = re.findall(r"[^\W\d_]+", text[end:])[:span]
    return {_stem(w) for w in before + after if w not in _STOPWORDS}


@lru_cache(maxsize=100_000)
def _ranges(text: str) -> tuple[tuple[tuple[int, ...], bool, frozenset[str]], ...]:
    """(bound, is a lower bound, the words around it) of each range ``text`` states."""
    low = normalize_keep_apostrophes(text)
    out = []
    for pats, lower in ((_FROM, True), (_UPTO, False)):
        for pat in pats:
            for m in pat.finditer(low):
                out.append((_key(m.group(1)), lower, frozenset(_near_words(low, m.start(), m.end()))))
    return tuple(out)


def _in_range(number: str, statement: str, text: str) -> str:
    """Whether ``statement``'s ``number`` is accounted for by a range ``text`` states about the same thing (a word
    beside the number is beside the bound): inside it when the statement asserts it, outside it when it denies it
    ("does not run on Android 9" against "Android 10 or later")."""
    ranges = _ranges(text)
    if not ranges:
        return ""
    low = normalize_keep_apostrophes(statement)
    for m in re.finditer(r"(?<![\d.])" + re.escape(number) + r"(?![\d]|\.\d)", low):
        near = _near_words(low, m.start(), m.end())
        clause = next((c for c in _clause_spans(low) if c[0] <= m.start() < c[1]), (0, len(low)))
        denied = any(_is_cue(w) for w in re.findall(r"[^\W_][\w'\u2019]*", low[clause[0]:clause[1]]))
        head = low[clause[0]:m.start()]
        side = "lt" if _BELOW.search(head) else "gt" if _ABOVE.search(head) else "eq"
        v = _key(number)
        for bound, lower, around in ranges:
            if not (near & around):
                continue
            if lower:  # the range is [bound, ...)
                inside = v >= bound and side != "lt"
                outside = v < bound and side != "gt" or v <= bound and side == "lt"
            else:  # (..., bound]
                inside = v <= bound and side != "gt"
                outside = v > bound and side != "lt" or v >= bound and side == "gt"
            if inside and not denied:
                return "inside"
            if outside and denied:
                return "denied"
    return ""


def range_denied(statement: str, text: str) -> bool:
    """Whether one of ``statement``'s numbers is missing from ``text`` but denied outside a range ``text`` states
    ("does not run on Android 9" against "Android 10 or later"): the statement's "not" is then what the node says."""
    have = _mentions(text)
    return any(is_number(x) and x not in have and _in_range(x, statement, text) == "denied"
               for x in specifics(statement))


def _clause_spans(text: str) -> list[tuple[int, int]]:
    spans, lo = [], 0
    for m in _CLAUSE.finditer(text):
        if m.group(0) == "." and 0 < m.start() < len(text) - 1 and text[m.start() - 1].isdigit() and text[
                m.start() + 1].isdigit():
            continue  # "3.12" is one number
        spans.append((lo, m.start()))
        lo = m.end()
    spans.append((lo, len(text)))
    return spans


def specifics_in(needle: frozenset[str], text: str, statement: str = "") -> tuple[frozenset[str], frozenset[str]]:
    """(found, missing): which of ``needle`` (from ``specifics``) occur in ``text`` as words or numbers. With the
    ``statement`` they came from, also the forms that state the same: a name's acronym ("EU" for "European Union",
    either way round) and a number inside a range ``text`` states ("Android 12" in "Android 10 or later"), or outside
    it where the statement denies it ("not Android 9")."""
    if not needle:
        return frozenset(), frozenset()
    have = _mentions(text)
    found = {x for x in needle if x in have or all(p in have for p in x.split())}
    if statement and len(found) < len(needle):
        upper = _upper_tokens(text)
        for run in name_runs(statement):
            for a, part in _acronyms(run).items():
                if a in upper:
                    found |= {normalize(w) for w in part} & needle
        found |= {x for x in needle - found if is_number(x) and _in_range(x, statement, text)}
    return frozenset(found), needle - frozenset(found)


def _name_word(w: str) -> str:
    return _stem(normalize(re.sub(r"['\u2019]s$", "", w)))


def name_changed(statement: str, text: str) -> str:
    """A name of ``statement`` that ``text`` gives with one word changed ("Business School of Linden University"
    where ``text`` says "Graduate School of Linden University"): the changed word, or "". Both names must be of the
    same length and share their other capitalised words, so "Obama" for "Barack Obama" is no change; the changed word
    must be one of the statement's ``specifics`` (not a sentence's first word), and a spelling variant ("Ladin" for
    "Laden") or a plural is no change."""
    spec = specifics(statement)
    theirs = [r for r in name_runs(text) if len(r) >= 2]
    for run in name_runs(statement):
        caps = [k for k, w in enumerate(run) if w[:1].isupper()]
        if len(caps) < 2:
            continue
        for other in theirs:
            if len(other) != len(run):
                continue
            diff = [k for k, (a, b) in enumerate(zip(run, other, strict=True)) if _name_word(a) != _name_word(b)]
            if len(diff) != 1 or diff[0] not in caps or normalize(run[diff[0]]) not in spec:
                continue
            a, b = _name_word(run[diff[0]]), _name_word(other[diff[0]])
            if b and a not in _mentions(text) and SequenceMatcher(None, a, b).ratio() < 0.75:
                return normalize(run[diff[0]])
    return ""


_NEGATION = frozenset({"not", "no", "never", "cannot", "none", "nobody", "nothing", "neither", "nor", "without",
                       "nowhere"})


def _is_cue(w: str) -> bool:
    return w in _NEGATION or w.endswith("n't") or w.endswith("n\u2019t")


def without_cues(words: frozenset[str]) -> frozenset[str]:
    """``words`` less the negation cues among them ("cannot", "never", "doesn't")."""
    return frozenset(w for w in words if not _is_cue(w))


def negated_near(text: str, words: frozenset[str], span: int = 4) -> bool:
    """Whether ``text`` says no about what ``words`` (content words, as ``content_tokens`` gives them) state: a
    negation whose scope, the content words among the next ``span`` (it runs to its right: "may not work remotely"),
    opens with a word of ``words`` and is at least half in them ("not permitted anywhere on the premises" denies
    "permitted"). "Not business class" does not deny a text that names only economy class.
    "No dog has ever run after its tail" does not negate "Germany went through its worst inflation", however long the
    sentence that holds both, nor does "Popeye (though not the various films)" negate Popeye, nor "No. Flights under six
    hours ..." the flights (the scope ends at punctuation); a number is never what a negation negates here."""
    for clause in _CLAUSE.split(normalize_keep_apostrophes(text)):
        toks = re.findall(r"[^\W_][\w'\u2019]*", clause)
        for k, w in enumerate(toks):
            if _is_cue(w):
                scope = [_stem(n) for n in toks[k + 1: k + 1 + span]
                         if n not in _STOPWORDS and not _is_cue(n) and not n[0].isdigit()]
                if scope and scope[0] in words and 2 * sum(n in words for n in scope) >= len(scope):
                    return True
    return False


# where a negation's scope ends: "No. Flights under six hours are economy" does not negate the flights
_CLAUSE = re.compile(r"[.,;:!?()\[\]\"\u201c\u201d]|\s[-\u2013\u2014]\s")

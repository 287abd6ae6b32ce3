"""Identity: how a case is keyed in a run, how it finds its golden, and how contextjudge makes the ids it needs.

One place for rules that the runner, the store, capture, tracing, the CLI and the report must agree on:

- ``case_key(index, test_case)``: a case's key within a run, its own ``id`` when it has one.
- ``is_generated_id(value)``: whether an id is one of those contextjudge (or a framework) made up, rather than one a
  user chose; such ids differ from run to run, so runs are paired by input instead.
- ``GOLDEN_ID_KEY`` and ``golden_id_of``: where a case carries the id of its golden, in any accepted spelling.
- ``match_golden``: fill a test case's expected output (a conversation's turns and expected outcome) from goldens.
- ``key_by_golden`` and ``unmatched_goldens``: the bookkeeping of a run over goldens (``contextjudge eval``): cases
  keyed by their golden's id where it is unique, and the goldens no case came from.
- ``new_case_id()`` and ``new_run_id()``: the ids contextjudge generates.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .goldens import Golden, Goldens

__all__ = ["GOLDEN_ID_KEY", "GoldenEntry", "attach_golden_labels", "case_key", "golden_id_of", "is_generated_id",
           "key_by_golden", "match_golden", "new_case_id", "new_run_id", "unmatched_goldens"]

GOLDEN_ID_KEY = "golden_id"
"""The metadata key that names a case's golden: ``config={"metadata": {"golden_id": ...}}``, a test case's
``additional_metadata``, a captured case's ``metadata``."""

_HEX = frozenset("0123456789abcdefABCDEF")


# ------------------------------------------------------------------------------------------------ case keys
def case_key(index: int, test_case: Any) -> str:
    """The key of a case within a run: its own id when it has one, else its position and content hash."""
    own = getattr(test_case, "id", None)
    if own:
        return str(own)
    fp = test_case.fingerprint() if hasattr(test_case, "fingerprint") else str(index)
    return f"{index}-{fp}"


def _is_hex(text: str, n: int) -> bool:
    return len(text) == n and all(ch in _HEX for ch in text)


def is_generated_id(value: Any) -> bool:
    """True for an id no user chose: a ``case_key`` made of position and fingerprint, a ``new_case_id()``, or a UUID
    (a framework's run id). Such an id names a case in one run only."""
    if value is None:
        return False
    text = str(value)
    position, sep, fp = text.partition("-")
    if sep and position.isascii() and position.isdigit() and _is_hex(fp, 16):
        return True
    if len(text) == 36 and all(text[i] == "-" for i in (8, 13, 18, 23)):
        text = text.replace("-", "")
    return _is_hex(text, 32)


# ------------------------------------------------------------------------------------------------ generated ids
def new_case_id() -> str:
    """A fresh id for a captured case: 32 hex digits."""
    return uuid.uuid4().hex


def new_run_id(now: float | None = None) -> str:
    """A fresh run id, sortable by start time (UTC): ``20240601-120000-a1b2c3``."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}-{uuid.uuid4().hex[:6]}"


# ------------------------------------------------------------------------------------------------ goldens
def _present(value: Any) -> bool:
    return value is not None and value != ""


def golden_id_of(source: Any) -> str | None:
    """The golden id ``source`` carries, as text, or None.

    ``source`` is a metadata mapping (``golden_id``), or an object:
    its own ``golden_id`` attribute first, then its ``metadata``, its ``additional_metadata``, and its
    ``test_case``'s (a captured case).
    """
    if source is None:
        return None
    if isinstance(source, Mapping):
        for key in (GOLDEN_ID_KEY,):
            if _present(source.get(key)):
                return str(source[key])
        return None
    own = getattr(source, "golden_id", None)
    if _present(own):
        return str(own)
    for attr in ("metadata", "additional_metadata"):
        meta = getattr(source, attr, None)
        if isinstance(meta, Mapping) and (found := golden_id_of(meta)) is not None:
            return found
    inner = getattr(source, "test_case", None)
    if inner is not None and inner is not source:
        return golden_id_of(inner)
    return None


def match_golden(goldens: Goldens | None, test_case: Any, *, golden_id: Any = None,
                 fallback_input: Any = None) -> str | None:
    """Fill ``test_case`` in place from its golden and return that golden's id (None when none matched or it has
    no id). Fields already set are kept.

    A single-turn case matches the golden named ``golden_id``, else the one whose input matches its ``input``, else
    (when given) ``fallback_input``, such as a chain's raw input, else one of its other inputs
    (``provenance.match_inputs_of``: an agent's tool query); its ``expected_output`` is filled. In a
    conversation, each assistant turn without ``expected_output`` takes it from the golden matching the user turn
    before it, and ``expected_outcome`` comes from the golden named ``golden_id`` (its expected outcome, else its
    expected output); the id returned is that golden's.
    """
    from .testcase import ConversationalTestCase, LLMTestCase  # noqa: PLC0415 - keep this module light

    if goldens is None or not len(goldens):
        return None
    if isinstance(test_case, LLMTestCase):
        from .provenance import match_inputs_of  # noqa: PLC0415

        g = goldens.match(test_case.input, golden_id)
        for other in ([fallback_input] if _present(fallback_input) else []) + match_inputs_of(test_case):
            if g is not None:
                break
            g = goldens.match(str(other), golden_id)
        if g is None:
            return None
        if test_case.expected_output is None and g.expected_output:
            test_case.expected_output = g.expected_output
        if test_case.expected_context_ids is None and g.expected_context_ids is not None:
            test_case.expected_context_ids = g.expected_context_ids
        _attach_golden_labels(test_case, g)
        return g.id
    if isinstance(test_case, ConversationalTestCase):
        turns = test_case.turns
        for i, turn in enumerate(turns):
            if turn.role != "assistant" or turn.expected_output is not None:
                continue
            prev = next((t for t in reversed(turns[:i]) if t.role == "user"), None)
            g = goldens.match(prev.content if prev else None)
            if g is not None and g.expected_output:
                turn.expected_output = g.expected_output
        named = goldens.match(None, golden_id) if golden_id is not None else None
        if named is None:
            return None
        if (test_case.expected_outcome is None and any(t.role == "user" for t in turns)
                and (named.expected_outcome or named.expected_output)):
            test_case.expected_outcome = named.expected_outcome or named.expected_output
        return named.id
    return None


def attach_golden_labels(goldens: Goldens | None, test_case: Any, golden_id: Any = None) -> None:
    """Bring the gold labels of the golden ``test_case`` matches (by ``golden_id``, else by input) to it
    (single-turn cases; see ``_attach_golden_labels``)."""
    from .testcase import LLMTestCase  # noqa: PLC0415

    if goldens is None or not len(goldens) or not isinstance(test_case, LLMTestCase):
        return
    g = goldens.match(test_case.input, None if golden_id is None else str(golden_id))
    if g is not None:
        _attach_golden_labels(test_case, g)


def _attach_golden_labels(test_case: Any, golden: Any) -> None:
    """Bring the gold labels a golden carries in its fields (``labels``, ``statement_labels``, ``nodes``...: see
    ``cases.labels``) to the case it matched, keyed: node labels by position are for the golden's own
    ``retrieval_context`` (without one they name no node, and are left out with a warning); statement labels without
    ``statements`` are for the golden's expected output. Labels the case already carries are kept."""
    from .labels import LABELS_KEY, NODE_FIELDS, keyed_labels, normalize_labels  # noqa: PLC0415
    from .testcase import LLMTestCase  # noqa: PLC0415

    meta = dict(getattr(test_case, "additional_metadata", None) or {})
    extra = dict(getattr(golden, "additional_metadata", None) or {})
    inner = extra.get(LABELS_KEY)
    raw: dict[str, Any] = inner if isinstance(inner, dict) else extra
    if meta.get(LABELS_KEY) or not any(raw.get(f) is not None for f in (*NODE_FIELDS, "statement_labels", "nodes")):
        return
    try:
        labels = normalize_labels(raw, f"golden {golden.id or golden.input!r}")
        if any(labels.get(f) is not None for f in NODE_FIELDS):
            if golden.retrieval_context:
                own = LLMTestCase(input=golden.input, expected_output=golden.expected_output,
                                  retrieval_context=list(golden.retrieval_context))
                labels = keyed_labels(own, labels)
            else:
                import logging  # noqa: PLC0415

                logging.getLogger("contextjudge").warning(
                    "contextjudge: golden %r gives node labels by rank but no retrieval_context, so they name no "
                    "node and are left out; give the nodes they label ('retrieval_context'), or label nodes by text "
                    "in 'nodes'.", golden.id or golden.input[:60])
                labels = {k: v for k, v in labels.items() if k not in NODE_FIELDS}
        if labels.get("statement_labels") is not None and labels.get("statements") is None:
            from .._text import split_sentences  # noqa: PLC0415

            labels["statements"] = split_sentences(golden.expected_output or "")
    except Exception as exc:  # noqa: BLE001 - a golden's bad label must not fail the user's run
        import logging  # noqa: PLC0415

        logging.getLogger("contextjudge").warning("contextjudge: golden %r: its labels cannot be read (%s); left "
                                                  "out.", golden.id or golden.input[:60], exc)
        return
    if any(k != "statements" for k in labels):
        meta[LABELS_KEY] = labels
        test_case.additional_metadata = meta


# ------------------------------------------------------------------------------------------------ runs over goldens
class GoldenEntry(NamedTuple):
    """A test case of a run over goldens, with its golden's id (or None) and whether its own id may give way to the
    golden's: an id contextjudge or a framework made up (``is_generated_id``), or the golden's own id on the error
    case of a golden whose app call raised; never an id the user chose."""

    test_case: Any
    golden_id: str | None
    replaceable: bool


def key_by_golden(entries: Sequence[GoldenEntry]) -> list[Any]:
    """The test cases of ``entries`` in order, each with a replaceable id keyed ``golden-<id>`` when its golden gave
    that one case only, so runs of different app versions pair up by golden. A golden that gave several cases keys
    none of them by its id: they are keyed by position, like cases without a golden."""
    counts = Counter(e.golden_id for e in entries if e.golden_id)
    out = []
    for tc, gid, replaceable in entries:
        if gid and replaceable and counts[gid] == 1:
            tc.id = f"golden-{gid}"
        elif gid and replaceable and getattr(tc, "id", None) == f"golden-{gid}":
            tc.id = None
        out.append(tc)
    return out


def unmatched_goldens(goldens: Goldens, cases: Iterable[tuple[Any, str | None]], *,
                      seen: Iterable[Golden] = ()) -> list[Golden]:
    """The goldens of ``goldens`` that no case of ``cases`` ((test case, golden id) pairs) came from, and that are
    not in ``seen`` (such as the goldens whose app call raised). A case comes from the golden named by its id, and
    from each golden whose input matches one of its inputs: its ``input``, its other inputs
    (``provenance.match_inputs_of``) and a conversation's user turns."""
    from .provenance import match_inputs_of  # noqa: PLC0415

    found: set[int] = {id(g) for g in seen}
    for tc, gid in cases:
        texts = [getattr(tc, "input", None), *(match_inputs_of(tc) if tc is not None else [])]
        turns = getattr(tc, "turns", None) or []
        texts += [t.content for t in turns if getattr(t, "role", None) == "user"]
        hits = [goldens.match(None, gid)] if gid else []
        hits += [goldens.match(t) for t in texts if isinstance(t, str)]
        found.update(id(g) for g in hits if g is not None)
    return [g for g in goldens if id(g) not in found]

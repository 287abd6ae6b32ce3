"""How the report writes values: escaping every piece of user text, numbers, intervals, dates, short texts.

Every piece of user text (inputs, outputs, node texts, judge reasons, metadata, error messages) passes through ``e``
before it reaches the page.
"""

from __future__ import annotations

import datetime as _dt
import html
from typing import Any

from .._result import MetricResult
from .._text import shorten
from ..cases.images import has_images, split_images
from ..cases.testcase import ConversationalTestCase
from ._stats import Interval

__all__ = ["case_input", "ci", "different_goldens", "different_goldens_note", "e", "goldens_words", "num", "pct",
           "refuse_different_goldens",
           "short", "signed", "status", "when"]


def e(value: Any) -> str:
    """``value`` as escaped HTML text (an image token shows as its "[image 1: alt]" marker)."""
    text = "" if value is None else str(value)
    if has_images(text):  # show "[image 1: alt]" rather than the (possibly huge) token that carries the image
        text = split_images(text)[0]
    return html.escape(text, quote=True)


def num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def ci(iv: Interval, is_signed: bool = False) -> str:
    if iv.low is None or iv.high is None:
        return "n/a"
    f = signed if is_signed else num
    return f"[{f(iv.low)}, {f(iv.high)}]"


def when(ts: float | None) -> str:
    if not ts:
        return ""
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def short(text: Any, n: int = 110) -> str:
    """``text`` on one line, at most ``n`` characters (cut in its readable form, never inside an image token)."""
    t = "" if text is None else str(text)
    if has_images(t):
        t = split_images(t)[0]
    return shorten(t, n)


def case_input(tc: Any) -> str:
    """The text a person knows a case by: its input, or a conversation's first user message."""
    if isinstance(tc, ConversationalTestCase):
        users = [t.content for t in tc.turns if t.role == "user"]
        return users[0] if users else "(conversation)"
    return getattr(tc, "input", "") or ""


def status(m: MetricResult) -> tuple[str, str]:
    """A result's CSS class and word: ("err", "error"), ("pass", "pass") or ("fail", "fail")."""
    if m.error:
        return "err", "error"
    return ("pass", "pass") if m.success else ("fail", "fail")


def goldens_words(g: dict[str, Any]) -> str:
    """A run's golden set as said to a user: its name and content hash."""
    return f"{g.get('name') or 'goldens'} (content hash {g.get('hash')})"


def different_goldens(baseline: dict[str, Any] | None, current: dict[str, Any] | None) -> bool:
    """Whether two runs ran different golden sets: both recorded, their content hashes differ."""
    return bool(baseline and current and baseline.get("hash") != current.get("hash"))


def refuse_different_goldens(baseline: dict[str, Any] | None, current: dict[str, Any] | None, *, allow: bool,
                             override: str, error: type[Exception]) -> bool:
    """Whether two runs ran different golden sets (``different_goldens``); raises ``error`` when they did and
    ``allow`` (``override``: ``--allow-different-goldens``, or the MCP tool's argument) is not given: a difference
    could come from the changed questions and answers, not from the app. ``compare``, ``report --compare``, ``eval
    --baseline`` and the MCP ``compare_runs`` tool share it."""
    different = different_goldens(baseline, current)
    if different and not allow:
        assert baseline is not None and current is not None
        raise error(f"the runs ran different goldens: the baseline {goldens_words(baseline)}, this run "
                    f"{goldens_words(current)}. A difference could come from the changed questions and "
                    f"answers, not from the app: rerun the baseline on the same goldens, or pass {override} to "
                    "compare anyway.")
    return different


def different_goldens_note(baseline: dict[str, Any], current: dict[str, Any]) -> str:
    """The note said when runs on different golden sets are compared anyway (the CLI, the MCP tool, the HTML
    compare page)."""
    return (f"NOTE: the runs ran different goldens: the baseline {goldens_words(baseline)}, this run "
            f"{goldens_words(current)}; a difference may come from the changed questions and answers, not only "
            "from the app")

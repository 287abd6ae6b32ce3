"""Reading JSON a user wrote: ``loads`` is ``json.loads`` with one more failure told as a decoding error.

Python's JSON reader recurses once per level of nesting, so a value nested a few thousand levels deep (a corrupted or
hostile goldens, labels or calibration file) raises ``RecursionError``, which names no file or line. ``loads`` turns
it into the ``json.JSONDecodeError`` every reader of a user's file already catches and explains with its file and
line, positioned where the nesting is deepest.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(text: str) -> Any:
    """``json.loads(text)``; a value nested too deep is a ``json.JSONDecodeError`` at its deepest point."""
    try:
        return json.loads(text)
    except RecursionError:
        depth, at = _deepest(text)
        raise json.JSONDecodeError(f"nested {depth} levels deep, too deep to read (flatten the value)", text,
                                   at) from None


def _deepest(text: str) -> tuple[int, int]:
    """(the deepest nesting of arrays and objects in ``text``, the position where it is first reached)."""
    depth = deepest = at = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, i
        elif ch in "]}":
            depth -= 1
    return deepest, at

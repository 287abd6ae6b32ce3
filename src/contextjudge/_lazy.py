"""The one way a room's door loads its names on first use: ``import contextjudge`` (and each room's ``__init__``)
stays cheap, and a name's module is imported only when the name is read."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_door(package: str, namespace: dict[str, Any], exports: Mapping[str, str],
              listed: Iterable[str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``exports`` maps each name to the module (relative to
    ``package``) that defines it; a name read once is kept in the package's ``namespace``. ``dir()`` lists
    ``listed`` (default: every exported name) beside what the package already holds."""
    shown = sorted(set(exports if listed is None else listed))

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module-level hook Python calls by this name
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(namespace) | set(shown))

    return __getattr__, __dir__

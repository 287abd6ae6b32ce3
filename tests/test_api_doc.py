"""docs/api.md is the list of what a user imports: every public module's ``__all__`` is on its row, and every name a
row (or the page) gives exists, so the page cannot drift from the code."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"

# Public modules (no underscore in their path) that the page names as not an interface, each with its reason there.
NOT_AN_INTERFACE = {
    "contextjudge.cli": "the command line is the interface",
    "contextjudge.pytest_plugin": "loaded by pytest",
    "contextjudge.engine": "the room that drives cases through the stages",
    "contextjudge_langchain.demo": "run by `contextjudge demo`",
}
# The compat faces mirror the peers' own modules; their names are the peers' (docs/coming-from-*.md), so the page
# names their paths, and only those paths are checked here.
COMPAT = "contextjudge.compat"

_ROW = re.compile(r"^\|\s*`([A-Za-z_][\w.]*)`\s*\|(.*)\|\s*$")
_TICKED = re.compile(r"`([^`]+)`")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
_MODULE_PATH = re.compile(r"^contextjudge(_langchain|_llama_index)?(\.\w+)*$")


def _public_modules() -> list[str]:
    out = []
    for top in ("contextjudge", "contextjudge_langchain", "contextjudge_llama_index"):
        pkg = importlib.import_module(top)
        out.append(top)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                out.append(info.name)
    return out


def _rows(text: str) -> dict[str, str]:
    """module -> the text of its row, for every table row whose first cell is one module name."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m is None or not _MODULE_PATH.match(m.group(1)):
            continue
        assert m.group(1) not in rows, f"docs/api.md gives {m.group(1)} two rows"
        rows[m.group(1)] = m.group(2)
    return rows


def _names(row: str) -> set[str]:
    return {t for t in _TICKED.findall(row) if _NAME.match(t)}


@pytest.fixture(scope="module")
def page() -> str:
    pytest.importorskip("contextjudge_langchain")
    pytest.importorskip("contextjudge_llama_index")
    return API.read_text(encoding="utf-8")


def test_every_public_module_has_a_row_with_all_of_its_names(page: str) -> None:
    rows = _rows(page)
    missing = []
    for name in _public_modules():
        if name.startswith(COMPAT) or name in NOT_AN_INTERFACE:
            continue
        if name not in rows:
            missing.append(f"{name}: no row")
            continue
        exported = getattr(importlib.import_module(name), "__all__", [])
        gone = sorted(set(exported) - _names(rows[name]))
        if gone:
            missing.append(f"{name}: {', '.join(gone)}")
    assert missing == [], "docs/api.md lacks these public names (add them to the module's row):\n" + "\n".join(missing)


def test_every_name_a_row_gives_exists(page: str) -> None:
    wrong = []
    for module, row in _rows(page).items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            wrong.append(f"{module}: no such module")
            continue
        wrong += [f"{module}.{n}: no such name" for n in sorted(_names(row)) if not hasattr(mod, n)]
    assert wrong == [], "docs/api.md names what does not exist:\n" + "\n".join(wrong)


def test_every_module_path_the_page_names_imports(page: str) -> None:
    wrong = []
    for path in sorted({t for t in _TICKED.findall(page) if _MODULE_PATH.match(t)}):
        try:
            importlib.import_module(path)
        except ImportError:
            wrong.append(path)
    assert wrong == [], f"docs/api.md names modules that do not import: {wrong}"


def test_the_modules_that_are_not_an_interface_are_named_as_such(page: str) -> None:
    assert [m for m in NOT_AN_INTERFACE if f"`{m}`" not in page] == []
    assert not set(NOT_AN_INTERFACE) & set(_rows(page))

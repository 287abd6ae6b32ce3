"""The import rules of ARCHITECTURE.md ("Layers"), checked on the code of the core and the integrations.

Four rules, each a function that takes the roots of the packages to read, so the tests below can point it at a tiny
package written into ``tmp_path`` and show that it catches each forbidden pattern:

- layers: a core module imports only modules on its own layer or below, and inside a layer only what the layer's
  sub-order allows (the report never imports the engine); the core never imports an integration;
- integrations: an integration imports only the core's public modules (``PUBLIC_MODULES`` in test_package.py), never
  another integration;
- privacy: a module reaches an underscore module or name (``x._private``, ``from x import _name``,
  ``x._private.f()``) only inside the package that holds it (a sibling or its own descendant);
- circles: no import circle at all among the modules read (imports inside functions included; only imports under
  ``if TYPE_CHECKING:`` are left out, since they never run); and, over the repository, none through those either.

Every import statement counts, lazy ones inside functions included. Kept hand-written (about 200 lines of ``ast``)
rather than import-linter: it also follows attribute access to private names through an imported module, and the
rules read from one table that mirrors ARCHITECTURE.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from test_package import is_listed_public

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "src" / "contextjudge"
INTEGRATIONS = sorted(p for p in (REPO / "integrations").glob("*/src/contextjudge_*") if p.is_dir())
ROOTS = [CORE, *INTEGRATIONS]

# ARCHITECTURE.md, "Layers": a module's first part below ``contextjudge`` gives its layer (the root __init__: "").
# A decimal layer is a sub-order inside a layer: 6.1 (report) may not import 6.2 (engine).
LAYERS: dict[str, float] = {
    "errors": 1, "_text": 1, "_json": 1, "_version": 1, "stats": 1, "_locks": 1, "_lazy": 1,
    "cases": 2, "_aio": 2,
    "_result": 3, "_tracing": 3,
    "judges": 4, "store": 4,
    "metrics": 5, "testing": 5,
    "report": 6.1, "engine": 6.2,
    "capture": 7, "templates": 7, "goldens": 7, "local": 7, "multimodal": 7, "compat": 7,
    "pytest_plugin": 7, "": 7, "otel": 7, "traces": 7,
    "cli": 8, "__main__": 8, "_recommend": 8,
}
# the one deliberate exception to "the core never imports an integration": deprecated names that forward to the
# integrations, imported lazily when read
CORE_MAY_IMPORT_INTEGRATION: set[tuple[str, str]] = set()
# integration -> the other integrations it may import (ARCHITECTURE.md names none)
INTEGRATION_MAY_IMPORT: dict[str, set[str]] = {}


@dataclass(frozen=True)
class Reach:
    """One import (or attribute access through an imported module) of one module by another."""

    importer: str  # the module that imports, dotted ("contextjudge.store._queue"; a package is its __init__)
    target: str  # what it reaches, dotted: a module, or a module followed by a name ("contextjudge.store._x")
    module: str  # the module that target lies in (target itself when it is a module)
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs
    attribute: bool = False  # reached as ``module.attr`` rather than by an import statement

    def where(self) -> str:
        """``importer:line``."""
        return f"{self.importer}:{self.line}"


def find_modules(roots: list[Path]) -> dict[str, Path]:
    """Every module under ``roots`` (each the directory of a top-level package), dotted name -> file."""
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if not any(p.endswith(".egg-info") for p in parts):
                out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return name in modules and modules[name].name == "__init__.py" or any(m.startswith(name + ".") for m in modules)


def _module_of(target: str, modules: dict[str, Path]) -> str:
    """The longest prefix of ``target`` that is a module (a namespace package counts as one)."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules or _is_package(name, modules):
            return name
    return target


def reaches(roots: list[Path], tops: tuple[str, ...] = ("contextjudge",)) -> list[Reach]:
    """Every import of a module whose top-level name starts with one of ``tops`` made by a module under ``roots``:
    import statements anywhere in the file, and ``name.attr`` chains through a name bound to such a module."""
    modules = find_modules(roots)
    out: list[Reach] = []
    for importer, path in modules.items():
        out += _FileScan(importer, path, modules, tops).run()
    return out


class _FileScan:
    """The reaches of one module."""

    def __init__(self, importer: str, path: Path, modules: dict[str, Path], tops: tuple[str, ...]) -> None:
        self.importer, self.path, self.modules, self.tops = importer, path, modules, tops
        self.package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
        self.bound: dict[str, str] = {}  # local name -> the module it is bound to
        self.found: list[Reach] = []

    def run(self) -> list[Reach]:
        tree = ast.parse(self.path.read_text("utf-8"), str(self.path))
        # bind names first (an import at the bottom of a module still binds the name used above it)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                self.visit(node, False)
        self.found.clear()
        self.visit(tree, False)
        return self.found

    def ours(self, name: str) -> bool:
        return name.split(".")[0].startswith(self.tops)

    def add(self, target: str, line: int, type_only: bool, attribute: bool = False) -> None:
        self.found.append(Reach(self.importer, target, _module_of(target, self.modules), line, type_only, attribute))

    def visit(self, node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                self.visit(child, True)
            for child in node.orelse:
                self.visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if self.ours(a.name):
                    self.add(a.name, node.lineno, type_only)
                    self.bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = self.package[: len(self.package) - (node.level - 1)]
                source = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                source = node.module or ""
            if self.ours(source):
                for a in node.names:
                    full = f"{source}.{a.name}"
                    if a.name == "*":
                        self.add(source, node.lineno, type_only)
                        continue
                    self.add(full, node.lineno, type_only)
                    if full in self.modules or _is_package(full, self.modules):
                        self.bound[a.asname or a.name] = full
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _chain(node)
            if chain and chain[0] in self.bound and any(_private(p) for p in chain[1:]):
                self.add(".".join([self.bound[chain[0]], *chain[1:]]), node.lineno, type_only, attribute=True)
                return  # the chain's inner attributes are the same reach
        for child in ast.iter_child_nodes(node):
            self.visit(child, type_only)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the chain does not start with a plain name."""
    parts = []
    cur: ast.expr = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    return [cur.id, *reversed(parts)]


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _layer(module: str) -> float:
    parts = module.split(".")
    head = parts[1] if len(parts) > 1 else ""
    if head not in LAYERS:
        raise AssertionError(f"{module} has no layer in ARCHITECTURE.md: add it there and to LAYERS here")
    return LAYERS[head]


def _core(module: str) -> bool:
    return module.split(".")[0] == "contextjudge"


def layer_problems(found: list[Reach]) -> list[str]:
    """The core's imports that go up the layers (or up a layer's sub-order), or into an integration."""
    wrong = []
    for r in found:
        if not _core(r.importer) or r.attribute:
            continue
        if not _core(r.module):
            if (r.importer, r.module.split(".")[0]) not in CORE_MAY_IMPORT_INTEGRATION:
                wrong.append(f"{r.where()} imports the integration {r.target}")
            continue
        here, there = _layer(r.importer), _layer(r.module)
        if there > here:
            wrong.append(f"{r.where()} (layer {here:g}) imports {r.module} (layer {there:g})")
    return sorted(set(wrong))


def integration_problems(found: list[Reach]) -> list[str]:
    """An integration's imports of the core's non-public modules or of another integration."""
    wrong = []
    for r in found:
        top = r.importer.split(".")[0]
        if _core(r.importer) or r.attribute:
            continue
        other = r.module.split(".")[0]
        if _core(r.module):
            if not is_listed_public(r.module):
                wrong.append(f"{r.where()} imports {r.module}, which is not a public module of the core")
        elif other != top and other not in INTEGRATION_MAY_IMPORT.get(top, set()):
            wrong.append(f"{r.where()} imports the integration {r.target}")
    return sorted(set(wrong))


def privacy_problems(found: list[Reach], roots: list[Path]) -> list[str]:
    """Reaches of an underscore module or name from outside the package that holds it."""
    modules = find_modules(roots)
    wrong = []
    for r in found:
        parts = r.target.split(".")
        first = next((i for i, p in enumerate(parts) if _private(p)), None)
        if first is None:
            continue
        owner = ".".join(parts[:first])
        if not _is_package(owner, modules) and owner in modules:  # a private name of a module: its package's
            owner = owner.rpartition(".")[0]
        if not (r.importer == owner or r.importer.startswith(owner + ".")):
            how = "reaches" if r.attribute else "imports"
            wrong.append(f"{r.where()} {how} {r.target}, private to {owner or 'its top-level package'}")
    return sorted(set(wrong))


def import_circles(found: list[Reach]) -> list[list[str]]:
    """Each import circle among the modules (Tarjan's strongly connected components), as one cycle through it."""
    graph: dict[str, set[str]] = {}
    for r in found:
        if not r.type_only and not r.attribute and r.module != r.importer:
            graph.setdefault(r.importer, set()).add(r.module)
            graph.setdefault(r.module, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:  # iterative, so a deep graph cannot hit the recursion limit
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_cycle_in(comp, graph) for comp in sorted(components)]


def _cycle_in(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the first module of a strongly connected component: a -> ... -> a (breadth first)."""
    members, start = set(comp), comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # unreachable for a real component


def circle_problems(found: list[Reach]) -> list[str]:
    """The import circles, each printed as ``a -> b -> a``."""
    return [" -> ".join(c) for c in import_circles(found)]


# ---- the whole repository ----------------------------------------------------------------------------------------

FOUND = reaches(ROOTS, ("contextjudge",))

# Still broken in files other helpers of issue 27 own (the lead removes these marks once they pass after merging).
# Left after merging every branch as of 20:45 UTC: _PENDING_PRIVATE all three; _PENDING_CIRCLES the integrations'.
_PENDING_PRIVATE = ("cli._trend (was _cli_trend) reaches store._trend.find_drops; compat.deepeval.metrics._peer "
                    "reaches judges.templates._items/_verdict_format/_sentences_by_node; engine.calibrate reaches "
                    "metrics._base.node_items: each needs a public name on the owning side")
_PENDING_CIRCLES = ("contextjudge_langchain _attach -> _handler -> _vectorstores -> _attach and contextjudge_llama_index "
                    "_adapter <-> _capture (capture branch); cli <-> its command modules and judges.models <-> "
                    "judges.calibration on main only (gone in the cli and judges branches)")


def test_every_core_import_goes_down_the_layers():
    wrong = layer_problems(FOUND)
    assert not wrong, "imports that run up the layers:\n" + "\n".join(wrong)


def test_integrations_import_only_the_cores_public_modules_and_no_other_integration():
    wrong = integration_problems(FOUND)
    assert not wrong, "integration imports that are not allowed:\n" + "\n".join(wrong)


def test_no_private_name_is_reached_across_packages():
    wrong = privacy_problems(FOUND, ROOTS)
    assert not wrong, "private modules or names reached from outside their package:\n" + "\n".join(wrong)


def test_there_is_no_import_circle():
    circles = circle_problems(FOUND)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_there_is_no_import_circle_even_under_type_checking():
    """A circle only type checkers see never runs, but still ties two modules together: none is kept either. Break
    one with a Protocol in the lower module saying what it reads, or by moving the shared type down."""
    circles = circle_problems([replace(r, type_only=False) for r in FOUND])
    assert not circles, "import circles through imports under `if TYPE_CHECKING:`:\n" + "\n".join(circles)


def test_every_module_has_a_layer():
    for module in find_modules([CORE]):
        _layer(module)


# ---- each forbidden pattern, in a package written for the test -------------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` (path under tmp_path -> source) and return the top-level package directories."""
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return sorted(p for p in tmp_path.iterdir() if p.is_dir())


def test_an_upward_import_is_caught_even_inside_a_function(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/cases/__init__.py": "",
        "contextjudge/cases/testcase.py": "def f():\n    from ..engine import run\n",
        "contextjudge/engine/__init__.py": "",
        "contextjudge/engine/run.py": "from ..cases import testcase\n",
    })
    wrong = layer_problems(reaches(roots))
    assert wrong == ["contextjudge.cases.testcase:2 (layer 2) imports contextjudge.engine.run (layer 6.2)"]


def test_an_import_against_a_layers_sub_order_is_caught(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/report/__init__.py": "from contextjudge.engine.score import fill\n",
        "contextjudge/engine/__init__.py": "",
        "contextjudge/engine/score.py": "def fill(): pass\n",
    })
    wrong = layer_problems(reaches(roots))
    assert wrong == ["contextjudge.report:1 (layer 6.1) imports contextjudge.engine.score (layer 6.2)"]


def test_the_core_importing_an_integration_is_caught(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/metrics/__init__.py": "import contextjudge_langchain\n",
        "contextjudge_langchain/__init__.py": "",
    })
    assert layer_problems(reaches(roots)) == ["contextjudge.metrics:1 imports the integration contextjudge_langchain"]


def test_an_integration_importing_a_non_public_core_module_is_caught(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/_aio.py": "",
        "contextjudge/engine/__init__.py": "",
        "contextjudge/engine/run.py": "",
        "contextjudge/metrics/__init__.py": "",
        "contextjudge_x/__init__.py": ("from contextjudge import metrics\nfrom contextjudge._aio import run\n"
                                       "def f():\n    import contextjudge.engine.run\n"),
    })
    wrong = integration_problems(reaches(roots))
    assert wrong == ["contextjudge_x:2 imports contextjudge._aio, which is not a public module of the core",
                     "contextjudge_x:4 imports contextjudge.engine.run, which is not a public module of the core"]


def test_one_integration_importing_another_is_caught(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge_a/__init__.py": "from contextjudge_b.things import x\n",
        "contextjudge_b/__init__.py": "",
        "contextjudge_b/things.py": "x = 1\n",
    })
    assert integration_problems(reaches(roots)) == ["contextjudge_a:1 imports the integration contextjudge_b.things.x"]


@pytest.mark.parametrize("source, reached", [
    ("from contextjudge.store._queue import try_lock\n", "contextjudge.store._queue.try_lock"),
    ("import contextjudge.store._queue\n", "contextjudge.store._queue"),
    ("from contextjudge.store import _try_lock\n", "contextjudge.store._try_lock"),
    ("from ..store import _queue\n", "contextjudge.store._queue"),
    ("from contextjudge import store\ndef f():\n    store._queue.try_lock()\n", "contextjudge.store._queue.try_lock"),
    ("import contextjudge.store as s\ns.public._helper()\n", "contextjudge.store.public._helper"),
])
def test_a_private_module_or_name_reached_across_packages_is_caught(tmp_path, source, reached):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/store/__init__.py": "def _try_lock(): pass\n",
        "contextjudge/store/_queue.py": "def try_lock(): pass\n",
        "contextjudge/store/public.py": "def _helper(): pass\n",
        "contextjudge/engine/__init__.py": "",
        "contextjudge/engine/ray_engine.py": source,
    })
    wrong = privacy_problems(reaches(roots), roots)
    assert len(wrong) == 1 and f"imports {reached}," in wrong[0] or f"reaches {reached}," in wrong[0], wrong
    assert wrong[0].startswith("contextjudge.engine.ray_engine:") and "private to contextjudge.store" in wrong[0]


def test_private_modules_inside_their_own_package_are_allowed(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "from ._aio import run\n",
        "contextjudge/_aio.py": "def run(): pass\n",
        "contextjudge/store/__init__.py": "from ._queue import try_lock\nfrom . import _queue\n",
        "contextjudge/store/_queue.py": "from .._aio import run\ndef try_lock(): pass\n",
        "contextjudge/store/_deep/__init__.py": "from .._queue import try_lock\nfrom contextjudge.store import _x\n",
        "contextjudge/store/_x.py": "",
        "contextjudge/judges/__init__.py": "from contextjudge.store import try_lock\n",
    })
    assert privacy_problems(reaches(roots), roots) == []


def test_a_private_name_of_a_module_is_its_packages(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/judges/__init__.py": "",
        "contextjudge/judges/client.py": "def _isolated(): pass\n",
        "contextjudge/judges/tiered.py": "from .client import _isolated\n",  # same package: allowed
        "contextjudge/engine/__init__.py": "",
        "contextjudge/engine/run.py": "from ..judges.client import _isolated\n",
    })
    assert privacy_problems(reaches(roots), roots) == [
        "contextjudge.engine.run:1 imports contextjudge.judges.client._isolated, private to contextjudge.judges"]


def test_an_integration_reaching_a_private_core_name_is_caught(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/cases/__init__.py": "",
        "contextjudge/cases/images.py": "_ALT_KEYS = ()\n",
        "contextjudge_li/__init__.py": "from contextjudge.cases.images import _ALT_KEYS\n",
    })
    assert privacy_problems(reaches(roots), roots) == [
        "contextjudge_li:1 imports contextjudge.cases.images._ALT_KEYS, private to contextjudge.cases"]


def test_an_import_circle_is_caught_and_printed_even_through_a_lazy_import(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/cli.py": "from . import _cli_trust\n",
        "contextjudge/_cli_trust.py": "def f():\n    from .cli import main\n",
        "contextjudge/judges/__init__.py": "",
        "contextjudge/judges/client.py": "from .tiered import T\n",
        "contextjudge/judges/tiered.py": "from .models import m\n",
        "contextjudge/judges/models.py": "def g():\n    from . import client\n",
        "contextjudge/judges/ok.py": "from .client import x\n",
    })
    assert circle_problems(reaches(roots)) == [
        "contextjudge._cli_trust -> contextjudge.cli -> contextjudge._cli_trust",
        "contextjudge.judges.client -> contextjudge.judges.tiered -> contextjudge.judges.models "
        "-> contextjudge.judges.client",
    ]


def test_imports_for_type_checkers_only_make_no_circle(tmp_path):
    roots = _package(tmp_path, {
        "contextjudge/__init__.py": "",
        "contextjudge/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "contextjudge/b.py": "from .a import A\n",
    })
    assert circle_problems(reaches(roots)) == []


def test_no_class_or_function_is_300_lines_or_more():
    """Issue 27's size rule, kept: a class or function that grows past 300 lines is split by object, not by method."""
    big = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines >= 300:
                        big.append(f"{path.relative_to(REPO)}: {node.name} is {lines} lines")
    assert not big, "\n".join(big)

"""The layer rule of ARCHITECTURE.md, checked on the code: a module imports only its own layer or those below."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "contextjudge"

# ARCHITECTURE.md, "Layers": the first matching prefix gives a module's layer
LAYERS: list[tuple[str, int]] = [
    ("errors", 1), ("_text", 1), ("_version", 1), ("stats", 1),
    ("cases", 2), ("_aio", 2),
    ("_result", 3), ("tracing", 3),
    ("judges", 4), ("store", 4),
    ("metrics", 5), ("testing", 5),
    ("engine", 6), ("report", 6),
    ("capture", 7), ("templates", 7), ("goldens", 7), ("local", 7), ("multimodal", 7), ("compat", 7),
    ("pytest_plugin", 7), ("__init__", 7), ("otel", 7),
    ("cli", 8), ("__main__", 8), ("_cli_trust", 8), ("_cli_estimate", 8), ("_cli_worker", 8), ("_cli_trend", 8), ("recommend", 8),
]
# no exception left: multimodal's deprecated forwarders to the integrations went in 0.3
ALLOWED: set[tuple[str, str]] = set()


def _layer(module: str) -> int:
    head = module.split(".")[0]
    for prefix, layer in LAYERS:
        if head == prefix:
            return layer
    raise AssertionError(f"{module} has no layer in ARCHITECTURE.md: add it there and to LAYERS here")


def _name_of(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts) if parts != ["__init__"] else "__init__"


def _targets(path: Path, module: str) -> list[str]:
    """The contextjudge modules (relative to the package) that ``path`` imports, lazily or not."""
    tree = ast.parse(path.read_text("utf-8"))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if module == "__init__":
        package = []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                if not node.module:  # from . import x: x is a submodule, or a name of the package itself
                    for a in node.names:
                        sub = SRC.joinpath(*base, a.name)
                        is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                        out.append(".".join([*base, a.name]) if is_module else (".".join(base) or "__init__"))
                    continue
                out.append(target or "__init__")
            elif node.module and node.module.split(".")[0] in ("contextjudge", "contextjudge_langchain",
                                                               "contextjudge_llama_index"):
                out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0].startswith("contextjudge")]
    return out


def _check(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target``, or None when it may."""
    here = _layer(module)
    head = target.split(".")[0]
    if head in ("contextjudge_langchain", "contextjudge_llama_index"):
        return None if (module.split(".")[0], head) in ALLOWED else f"{module} imports the integration {target}"
    target = target.removeprefix("contextjudge.") if target != "contextjudge" else "__init__"
    if _layer(target) > here:
        return f"{module} (layer {here}) imports {target} (layer {_layer(target)})"
    return None


def test_every_import_goes_down_the_layers():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        module = _name_of(path)
        wrong += [w for t in _targets(path, module) if (w := _check(module, t))]
    assert not wrong, "imports that run up the layers:\n" + "\n".join(wrong)


def test_the_checker_sees_lazy_imports_and_reports_upward_ones():
    lazy = _targets(SRC / "engine" / "run.py", "engine.run")
    assert "store" in lazy and "_version" in lazy  # both imported inside functions
    assert _check("cases.testcase", "engine.run") is not None
    assert _check("judges.client", "contextjudge.metrics") is not None
    assert _check("engine.run", "cases.identity") is None
    assert _check("cases.images", "contextjudge_langchain") is not None

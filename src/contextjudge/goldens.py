"""The public spelling of goldens (they live in ``contextjudge.cases.goldens``): ``Golden``, ``Goldens`` and
``load_goldens`` for lists of dicts, JSONL and CSV files; and the roads to a first test set (the engine's):
``generate`` (goldens from your documents, checked), ``from_store`` (goldens from captured traffic),
``estimate_generation``, ``read_chunks``, ``StoredNodes`` and ``write_goldens`` (JSONL with a name and content
hash). See docs/goldens.md."""

from typing import TYPE_CHECKING, Any

from .cases.goldens import Golden, Goldens, load_goldens, normalize_input

_ENGINE = {"generate": "generate_goldens", "from_store": "goldens_from_store",
           "estimate_generation": "estimate_generation", "read_chunks": "read_chunks", "StoredNodes": "StoredNodes",
           "write_goldens": "write_goldens", "GenerationResult": "GenerationResult"}
# the goldens of a file or list (contextjudge.cases.goldens), then the engine's roads to a first test set
__all__ = ["GenerationResult", "Golden", "Goldens", "StoredNodes", "estimate_generation", "from_store", "generate",
           "load_goldens", "normalize_input", "read_chunks", "write_goldens"]


def __getattr__(name: str) -> Any:
    if name in _ENGINE:
        from . import engine  # noqa: PLC0415 - imported on first use: `import contextjudge.goldens` stays light

        value = getattr(engine, _ENGINE[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'contextjudge.goldens' has no attribute {name!r}")


_ = (Golden, Goldens, load_goldens, normalize_input)  # re-exported

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .engine import GenerationResult, StoredNodes, estimate_generation, read_chunks, write_goldens
    from .engine import generate_goldens as generate
    from .engine import goldens_from_store as from_store

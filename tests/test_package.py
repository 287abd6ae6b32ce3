"""Package hygiene: public surface, no LlamaIndex, no network at import."""

import subprocess
import sys
import textwrap

import pytest

# The modules users import, after issue 27's restructuring (docs/api.md says the same to users). An entry ending
# in ".*" is a package whose modules without an underscore are all public; any other entry is that module alone, so
# a package listed alone keeps its internals in underscored modules. Every other module must have an underscore in
# its path or lie inside a package of INTERNAL_PACKAGES.
PUBLIC_MODULES = {
    "contextjudge": "the front door: evaluate, the test case types, observe, open_store, the errors users catch",
    "contextjudge.capture": "capture() and Sampling for production; the contract the integrations implement",
    "contextjudge.metrics": "the metric classes and from_keys",
    "contextjudge.errors": "the error tree, for except clauses",
    "contextjudge.testing": "FakeJudge, the scripted test double users put in their own tests",
    "contextjudge.stats": "the intervals behind every printed figure, for users' own reports",
    "contextjudge.otel": "OTelExporter: results as OpenInference evaluation spans",
    "contextjudge.traces": "TraceCollector, TraceReceiver: cases from an app's OTLP / OpenInference spans (collect)",
    "contextjudge.store": "open_store and the read API (runs, results, cases, trend)",
    "contextjudge.report": "write_report: the one-file HTML report",
    "contextjudge.cases.*": "test cases, goldens, case ids and provenance keys (the keys integrations write)",
    "contextjudge.judges": "JudgeOptions, Budget, RateLimit, TieredJudge, CalibratedJudge: judge choice and limits",
    "contextjudge.goldens": "Golden, Goldens, load_goldens: the goldens `contextjudge eval` and the adapters read; "
                            "generate and from_store: a first test set (docs/goldens.md)",
    "contextjudge.local": "LocalJudge, the embedded offline judge (docs/judges.md imports it)",
    "contextjudge.multimodal": "the public spelling of images since 0.2 (MLLMImage and the image helpers)",
    "contextjudge.templates": "the prompt templates a metric's evaluation_template subclasses",
    "contextjudge.compat.*": "DeepEval's, Ragas' and Opik's module paths: an import change is the whole switch",
    "contextjudge.pytest_plugin": "the pytest plugin, loaded by pytest by its entry point's module name",
    "contextjudge.cli": "the `contextjudge` command's entry point (contextjudge.cli:main)",
    "contextjudge_langchain": "instrument() and the handler for LangChain / LangGraph apps",
    "contextjudge_langchain.testing": "offline stand-ins for a LangChain app's retriever and model",
    "contextjudge_langchain.demo": "`contextjudge demo` / `python -m contextjudge_langchain.demo`",
    "contextjudge_llama_index": "instrument() and the wrappers for LlamaIndex engines, agents and workflows",
    "contextjudge_llama_index.testing": "offline stand-ins for a LlamaIndex app's retriever and LLM",
    "contextjudge_llama_index.evaluation": "generate_question_context_pairs with LlamaIndex's signature: checked "
                                           "goldens (docs/goldens.md)",
}
# Packages whose modules are internal whatever their names, each with its reason.
INTERNAL_PACKAGES = {
    "contextjudge.cli": "one module per command group; the interface is the `contextjudge` command",
    "contextjudge_langchain.demo": "the demo's own steps; the interface is `contextjudge demo`",
}

# Packages users never import whose own ``__init__`` keeps a plain name (a room's sign), while every module inside
# has an underscore.
INTERNAL_ROOMS = {
    "contextjudge.engine": "drives cases through the stages; users reach it through the root (evaluate, "
                           "aevaluate, assert_test, estimate)",
}


def is_listed_public(name: str) -> bool:
    """Whether ``name`` (a dotted module name) is public by PUBLIC_MODULES."""
    if any(p.startswith("_") and p != "__main__" for p in name.split(".")):
        return False
    return name in PUBLIC_MODULES or any(
        m.endswith(".*") and (name == m[:-2] or name.startswith(m[:-1])) for m in PUBLIC_MODULES)


def unlisted_public(names: list[str]) -> list[str]:
    """The modules of ``names`` that look public (no underscore in the path, not in an internal package) but that
    PUBLIC_MODULES does not list: each needs an underscore, a place in an internal package, or a line in the list."""
    out = []
    for name in names:
        if any(p.startswith("_") and p != "__main__" for p in name.split(".")) or name.endswith(".__main__"):
            continue
        if name in INTERNAL_ROOMS or any(name.startswith(pkg + ".") for pkg in INTERNAL_PACKAGES):
            continue
        if not is_listed_public(name):
            out.append(name)
    return sorted(out)


def module_names() -> list[str]:
    """Every module of the core and the integrations, found on disk (nothing is imported)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    tops = [root / "src" / "contextjudge", *sorted((root / "integrations").glob("*/src/contextjudge_*"))]
    out = []
    for top in tops:
        if not top.is_dir():
            continue
        for path in top.rglob("*.py"):
            parts = list(path.relative_to(top.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.append(".".join(parts))
    return sorted(out)


def test_every_public_module_is_listed():
    assert unlisted_public(module_names()) == []


def namespace_packages() -> list[str]:
    """Folders of Python modules in the core and the integrations that have no ``__init__.py``."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    tops = [root / "src" / "contextjudge", *sorted((root / "integrations").glob("*/src/contextjudge_*"))]
    return sorted(str(d.relative_to(root)) for top in tops for d in [top, *top.rglob("*")]
                  if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").exists())


def test_every_listed_module_exists():
    names = set(module_names()) | {p.removeprefix("src/").replace("/", ".") for p in namespace_packages()}
    missing = [m for m in PUBLIC_MODULES if (m[:-2] if m.endswith(".*") else m) not in names]
    assert missing == []


def test_every_package_has_an_init_that_says_what_the_room_is():
    assert namespace_packages() == []


def test_the_public_module_check_can_fail():
    found = unlisted_public(["contextjudge", "contextjudge.engine.run", "contextjudge.engine._run",
                             "contextjudge.cases.identity", "contextjudge.compat.ragas.metrics",
                             "contextjudge.judges", "contextjudge.judges.client", "contextjudge.cli.trust",
                             "contextjudge.__main__", "contextjudge._cli_trust"])
    assert found == ["contextjudge.engine.run", "contextjudge.judges.client"]


# Public classes and functions that a module defines but does not export, each with its reason. Anything else
# public and defined in a public module must be in its __all__.
NOT_EXPORTED = {
    "contextjudge.cli": "command-line plumbing; the interface is the `contextjudge` command",
    "contextjudge.pytest_plugin": "pytest hooks, found by pytest by name",
    "contextjudge._recommend": "the `contextjudge recommend` command's plumbing",
    "contextjudge_langchain.demo": "the demo's own steps; the interface is `contextjudge demo`",
    "contextjudge.multimodal": "cross-layer helpers, to be split by layer (issue 13, point 2)",
    "contextjudge._tracing": "the runner's side of @observe (run_traces, observed_cases)",
}


def public_modules():
    import importlib
    import pkgutil

    out = []
    for top in ("contextjudge", "contextjudge_langchain", "contextjudge_llama_index"):
        pkg = importlib.import_module(top)
        out.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                out.append(importlib.import_module(info.name))
    return out


def all_problems(mod) -> list[str]:
    """What is wrong with ``mod.__all__``: missing, unsorted (constants first, then sorted), duplicated, naming
    what the module lacks, or leaving out a public class or function the module defines."""
    import inspect
    import types

    names = getattr(mod, "__all__", None)
    if names is None:
        return [f"{mod.__name__} has no __all__"]
    names = list(names)
    out = []
    if names != sorted(names, key=lambda s: (not s.isupper(), s)):
        out.append(f"{mod.__name__}.__all__ is not sorted (constants first, then sorted())")
    if len(set(names)) != len(names):
        out.append(f"{mod.__name__}.__all__ repeats a name")
    out += [f"{mod.__name__}.__all__ names {n!r}, which it does not have" for n in names if not hasattr(mod, n)]
    if mod.__name__ not in NOT_EXPORTED:
        for n, obj in vars(mod).items():
            if n.startswith("_") or isinstance(obj, types.ModuleType) or n in names:
                continue
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and getattr(obj, "__module__", None) == mod.__name__:
                out.append(f"{mod.__name__} defines public {n!r} but leaves it out of __all__")
    return out


def test_every_public_module_has_a_sorted_and_complete_all():
    mods = public_modules()
    assert {"contextjudge.metrics", "contextjudge.store", "contextjudge.compat.ragas", "contextjudge_langchain",
            "contextjudge_llama_index", "contextjudge.testing"} <= {m.__name__ for m in mods}
    problems = [p for m in mods for p in all_problems(m)]
    assert problems == []


def test_the_all_check_can_fail():
    import types

    bad = types.ModuleType("fake_public")
    exec("__all__ = ['b', 'a', 'gone']\ndef a(): pass\ndef b(): pass\nclass Forgotten: pass\n", bad.__dict__)
    found = all_problems(bad)
    assert any("not sorted" in p for p in found)
    assert any("'gone'" in p for p in found)
    assert any("'Forgotten'" in p for p in found)
    assert all_problems(types.ModuleType("no_all")) == ["no_all has no __all__"]


def test_import_reads_no_network_and_imports_no_llamaindex():
    code = textwrap.dedent("""
        import sys
        events = []
        def hook(event, args):
            if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
                events.append(event)
        sys.addaudithook(hook)
        import contextjudge, contextjudge.metrics, contextjudge.testing
        assert not [m for m in sys.modules if m.startswith("llama_index")], "llama_index imported"
        assert not events, events
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_resolve_model_strings(monkeypatch):
    from langchain_core.language_models import BaseChatModel

    from contextjudge.judges import resolve_model
    from contextjudge.testing import FakeJudge

    j = FakeJudge()
    assert resolve_model(j) is j
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("CONTEXTJUDGE_MODEL", raising=False)
    m = resolve_model("openai:gpt-4.1-mini")
    assert isinstance(m, BaseChatModel) and m.model_name == "gpt-4.1-mini"
    assert resolve_model(None).model_name == "gpt-4.1-mini"
    monkeypatch.setenv("CONTEXTJUDGE_MODEL", "gpt-4o-mini")
    assert resolve_model(None).model_name == "gpt-4o-mini"


def _fake_langchain(monkeypatch, behaviour):
    """A stand-in ``langchain.chat_models`` whose ``init_chat_model`` does ``behaviour(name)``."""
    import types

    calls = []
    pkg, sub = types.ModuleType("langchain"), types.ModuleType("langchain.chat_models")

    def init_chat_model(name, **kwargs):
        calls.append(name)
        return behaviour(name)

    sub.init_chat_model = init_chat_model
    pkg.chat_models = sub
    monkeypatch.setitem(sys.modules, "langchain", pkg)
    monkeypatch.setitem(sys.modules, "langchain.chat_models", sub)
    return calls


def test_provider_model_strings_go_to_init_chat_model(monkeypatch):
    from contextjudge.judges import resolve_model
    from contextjudge.testing import FakeJudge

    made = FakeJudge(model_name="claude-judge")
    calls = _fake_langchain(monkeypatch, lambda name: made)
    assert resolve_model("anthropic:claude-sonnet") is made
    assert resolve_model("  ollama:llama3  ") is made
    assert calls == ["anthropic:claude-sonnet", "ollama:llama3"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    m = resolve_model("OpenAI:gpt-4.1-mini")  # openai never needs init_chat_model
    assert type(m).__name__ == "ChatOpenAI" and m.model_name == "gpt-4.1-mini" and len(calls) == 2


def test_provider_model_strings_fail_clearly(monkeypatch):
    from contextjudge import JudgeUnavailableError
    from contextjudge.judges import resolve_model

    def missing(name):
        raise ImportError("Unable to import langchain_anthropic. Please install with `pip install -U langchain-anthropic`")

    _fake_langchain(monkeypatch, missing)
    with pytest.raises(JudgeUnavailableError, match="langchain-anthropic"):
        resolve_model("anthropic:claude-sonnet")

    def unknown(name):
        raise ValueError("Unsupported model_provider='nosuch'")

    _fake_langchain(monkeypatch, unknown)
    with pytest.raises(JudgeUnavailableError, match="nosuch"):
        resolve_model("nosuch:model")
    with pytest.raises(JudgeUnavailableError, match="OPENAI_API_KEY"):  # no key: a clear error, not the SDK's
        resolve_model("gpt-4.1-mini")
    monkeypatch.setitem(sys.modules, "langchain", None)  # not installed at all
    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    with pytest.raises(JudgeUnavailableError, match="pip install langchain langchain-anthropic"):
        resolve_model("anthropic:claude-sonnet")

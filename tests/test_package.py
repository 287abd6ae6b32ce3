"""Package hygiene: public surface, no LlamaIndex, no network at import."""

import subprocess
import sys
import textwrap

import pytest

import contextjudge
import contextjudge.metrics


# Public classes and functions that a module defines but does not export, each with its reason. Anything else
# public and defined in a public module must be in its __all__.
NOT_EXPORTED = {
    "contextjudge.cli": "command-line plumbing; the interface is the `contextjudge` command",
    "contextjudge.pytest_plugin": "pytest hooks, found by pytest by name",
    "contextjudge.recommend": "the `contextjudge recommend` command's plumbing",
    "contextjudge_langchain.demo": "the demo's own steps; the interface is `contextjudge demo`",
    "contextjudge.multimodal": "cross-layer helpers, to be split by layer (issue 13, point 2)",
    "contextjudge.tracing": "the runner's side of @observe (run_traces, observed_cases)",
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

    from contextjudge import resolve_model
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
    from contextjudge import resolve_model
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
    from contextjudge import JudgeUnavailableError, resolve_model

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

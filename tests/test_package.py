"""Package hygiene: public surface, no LlamaIndex, no network at import."""

import subprocess
import sys
import textwrap

import contextjudge
import contextjudge.metrics


def test_all_is_sorted_and_complete():
    for mod in (contextjudge, contextjudge.metrics):
        names = [n for n in mod.__all__]
        assert names == sorted(names, key=lambda s: (s.upper() != s, s)) or names == sorted(names)
        for n in names:
            assert hasattr(mod, n), n


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

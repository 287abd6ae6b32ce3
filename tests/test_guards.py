"""The repository-wide test guards (``conftest.py`` at the root): offline, no hosted judge, and they can fail.

The checks are exercised directly, never by reaching for a real address: a broken guard must not send traffic.
"""

import importlib.util
import os
import socket
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("_root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST", b"127.0.0.1"])
def test_loopback_is_allowed(host):
    guard.check_host(host)
    guard.check_address(socket.AF_INET, (host, 8080))


@pytest.mark.parametrize("host", ["api.openai.com", "8.8.8.8", "10.0.0.1", "192.168.1.20", "2001:db8::1",
                                  "example.com", "0.0.0.1"])
def test_anything_beyond_loopback_is_refused_with_what_to_use_instead(host):
    with pytest.raises(guard.NetworkBlocked, match="FakeJudge"):
        guard.check_host(host)
    with pytest.raises(guard.NetworkBlocked, match=str(host)):
        guard.check_address(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, 443))


def test_unix_sockets_are_allowed():
    guard.check_address(getattr(socket, "AF_UNIX", 1), "/tmp/.s.PGSQL.5432")


def test_the_guard_is_installed_for_this_session():
    assert getattr(socket.socket.connect, "__contextjudge_guard__", False)
    assert getattr(socket.socket.connect_ex, "__contextjudge_guard__", False)
    assert getattr(socket.getaddrinfo, "__contextjudge_guard__", False)
    assert os.environ.get("CONTEXTJUDGE_TEST_GUARD") == "1"
    for name in ("OPENAI_API_KEY", "CONTEXTJUDGE_MODEL", "ANTHROPIC_API_KEY"):
        assert name not in os.environ


def test_the_default_judge_is_offline_when_no_key_is_set():
    from contextjudge.judges import resolve_model

    assert type(resolve_model(None)).__name__ == "LocalJudge"


def test_loopback_connections_still_work():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        with socket.create_connection(srv.getsockname(), timeout=2):
            pass
    finally:
        srv.close()

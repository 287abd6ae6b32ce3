"""Guards for every test in this repository (core and both integrations): no real model, no network.

Tests are offline and deterministic. For the whole session, the keys and settings that would select a hosted judge
are removed, and any socket connection or name lookup beyond loopback fails at once with a message naming the
address, before a packet leaves the machine. Loopback servers (the fault server, llama.cpp, PostgreSQL, Chromium's
page server, Ray later) keep working.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

HOSTED_MODEL_SETTINGS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CONTEXTJUDGE_MODEL", "ANTHROPIC_API_KEY",
                         "AZURE_OPENAI_API_KEY", "GOOGLE_API_KEY", "MISTRAL_API_KEY", "COHERE_API_KEY",
                         "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", ""}


class NetworkBlocked(OSError):
    """A test tried to reach something beyond this machine."""


def check_host(host: object) -> None:
    """Raise ``NetworkBlocked`` unless ``host`` is a loopback address or name (or a Unix socket path)."""
    if isinstance(host, (bytes, bytearray)):
        host = host.decode()
    name = str(host or "").strip("[]").split("%")[0].lower()
    if name in LOOPBACK_NAMES:
        return
    try:
        if ipaddress.ip_address(name).is_loopback:
            return
    except ValueError:
        pass
    raise NetworkBlocked(f"this test tried to reach {host!r}: tests run offline and may only use loopback servers "
                         "(127.0.0.1, ::1, localhost). Use contextjudge.testing.FakeJudge, model='local', or a "
                         "FaultServer on loopback.")


def check_address(family: int, address: object) -> None:
    """Raise ``NetworkBlocked`` for a socket address beyond loopback; Unix sockets are always allowed."""
    if family == getattr(socket, "AF_UNIX", None) or isinstance(address, (str, bytes)):
        return
    if isinstance(address, tuple) and address:
        check_host(address[0])


def guarded(real_connect, real_connect_ex, real_getaddrinfo):
    """``socket.socket.connect``, ``connect_ex`` and ``socket.getaddrinfo`` wrapped so that anything beyond loopback
    raises ``NetworkBlocked`` (used here and by ``tests/_offline_guard.py`` in test subprocesses)."""

    def connect(self, address):
        check_address(self.family, address)
        return real_connect(self, address)

    def connect_ex(self, address):
        check_address(self.family, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        check_host(host)
        return real_getaddrinfo(host, *args, **kwargs)

    return connect, connect_ex, getaddrinfo


@pytest.fixture(autouse=True, scope="session")
def _offline_and_no_real_model():
    mp = pytest.MonkeyPatch()
    for name in HOSTED_MODEL_SETTINGS:
        mp.delenv(name, raising=False)
    connect, connect_ex, getaddrinfo = guarded(socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)
    connect.__contextjudge_guard__ = connect_ex.__contextjudge_guard__ = True
    getaddrinfo.__contextjudge_guard__ = True
    mp.setattr(socket.socket, "connect", connect)
    mp.setattr(socket.socket, "connect_ex", connect_ex)
    mp.setattr(socket, "getaddrinfo", getaddrinfo)
    os.environ["CONTEXTJUDGE_TEST_GUARD"] = "1"
    try:
        yield
    finally:
        mp.undo()
        os.environ.pop("CONTEXTJUDGE_TEST_GUARD", None)

"""Imported first by subprocesses that tests start (README snippets): the same no-network guard as ``conftest.py``."""

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import HOSTED_MODEL_SETTINGS, check_address, check_host  # noqa: E402

sys.path.pop(0)
for _name in HOSTED_MODEL_SETTINGS:
    os.environ.pop(_name, None)
_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo


def _guarded_connect(self, address):
    check_address(self.family, address)
    return _connect(self, address)


def _guarded_connect_ex(self, address):
    check_address(self.family, address)
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):
    check_host(host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = (_guarded_connect, _guarded_connect_ex,
                                                                       _guarded_getaddrinfo)

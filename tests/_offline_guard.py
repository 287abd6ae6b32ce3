"""Imported first by subprocesses that tests start (README snippets): the same no-network guard as ``conftest.py``."""

import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import HOSTED_MODEL_SETTINGS, guarded  # noqa: E402

sys.path.pop(0)
for _name in HOSTED_MODEL_SETTINGS:
    os.environ.pop(_name, None)
socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = guarded(
    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)

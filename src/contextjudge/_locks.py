"""One OS file lock, taken without waiting: the SQLite worker's lock on its store and a Ray actor's lock on its core.

The lock belongs to the open file, so it is released when the file is closed or the process ends, however it ends.
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["try_lock"]


def try_lock(fh: IO[Any]) -> bool:
    """An exclusive, non-blocking lock on an open file; False when another process holds it."""
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        try:
            fh.seek(0)
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    import fcntl

    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False

"""Keep a worker's process off part of the machine: the cores it may use, its threads pinned to them, numpy's BLAS
threads and its niceness (``limit_cpu``, applied when ``Worker.run`` starts and by ``contextjudge worker`` before the
judge is built; the Ray engine's actors pin themselves with ``usable_cores`` and ``pin_threads``)."""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["limit_cpu", "pin_threads", "usable_cores"]

logger = logging.getLogger("contextjudge")

_APPLIED: dict[str, Any] = {}


def _tids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def usable_cores() -> list[int]:
    """The cores this process may run on, in order (its affinity where the platform has one, else every core)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def pin_threads(cores: list[int]) -> None:
    """Pin every thread of this process to ``cores`` (Linux keeps an affinity per thread; threads started later
    inherit it from the one that starts them)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    for tid in _tids():
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def limit_cpu(cpus: int | None = None, nice: int | None = 10) -> str:
    """Keep this process off part of the machine, for every thread it has and starts: affinity to ``cpus`` cores
    (None: all usable but one, at least one; the highest-numbered, so an app pinned to the first cores keeps them;
    0: unchanged), numpy's BLAS threads to as many (threadpoolctl, when installed), and its niceness raised by
    ``nice`` (None or 0: unchanged). Process-wide and meant for the worker's own process; applied once (a second
    call with the same values changes nothing). The embedded judge sizes its encoder's thread pool from the
    process's affinity when it loads: call this before building it. Returns a phrase for the startup line."""
    key = f"{cpus}:{nice}"
    if key in _APPLIED:
        return _APPLIED[key]
    said = []
    usable = usable_cores()
    if cpus != 0:
        n = max(1, len(usable) - 1) if cpus is None else max(1, min(int(cpus), len(usable)))
        chosen = usable[-n:]
        if chosen != usable:
            pin_threads(chosen)
        said.append(f"{n} of {len(usable)} CPUs" + (f" (cores {','.join(map(str, chosen))})"
                                                      if hasattr(os, "sched_setaffinity") else ""))
        try:
            from threadpoolctl import threadpool_limits

            _APPLIED["blas"] = threadpool_limits(limits=n)  # kept: the limit holds while the object lives
        except Exception:  # not installed, or no BLAS loaded yet
            logger.debug("contextjudge: BLAS threads left as they are", exc_info=True)
    else:
        said.append(f"all {len(usable)} CPUs")
    if nice:
        try:
            if hasattr(os, "setpriority"):  # Linux counts niceness per thread: set it on each
                for tid in _tids():
                    try:
                        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + int(nice)))
                    except OSError:
                        pass
            else:  # pragma: no cover
                os.nice(int(nice))
            said.append(f"nice +{int(nice)}")
        except (AttributeError, OSError) as exc:
            said.append(f"nice unchanged ({exc})")
    _APPLIED[key] = ", ".join(said)
    return _APPLIED[key]

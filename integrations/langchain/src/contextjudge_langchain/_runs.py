"""The handler's run book: the open LangChain runs as a tree of ``RunRecord``s, and where each root's results go.

``RunBook`` records every run start and end under its own lock, drops judge runs (``JUDGE_TAG``) with their
children, and hands each finished root (its tree complete) to the ``on_root`` callable it was built with. It also
notes, per root, the handlers, tags, metadata and ``configurable`` the call was made with, so results can be sent
back to the other handlers and a thread id given only in ``configurable`` is found.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables.config import var_child_runnable_config

from contextjudge.capture import CHAIN_KEY, JUDGE_TAG, RUN_METADATA_KEY, TAGS_KEY
from contextjudge.otel import span_context_now

from ._assemble import THREAD_KEYS, RunRecord

logger = logging.getLogger("contextjudge")

_MAX_TARGETS = 20_000


@dataclass
class Target:
    """Where a root run's results go: the handlers, tags and metadata the root run was called with."""

    handlers: list[Any]
    tags: list[str]
    metadata: dict[str, Any]
    thread_id: str | None = None  # from config["configurable"], which LangChain keeps out of run metadata


class RunBook:
    """The open runs of one handler, keyed by ``UUID.int`` (hashing a UUID runs Python code, and this path runs for
    every run); ``on_root`` receives each root run once it has ended."""

    def __init__(self, on_root: Callable[[RunRecord], None]) -> None:
        self._on_root = on_root
        self._lock = threading.Lock()
        self._ignored: set[int] = set()  # judge runs and their children
        self._runs: dict[int, RunRecord] = {}  # open runs
        self._noted: set[int] = set()  # open roots whose target is known
        self._clock = itertools.count()
        self._targets: OrderedDict[int, tuple[Any, Any, Any, Any]] = OrderedDict()  # root run id -> target

    def is_empty(self) -> bool:
        """True when no run is open and no judge run is being ignored (nothing left behind)."""
        with self._lock:
            return not self._runs and not self._ignored

    def open(self, run_type: str, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None,
             metadata: dict[str, Any] | None, name: str | None, inputs: Any, tool_call_id: str | None = None) -> None:
        """Record a run start; never raises (a failure is logged and the run goes on uncaptured)."""
        try:
            key = run_id.int
            # where the run sits in the app's OpenTelemetry trace, read on the app's thread (None, at the cost of one
            # dict lookup, when the app does not use OpenTelemetry): the request's span, the retriever's span
            where = span_context_now() if parent_run_id is None or run_type == "retriever" else None
            with self._lock:
                if parent_run_id is None:
                    if tags and JUDGE_TAG in tags:
                        self._ignored.add(key)
                        return
                    run = self._runs[key] = RunRecord(run_id, None, run_id, run_type, name or run_type, inputs, tags,
                                                      metadata, next(self._clock))
                    run.otel = where
                    return
                parent_key = parent_run_id.int
                if parent_key in self._ignored or (tags and JUDGE_TAG in tags):
                    self._ignored.add(key)
                    return
                parent = self._runs.get(parent_key)
                if parent is None:  # its parent was never seen (e.g. a LangSmith @traceable): a root
                    run = RunRecord(run_id, None, run_id, run_type, name or run_type, inputs, tags, metadata,
                                    next(self._clock))
                else:
                    run = RunRecord(run_id, parent.id, parent.root_id, run_type, name or run_type, inputs, tags,
                                    metadata, next(self._clock))
                    parent.child_runs.append(run)
                if tool_call_id is not None:
                    run.tool_call_id = tool_call_id
                if parent is None and where is None:
                    where = span_context_now()
                run.otel = where
                self._runs[key] = run
                if parent is not None and run.root_id.int not in self._noted:
                    self._note_target(run, parent_run_id)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: capture failed on a run start; the run goes on uncaptured")

    def close(self, run_id: UUID, outputs: Any = None, error: BaseException | None = None) -> None:
        """Record a run end; a root's end hands the finished tree to ``on_root``. Never raises."""
        try:
            key = run_id.int
            with self._lock:
                run = self._runs.pop(key, None)
                if run is None:
                    self._ignored.discard(key)  # a judge run, or one started before this handler was attached
                    return
                run.outputs = outputs
                if error is not None:
                    run.error = f"{type(error).__name__}: {error}"
                run.end = next(self._clock)
                if run.parent_run_id is None:
                    self._noted.discard(key)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: capture failed on a run end; the run goes on uncaptured")
            return
        if run.parent_run_id is None:
            self._on_root(run)  # assembled on a worker: the tree is complete and no callback touches it again

    def _note_target(self, run: RunRecord, parent_run_id: UUID) -> None:
        """Remember which handlers the root run was called with, for sending results back later (under the lock).

        LangChain does not show a handler the callback manager, but a child run starts inside its parent's child
        config, whose callback manager carries the root's inheritable handlers.
        """
        config = var_child_runnable_config.get()
        manager = config.get("callbacks") if config else None
        if not config or not isinstance(manager, BaseCallbackManager) or manager.parent_run_id != parent_run_id:
            return
        key = run.root_id.int
        self._noted.add(key)
        # kept as they are (LangChain makes a new manager, with new lists, for every child run): read into a
        # Target only when a result is sent back or the case is assembled, off the request path
        self._targets[key] = (manager.inheritable_handlers, manager.inheritable_tags, manager.inheritable_metadata,
                              config.get("configurable"))
        if len(self._targets) > _MAX_TARGETS:
            self._targets.popitem(last=False)

    def target(self, root_id: str) -> Target | None:
        """Where a root run's results go, or None when it was not noted or is forgotten."""
        try:
            key = UUID(root_id).int
        except (TypeError, ValueError):
            return None
        with self._lock:
            found = self._targets.get(key)
        if found is None:
            return None
        handlers, tags, metadata, configurable = found
        configurable = configurable or {}
        thread = next((str(configurable[k]) for k in THREAD_KEYS
                       if isinstance(configurable.get(k), (str, int)) and str(configurable[k])), None)
        return Target(list(handlers), list(tags), dict(metadata), thread)

    def forget_target(self, root_id: UUID) -> None:
        """Drop a root's target: nothing will be scored for that run."""
        with self._lock:
            self._targets.pop(root_id.int, None)


def call_keys(root: Any) -> dict[str, Any]:
    """What Sampling's filters read of a root run (``contextjudge.capture``'s metadata keys): the chain's name, and
    the tags and metadata the call was made with."""
    return {CHAIN_KEY: root.name, TAGS_KEY: list(root.tags or ()), RUN_METADATA_KEY: dict(root.metadata or {})}

"""From finished LangChain root runs to test cases, off the request path.

``Assembler`` is the worker thread that takes finished roots from the run book in batches; ``RootCases`` turns one
root into a ``CapturedCase`` per retrieval (see ``_assemble``) and submits them, adds the turn of a thread to the
handler's ``Conversations``, and remembers the latest roots that retrieved nothing (``without_retrieval``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from contextjudge.capture import RETRIEVER_NAME_KEY, THREAD_KEY, CapturedCase, CaptureSession
from contextjudge.cases.identity import golden_id_of

from ._assemble import add_tool_retrievals, retrievals, thread_id_of, walk
from ._runs import RunBook, call_keys
from ._threads import Conversations

logger = logging.getLogger("contextjudge")


class RootCases:
    """Assembles the handler's finished roots; ``options()`` gives the handler's current ``retrieval_tools`` and
    whether threads form conversations; ``shapes`` describes what is captured, for the no-retrieval warning."""

    def __init__(self, session: CaptureSession, runs: RunBook, conversations: Conversations, shapes: str, *,
                 options: Callable[[], tuple[frozenset[str], bool]]) -> None:
        self._session = session
        self._runs = runs
        self._conversations = conversations
        self._shapes = shapes
        self._options = options
        self._lock = threading.Lock()
        # the latest root runs that retrieved nothing: root run id -> what they ran (CaptureSession.note_root)
        self.without_retrieval: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def capture(self, root: Any) -> None:
        """Submit the test cases of one finished root run (logged, never raised, when that fails)."""
        try:
            self._assemble(root)
        except Exception:  # noqa: BLE001
            logger.exception("contextjudge: could not assemble test cases from LangChain run %s", root.id)

    def _assemble(self, root: Any) -> None:
        root_id = str(root.id)
        walked = walk(root)
        retrieval_tools, follow_threads = self._options()
        if any(r.run_type == "tool" for r, _ in walked) and add_tool_retrievals(root, retrieval_tools):
            walked = walk(root)  # with the retrieval tools' outputs as retrievals
        runs = [r for r, _ in walked]
        golden_id = None
        for r in runs:
            if not r.metadata:
                continue
            gid = golden_id_of(r.metadata)
            if gid is not None:
                golden_id = str(gid)
                break
        thread_id = thread_id_of(runs)
        target = self._runs.target(root_id)
        if thread_id is None and target is not None:
            thread_id = target.thread_id
        found = retrievals(root, thread_id=thread_id, runs=walked)
        ran = None if found else what_ran(root, runs)
        self._session.note_root(len(found), ran, self._shapes)
        if ran is not None:
            with self._lock:
                self.without_retrieval[root_id] = ran  # read by contextjudge eval's adapter
                while len(self.without_retrieval) > 1000:
                    self.without_retrieval.popitem(last=False)
        keys = call_keys(root)
        if thread_id is not None:
            keys[THREAD_KEY] = thread_id
        for item in found:
            meta = dict(item.case.additional_metadata or {})
            meta.update(keys)
            meta[RETRIEVER_NAME_KEY] = item.name
            captured = CapturedCase(test_case=item.case, source=item.name, root_run_id=root_id, metadata=meta,
                                    golden_id=golden_id)
            item.case.id = captured.case_id
            self._session.submit(captured)
        if not found and thread_id is None:
            self._runs.forget_target(root.id)  # nothing will be scored for this run
        if thread_id is not None and follow_threads and root.run_type not in ("llm", "chat_model"):
            self._conversations.add_turn(thread_id, root, found, golden_id)


class Assembler:
    """Turns finished root runs into test cases on a worker thread, so the app's call returns without waiting.

    Roots are handed over in batches: ``put`` only appends, and the worker wakes every ``interval`` seconds, when
    ``batch`` roots are waiting, or when someone waits for it, which saves a thread wake-up per call. The thread
    starts on demand and leaves after two idle seconds. ``wait()`` returns once everything handed over is assembled;
    the handler's accessors call it, so a case is visible as soon as its call has returned.
    """

    def __init__(self, work: Callable[[Any], None], *, interval: float = 0.05, batch: int = 64) -> None:
        self._work = work
        self._interval = interval
        self._batch = batch
        self._cond = threading.Condition()
        self._items: list[Any] = []
        self._pending = 0
        self._waiters = 0
        self._thread: threading.Thread | None = None

    def put(self, root: Any) -> None:
        """Hand over a finished root run (only appends; the worker thread starts on demand)."""
        with self._cond:
            self._items.append(root)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="contextjudge-assembler", daemon=True)
                self._thread.start()
            elif len(self._items) >= self._batch or self._waiters:
                self._cond.notify_all()

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                if not self._items:
                    self._cond.wait(self._interval)
                items, self._items = self._items, []
                if not items:
                    if time.monotonic() - idle_since > 2.0:
                        self._thread = None
                        return
                    continue
            idle_since = time.monotonic()
            for root in items:
                try:
                    self._work(root)
                except Exception:  # noqa: BLE001 - _work logs its own failures; this keeps the thread alive
                    logger.exception("contextjudge: test-case assembly failed")
            with self._cond:
                self._pending -= len(items)
                self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over is assembled; False when ``timeout`` passed first."""
        if self._thread is not None and threading.current_thread() is self._thread:
            return True  # called from work running here: nothing to wait for
        with self._cond:
            self._waiters += 1
            try:
                self._cond.notify_all()
                return self._cond.wait_for(lambda: self._pending == 0, timeout)
            finally:
                self._waiters -= 1


def what_ran(root: Any, runs: list[Any]) -> dict[str, Any]:
    """What a root run ran, for the warning about calls with no retrieval (``CaptureSession.note_root``)."""
    nodes, tools, llms = [], [], 0
    for r in runs:
        if r.run_type in ("llm", "chat_model"):
            llms += 1
        elif r.run_type == "tool":
            tools.append(r.name)
        node = (r.metadata or {}).get("langgraph_node")
        if isinstance(node, str) and not node.startswith("__") and node not in nodes:
            nodes.append(node)
    seen: dict[str, Any] = {"chains": [root.name] if root.run_type not in ("llm", "chat_model") else []}
    if nodes:
        seen["graph nodes"] = nodes
    if tools:
        seen["tools"] = tools
    seen["LLM calls"] = llms
    return seen

"""The event loop never waits on the store: store calls made from coroutines run in the store's threads.

A store whose every call takes 100 ms (a distant database) is given to ``evaluate``. If a store call ran on the
event loop, no judge call could take a step while it lasted; here a judge call in flight waits until it sees a store
call under way, which it can only see when the store runs off the loop. Nothing is timed: the assertions are on what
overlapped with what, and on the order of the writes.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge._aio import STORE_THREADS, AsyncStore, in_store_thread
from contextjudge.judges._cache import VerdictCache
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
from contextjudge.store import ResultsStore
from contextjudge.testing import FakeJudge

SLOW = 0.1


class Watch:
    """What the store and the judge did, in the order they did it, from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, Any]] = []
        self.busy = 0
        self.store_threads: set[str] = set()
        self.loop_thread: str | None = None

    def note(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)  # type: ignore[arg-type]


class SlowStore(ResultsStore):
    """A store whose calls each take 100 ms, as a database on another host would (its calls from coroutines may run
    side by side, as PostgreSQL's do)."""

    watch: Watch

    def __init__(self, target: str, watch: Watch) -> None:
        super().__init__(target)
        self.watch = watch
        self.serial_calls = False

    def _slow(self, name: str, key: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        w = self.watch
        with w.lock:
            w.busy += 1
            w.events.append(("store", f"{name}:start", key))
            w.store_threads.add(threading.current_thread().name)
        try:
            threading.Event().wait(SLOW)
            return fn(*args, **kwargs)
        finally:
            with w.lock:
                w.busy -= 1
                w.events.append(("store", f"{name}:end", key))

    def begin_run(self, *a: Any, **kw: Any) -> Any:
        return self._slow("begin_run", None, super().begin_run, *a, **kw)

    def end_run(self, *a: Any, **kw: Any) -> Any:
        return self._slow("end_run", None, super().end_run, *a, **kw)

    def save_case(self, run_id: str, key: str, *a: Any) -> Any:
        return self._slow("save_case", key, super().save_case, run_id, key, *a)

    def save_result(self, run_id: str, key: str, *a: Any) -> Any:
        return self._slow("save_result", key, super().save_result, run_id, key, *a)

    def save_judge_call(self, *a: Any) -> Any:
        return self._slow("save_judge_call", None, super().save_judge_call, *a)

    def get_verdict(self, key: str) -> Any:
        return self._slow("get_verdict", None, super().get_verdict, key)

    def put_verdict(self, key: str, value: Any) -> Any:
        return self._slow("put_verdict", None, super().put_verdict, key, value)


class WatchingJudge(FakeJudge):
    """A scripted judge whose first call, once sent, waits (asynchronously) until it sees a store call under way."""

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        w: Watch = WATCH[0]
        with w.lock:
            first = not any(e[0] == "judge" for e in w.events)
            w.events.append(("judge", "start", None))
            w.loop_thread = threading.current_thread().name
        if first:
            for _ in range(1000):  # at most ~10 s: only reached when the loop is blocked by every store call
                if w.busy:
                    w.note("judge", "saw the store busy", None)
                    break
                await asyncio.sleep(0.01)
        out = await super()._agenerate(messages, stop, run_manager, **kwargs)
        w.note("judge", "end", None)
        return out


WATCH: list[Watch] = []


@pytest.fixture
def watch():
    WATCH[:] = [Watch()]
    yield WATCH[0]
    WATCH.clear()


def _cases(n: int) -> list[LLMTestCase]:
    return [LLMTestCase(input=f"What grew in quarter {i}?", actual_output=f"Sales grew {i} percent.",
                        expected_output=f"Sales grew {i} percent.",
                        retrieval_context=[f"Sales grew {i} percent in quarter {i}.", "The office moved."])
            for i in range(n)]


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_judge_calls_go_on_while_a_slow_store_is_written(where, tmp_path, watch, request):
    if where == "postgres":
        store = SlowStore(request.getfixturevalue("pg_url"), watch)
        request.getfixturevalue("wipe")(store)  # importing conftest by name would shadow the integrations' own
    else:
        store = SlowStore(str(tmp_path / "slow.db"), watch)
    judge = WatchingJudge(delay=0.02)
    metrics = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
               ContextualRelevancyMetric(model=judge)]
    result = evaluate(_cases(6), metrics, store=store, max_concurrency=3, show_progress=False)

    assert all(m.error is None for tr in result.test_results for m in tr.metrics_data)
    # a judge call in flight took steps while a store call was under way: the loop was not waiting on the store
    assert ("judge", "saw the store busy", None) in watch.events
    # the store ran in its own threads, never on the loop's
    assert watch.store_threads and all(t.startswith("contextjudge-store") for t in watch.store_threads)
    assert watch.loop_thread not in watch.store_threads
    # order where it matters: a case's row is written before any of its results, and the run ends last
    order = {(e[1], e[2]): i for i, e in enumerate(watch.events) if e[0] == "store"}
    case_ends = {e[2]: i for i, e in enumerate(watch.events) if e[1] == "save_case:end"}
    for i, e in enumerate(watch.events):
        if e[1] == "save_result:start":
            assert case_ends[e[2]] < i, f"a result of {e[2]} was written before its case"
    last_call = max(i for i, e in enumerate(watch.events) if e[1] == "save_judge_call:end")
    assert last_call < order[("end_run:start", None)]
    # and everything is there when evaluate returns: cases, results, every judge call's row
    loaded = store.load_run(result.run_id)
    assert len(loaded.test_results) == 6
    assert sum(len(tr.metrics_data) for tr in loaded.test_results) == 18
    assert len(store.judge_calls(result.run_id)) == result.usage.calls + result.usage.cache_hits
    store.close()


def test_a_sqlite_store_is_called_from_one_thread(tmp_path):
    """A SQLite store's writers take turns: its calls from coroutines go to one thread of their own."""
    names: list[str] = []

    class Seen(ResultsStore):
        def get_verdict(self, key: str) -> Any:
            names.append(threading.current_thread().name)
            return super().get_verdict(key)

    store = Seen(str(tmp_path / "one.db"))

    async def go() -> list[Any]:
        return await asyncio.gather(*(AsyncStore(store).get_verdict(f"k{i}") for i in range(5)))

    assert asyncio.run(go()) == [None] * 5
    store.close()
    assert len(names) == 5 and set(names) == {"contextjudge-store-sqlite_0"}


def test_the_verdict_cache_reads_the_store_off_the_loop(tmp_path):
    """``aget`` / ``aput`` reach the backing store in the store's threads; a verdict another call remembered while
    the store was being read is found."""
    seen: list[str] = []

    class Backend:
        def get_verdict(self, key: str) -> Any:
            seen.append(threading.current_thread().name)
            cache._remember(key, {"verdicts": {"n1": "yes"}})  # noqa: SLF001 - another call finished meanwhile
            return None

        def put_verdict(self, key: str, value: Any) -> None:
            seen.append(threading.current_thread().name)

    cache = VerdictCache(backend=Backend())

    async def go() -> Any:
        hit = await cache.aget("k")
        await cache.aput("k2", {"verdicts": {}})
        return hit

    assert asyncio.run(go()) == {"verdicts": {"n1": "yes"}}
    assert len(seen) == 2 and all(t.startswith("contextjudge-store") for t in seen)


def test_async_store_is_bounded_and_keeps_errors():
    """At most STORE_THREADS store calls run at once, and a store's exception reaches the awaiting coroutine."""
    lock = threading.Lock()
    now, peak = [0], [0]
    release = threading.Event()

    class Store:
        def call(self) -> None:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            release.wait(5)
            with lock:
                now[0] -= 1

        def broken(self) -> None:
            raise RuntimeError("the database is gone")

    async def go() -> None:
        calls = [asyncio.ensure_future(AsyncStore(Store()).call()) for _ in range(STORE_THREADS + 4)]
        while True:  # until the pool is full: it never takes more
            with lock:
                if now[0] == STORE_THREADS:
                    break
            await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*calls)
        with pytest.raises(RuntimeError, match="gone"):
            await in_store_thread(Store().broken)

    asyncio.run(go())
    assert peak[0] == STORE_THREADS

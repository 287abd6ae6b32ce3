"""What ``contextjudge eval --app module:object`` uses to run goldens through a LlamaIndex engine.

Registered under the entry-point group ``contextjudge.apps`` as ``llama_index``. Importing this module does not
import LlamaIndex: ``matches`` looks at class names only, and ``collect`` imports what it needs.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from contextjudge.capture import AppAdapter, CapturedCase
from contextjudge.goldens import Goldens, load_goldens
from contextjudge.errors import ConfigurationTypeError
from contextjudge.cases.identity import GOLDEN_ID_KEY

__all__ = ["LlamaIndexAppAdapter", "adapter"]

logger = logging.getLogger("contextjudge")

_KINDS = {"BaseChatEngine": "chat", "BaseQueryEngine": "query", "BaseRetriever": "retrieve"}


def _kind(obj: Any) -> str | None:
    for c in type(obj).__mro__:
        k = _KINDS.get(c.__name__)
        if k is not None and c.__module__.startswith("llama_index."):
            return k
    return None


class LlamaIndexAppAdapter(AppAdapter):
    """Runs goldens through a LlamaIndex query engine, chat engine or retriever, capturing with mode "off"."""

    name = "llama_index"

    def matches(self, obj: Any) -> bool:
        return _kind(obj) is not None

    def collect(self, obj: Any, goldens: Goldens | Any, *, concurrency: int = 4) -> list[CapturedCase]:
        """One captured case per golden, in the goldens' order, with expected_output filled from the golden.

        Query engines and retrievers run ``concurrency`` goldens at a time (threads); a chat engine runs them one
        after another, each as a fresh one-turn conversation (``reset()`` before each). A golden whose call
        raises is logged and left out.
        """
        from llama_index.core.instrumentation.dispatcher import instrument_tags  # noqa: PLC0415

        from ._capture import GOLDEN_INDEX_TAG, current_sink, router  # noqa: PLC0415
        from contextjudge.capture import CaptureSession  # noqa: PLC0415

        from ._results import CaseSink  # noqa: PLC0415
        from ._wrappers import EvaluatedChatEngine, EvaluatedQueryEngine  # noqa: PLC0415

        goldens = load_goldens(goldens)
        if isinstance(obj, (EvaluatedQueryEngine, EvaluatedChatEngine)):
            obj = obj._engine  # noqa: SLF001 - capture into this run, not the wrapper's scorer
        kind = _kind(obj)
        if kind is None:
            raise ConfigurationTypeError(
                f"{type(obj).__name__} is not a LlamaIndex query engine, chat engine or retriever: point --app at "
                "one (for example index.as_query_engine()), or at an EvaluatedQueryEngine wrapping one.")
        scorer = CaptureSession(metrics=[], goldens=goldens, mode="off", max_kept=None)  # bounded by the goldens
        sink = CaseSink(scorer)

        def run(i: int) -> None:
            g = goldens.items[i]
            tags = {GOLDEN_INDEX_TAG: i}
            if g.id:
                tags[GOLDEN_ID_KEY] = g.id  # the one golden key (contextjudge.golden_id is still read)
            token = current_sink.set(sink)
            try:
                with instrument_tags(tags):
                    if kind == "chat":
                        obj.reset()
                        obj.chat(g.input)
                    elif kind == "query":
                        obj.query(g.input)
                    else:
                        obj.retrieve(g.input)
            except Exception as exc:  # noqa: BLE001 - one failing golden does not stop the run
                logger.warning("contextjudge: golden %s (%r) failed in the app: %s", g.id or i, g.input[:60], exc)
            finally:
                current_sink.reset(token)

        router.acquire()
        try:
            indices = range(len(goldens.items))
            if kind == "chat" or concurrency <= 1:
                for i in indices:
                    run(i)
            else:
                with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="contextjudge-app") as pool:
                    list(pool.map(run, indices))
        finally:
            router.release()
        cases = scorer.ready_cases()  # assembled here, after the runs: a case that fails to assemble is left out
        scorer.close()
        return sorted(cases, key=lambda c: c.metadata.get("golden_index", 1 << 30))


adapter = LlamaIndexAppAdapter()

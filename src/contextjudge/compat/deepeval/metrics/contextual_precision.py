"""``deepeval.metrics.contextual_precision``: ``ContextualPrecisionMetric`` and ``ContextualPrecisionTemplate`` (subclass it to change the prompt)."""

from __future__ import annotations

from typing import Any

from .... import metrics as _metrics
from ..test_case import SOURCE_KEY
from ._peer import PeerMetric, PeerTemplate, default_prompt

__all__ = ["ContextualPrecisionMetric", "ContextualPrecisionTemplate"]


class ContextualPrecisionTemplate(PeerTemplate):
    """The prompts of ``ContextualPrecisionMetric``. Override ``generate_verdicts`` / ``generate_reason`` as static methods taking
    DeepEval's keyword arguments; the defaults are contextjudge's own prompts."""

    _ours = _metrics.ContextualPrecisionTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:
        """The node-usefulness prompt for DeepEval's keyword arguments (contextjudge's own wording)."""
        return default_prompt("node_usefulness", _metrics.ContextualPrecisionTemplate, kwargs)


class ContextualPrecisionMetric(PeerMetric, _metrics.ContextualPrecisionMetric):
    """contextjudge's ``ContextualPrecisionMetric`` with DeepEval's constructor (``threshold, model, include_reason, async_mode,
    strict_mode, verbose_mode, evaluation_template``, ``flaky``)."""


    async def _compute(self, tc: Any, client: Any) -> Any:
        """DeepEval's grouping: the ``RetrievedContextData`` chunks of one source are one node, at the rank of the
        first, its text ``"Source: <source>"`` and the chunks joined by ``---`` lines."""
        nodes = tc.retrieval_context or []
        if any(SOURCE_KEY in (n.metadata or {}) for n in nodes):
            tc = tc.model_copy(update={"retrieval_context": _group_by_source(nodes)})
        return await super()._compute(tc, client)


def _group_by_source(nodes: list[Any]) -> list[Any]:
    from ....cases.testcase import RetrievedNode  # noqa: PLC0415

    groups: dict[str, list[str]] = {}
    order: list[Any] = []
    for n in nodes:
        source = (n.metadata or {}).get(SOURCE_KEY)
        if source is None:
            order.append(n)
        else:
            if source not in groups:
                groups[source] = []
                order.append(source)
            groups[source].append(n.text)
    return [RetrievedNode(text=f"Source: {o}\n" + "\n---\n".join(groups[o]), id=o, metadata={SOURCE_KEY: o})
            if isinstance(o, str) else o for o in order]

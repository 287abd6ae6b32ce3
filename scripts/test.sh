#!/usr/bin/env bash
# Create .venv (if missing), install contextjudge and both integrations with test extras, run every test offline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extras=$(for d in integrations/*/; do [ -f "$d/pyproject.toml" ] && printf -- "-e %s[test] " "${d%/}"; done)
if ! .venv/bin/pip install -q -e ".[test]" $extras > .venv/pip-install.log 2>&1; then
  grep -v "is ignored: it is neither" .venv/pip-install.log; echo "pip install failed"; exit 1
fi
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi
exit "$rc"

"""scripts/test.sh (what CI's ``.ci/run`` runs): it says what it is doing during its minutes-long install (issue 48
item 9: it printed nothing for 3-4 minutes). Run for real with bash, in a copy of the layout whose ``.venv`` holds
stand-ins for pip and python that record what they were asked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_test_script_says_it_is_installing_before_the_install_and_how_long_it_took(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    (tmp_path / "integrations" / "langchain").mkdir(parents=True)
    (tmp_path / "integrations" / "langchain" / "pyproject.toml").write_text("")
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    for name in ("pip", "python"):
        (bin_ / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\necho "STDOUT-OF-{name}"\n')
        (bin_ / name).chmod(0o755)
    out = subprocess.run(["bash", str(tmp_path / "scripts" / "test.sh"), "-q", "-k", "nothing"], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "CONTEXTJUDGE_LLAMA": "0",
                                                               "CONTEXTJUDGE_TRACELOOP": "0"})
    assert out.returncode == 0, out.stderr
    said = out.stdout.splitlines()
    assert said[0].startswith("installing contextjudge and its integrations") and ".venv/pip-install.log" in said[0]
    assert said[1].startswith("installed in ") and "running pytest" in said[1]
    assert said[2] == "STDOUT-OF-python"  # pytest's own output follows; pip's went to the log
    recorded = calls.read_text().splitlines()
    assert recorded[0].startswith("pip install -q -e .[test] -e integrations/langchain[test]")
    assert recorded[1] == "python -m pytest -q -q -k nothing"

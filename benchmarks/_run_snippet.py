"""Run documentation snippets as notebook cells would (top-level ``await`` allowed: Ragas' pages use it).

    python benchmarks/_run_snippet.py a.py b.py ...

Each snippet runs in fresh globals, in a fresh empty working directory, one after another in this interpreter (so
the embedded judge loads once); one JSON line per snippet says whether it ran, and if not, the error's last line.
State the compat faces keep per process (DeepEval's @log_hyperparameters functions) is cleared between snippets.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import json
import os
import sys
import tempfile
import time
import traceback


def _reset() -> None:
    mod = sys.modules.get("contextjudge.compat.deepeval._evaluate")
    if mod is not None:
        mod._logged.clear()  # noqa: SLF001 - ours
        mod._run_end.clear()  # noqa: SLF001


def run(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    out = io.StringIO()
    t0 = time.perf_counter()
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                scope = {"__name__": "__main__", "__file__": path}
                result = eval(code, scope)  # noqa: S307 - our own snippet files, run as a notebook cell
                if inspect.iscoroutine(result):
                    asyncio.run(result)
            ok, error = True, None
        except BaseException as exc:  # noqa: BLE001 - a snippet's failure is what we report
            ok = False
            error = "".join(traceback.format_exception(exc)).strip().splitlines()[-1]
        finally:
            os.chdir(home)
            _reset()
    return {"path": path, "ok": ok, "error": error, "seconds": round(time.perf_counter() - t0, 2),
            "output": out.getvalue()[-1500:]}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(run(p)), flush=True)

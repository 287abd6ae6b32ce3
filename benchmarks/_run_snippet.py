"""Run documentation snippets as notebook cells would (top-level ``await`` allowed: Ragas' pages use it).

    python benchmarks/_run_snippet.py a.py b.py ...

Each snippet runs in fresh globals, in a fresh empty working directory, one after another in this interpreter (so
the embedded judge loads once); one JSON line per snippet says whether it ran, and if not, the error's last line.
A snippet counts as run only when it raised nothing **and** every metric it scored has a score: a metric error that
``evaluate`` recorded (and printed, or kept as NaN) or an Opik ``ScoreResult(scoring_failed=True)`` fails it too.
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

_metric_errors: list[str] = []


def _watch() -> None:
    """Record the metric errors of every run, whichever face started it (before any face is imported)."""
    import contextjudge.engine._evaluate as engine  # noqa: PLC0415

    original = engine.aevaluate

    async def watched(*args, **kwargs):  # noqa: ANN002, ANN003
        result = await original(*args, **kwargs)
        for tr in result.test_results:
            if tr.error and not tr.metrics_data:
                _metric_errors.append(tr.error)
            _metric_errors.extend(f"{m.name}: {m.error}" for m in tr.metrics_data if m.error)
        return result

    engine.aevaluate = watched
    from contextjudge.compat.opik.evaluation import metrics as opik_metrics  # noqa: PLC0415

    scored = opik_metrics.BaseMetric.ascore

    async def ascore(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        result = await scored(self, *args, **kwargs)
        if result.scoring_failed:
            _metric_errors.append(f"{result.name}: {result.reason}")
        return result

    opik_metrics.BaseMetric.ascore = ascore


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
            ok, error = not _metric_errors, None
            if _metric_errors:
                error = f"ran, but {len(_metric_errors)} metric result(s) have no score: {_metric_errors[0][:300]}"
        except BaseException as exc:  # noqa: BLE001 - a snippet's failure is what we report
            ok = False
            error = "".join(traceback.format_exception(exc)).strip().splitlines()[-1]
        finally:
            os.chdir(home)
            _reset()
            _metric_errors.clear()
    return {"path": path, "ok": ok, "error": error, "seconds": round(time.perf_counter() - t0, 2),
            "output": out.getvalue()[-1500:]}


if __name__ == "__main__":
    _watch()
    for p in sys.argv[1:]:
        print(json.dumps(run(p)), flush=True)

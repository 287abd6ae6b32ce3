"""Compare the compat faces' API shapes with the real peer packages: module paths, names, parameters, fields.

    python benchmarks/compat_shapes.py --deepeval /path/to/deepeval-venv/bin/python \\
        --ragas /path/to/ragas-venv/bin/python --opik /path/to/opik-venv/bin/python

Each peer is installed in its own virtual environment (``pip install deepeval``; ``pip install ragas
"langchain-community<0.4" "instructor>=1.17"``; ``pip install opik``), never in contextjudge's. For every name a
switching user imports, the peer's interpreter reports the parameters of the callable (or the fields of the class)
and this script checks that the contextjudge face takes each of them (by name). It prints one line per name and
the count of gaps; a peer whose interpreter is not given is skipped. Only signatures are read, no peer code runs
beyond its imports.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (peer module, name, what to compare): "call" = the callable's parameters, "fields" = a model's/dataclass' fields,
# "members" = the enum's member names, "methods:a,b" = those methods' parameters
NAMES: dict[str, list[tuple[str, str, str]]] = {
    "deepeval": [
        ("deepeval", "evaluate", "call"),
        ("deepeval", "assert_test", "call"),
        ("deepeval.evaluate", "AsyncConfig", "fields"),
        ("deepeval.evaluate", "DisplayConfig", "fields"),
        ("deepeval.evaluate", "ErrorConfig", "fields"),
        ("deepeval.evaluate", "CacheConfig", "fields"),
        ("deepeval.dataset", "Golden", "fields"),
        ("deepeval.dataset", "ConversationalGolden", "fields"),
        ("deepeval.dataset", "EvaluationDataset",
         ("methods:add_golden,add_test_case,evals_iterator,add_goldens_from_json_file,add_goldens_from_jsonl_file,"
          "add_goldens_from_csv_file,add_test_cases_from_json_file,add_test_cases_from_csv_file,save_as,evaluate")),
        ("deepeval.test_case", "LLMTestCase", "fields"),
        ("deepeval.test_case", "ConversationalTestCase", "fields"),
        ("deepeval.test_case", "Turn", "fields"),
        ("deepeval.test_case", "ToolCall", "fields"),
        ("deepeval.test_case", "SingleTurnParams", "members"),
        ("deepeval.test_case", "MultiTurnParams", "members"),
        ("deepeval.test_case", "MLLMImage", "fields"),
        ("deepeval.tracing", "observe", "call"),
        ("deepeval.tracing", "update_current_span", "call"),
        ("deepeval.tracing", "update_current_trace", "call"),
        ("deepeval.errors", "MissingTestCaseParamsError", "class"),
        *[(f"deepeval.metrics.{m}", f"{c}Metric", "call") for m, c in (
            ("contextual_precision", "ContextualPrecision"), ("contextual_recall", "ContextualRecall"),
            ("contextual_relevancy", "ContextualRelevancy"), ("turn_contextual_precision", "TurnContextualPrecision"),
            ("turn_contextual_recall", "TurnContextualRecall"),
            ("turn_contextual_relevancy", "TurnContextualRelevancy"))],
        *[(f"deepeval.metrics.{m}", f"{c}Template", "class") for m, c in (
            ("contextual_precision", "ContextualPrecision"), ("contextual_recall", "ContextualRecall"),
            ("contextual_relevancy", "ContextualRelevancy"), ("turn_contextual_precision", "TurnContextualPrecision"),
            ("turn_contextual_recall", "TurnContextualRecall"),
            ("turn_contextual_relevancy", "TurnContextualRelevancy"))],
    ],
    "ragas": [
        ("ragas", "evaluate", "call"),
        ("ragas", "SingleTurnSample", "fields"),
        ("ragas", "MultiTurnSample", "fields"),
        ("ragas", "EvaluationDataset", "methods:from_list,from_pandas,to_pandas,to_list,from_hf_dataset,from_jsonl"),
        ("ragas.dataset_schema", "EvaluationResult", "methods:to_pandas,total_tokens,total_cost"),
        ("ragas.llms", "LangchainLLMWrapper", "class"),
        ("ragas.llms", "llm_factory", "call"),
        *[("ragas.metrics", n, "methods:single_turn_ascore,single_turn_score") for n in (
            "LLMContextPrecisionWithReference", "LLMContextPrecisionWithoutReference", "LLMContextRecall",
            "ContextRelevance", "ContextUtilization", "ContextPrecision", "ContextRecall")],
        *[("ragas.metrics.collections", n, "methods:ascore,score") for n in (
            "ContextPrecision", "ContextRecall", "ContextUtilization", "ContextRelevance",
            "ContextPrecisionWithReference", "ContextPrecisionWithoutReference")],
    ],
    "opik": [
        ("opik.evaluation.metrics", "ContextPrecision", "call"),
        ("opik.evaluation.metrics", "ContextRecall", "call"),
        ("opik.evaluation.metrics", "ContextPrecision", "methods:score,ascore"),
        ("opik.evaluation.metrics", "ContextRecall", "methods:score,ascore"),
        ("opik.evaluation.metrics.score_result", "ScoreResult", "fields"),
    ],
}

_PROBE = r'''
import importlib, inspect, json, sys, dataclasses, enum
out = {}
for mod, name, what in json.loads(sys.argv[1]):
    key = f"{mod}:{name}:{what}"
    try:
        obj = getattr(importlib.import_module(mod), name)
    except Exception as exc:
        out[key] = {"error": f"{type(exc).__name__}: {exc}"}
        continue
    def params(fn):
        try:
            ps = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return []
        names = [p.name for p in ps if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")]
        return names + (["**"] if any(p.kind is p.VAR_KEYWORD for p in ps) else [])
    if what == "call":
        out[key] = {"names": params(obj)}
    elif what == "fields":
        fields = getattr(obj, "model_fields", None) or getattr(obj, "__dataclass_fields__", None)
        names = [f for f in (fields or params(obj)) if not f.startswith("_") or f == "**"]
        if (getattr(obj, "model_config", None) or {}).get("extra") == "allow":
            names.append("**")
        out[key] = {"names": names}
    elif what == "members":
        out[key] = {"names": [m.name for m in obj]}
    elif what.startswith("methods:"):
        out[key] = {"names": {m: params(getattr(obj, m)) if hasattr(obj, m) else None
                              for m in what.split(":", 1)[1].split(",")}}
    else:
        out[key] = {"names": [b.__name__ for b in obj.__mro__ if b.__module__ == "builtins"]
                    if isinstance(obj, type) else []}
print(json.dumps(out))
'''


def _ours(peer: str, mod: str) -> str:
    return f"contextjudge.compat.{mod}" if mod.startswith(peer) else mod


def _inspect_ours(items: list[tuple[str, str, str]], peer: str) -> dict[str, dict]:
    """The same probe, run on the contextjudge faces in this interpreter."""
    scope: dict = {}
    code = _PROBE.replace("print(json.dumps(out))", "RESULT = out")
    mapped = [(_ours(peer, m), n, w) for m, n, w in items]
    saved = sys.argv
    try:
        sys.argv = ["probe", json.dumps(mapped)]
        exec(compile(code, "probe", "exec"), scope)  # noqa: S102 - our own probe
    finally:
        sys.argv = saved
    return {f"{m}:{n}:{w}": v for (m, n, w), v in zip(items, scope["RESULT"].values(), strict=True)}


def compare(peer: str, python: str) -> int:
    items = NAMES[peer]
    env = {**os.environ, "DEEPEVAL_TELEMETRY_OPT_OUT": "1", "RAGAS_DO_NOT_TRACK": "true", "OPIK_TRACK_DISABLE": "true"}
    done = subprocess.run([python, "-c", _PROBE, json.dumps(items)], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    if done.returncode != 0:
        print(f"{peer}: the peer interpreter failed: {done.stderr.strip()[-500:]}")
        return 1
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = _inspect_ours(items, peer)
    gaps = 0
    for key, t in theirs.items():
        o = ours.get(key, {})
        if "error" in t:
            print(f"  {key}: not in the peer ({t['error']})")
            continue
        if "error" in o:
            gaps += 1
            print(f"  {key}: MISSING here ({o['error']})")
            continue
        tn, on = t["names"], o["names"]

        def split(want: list[str], have: list[str]) -> tuple[list[str], list[str]]:
            """(not taken at all, taken through **kwargs / extra fields: accepted, kept or ignored)"""
            left = [p for p in want if p != "**" and p not in have]
            return ([], left) if "**" in have else (left, [])

        if isinstance(tn, dict):
            pairs = {m: split(ps or [], on.get(m) or []) for m, ps in tn.items() if ps is not None}
            missing = {m: a for m, (a, _) in pairs.items() if a}
            loose = {m: b for m, (_, b) in pairs.items() if b}
            absent = [m for m, ps in on.items() if ps is None and tn.get(m) is not None]
        else:
            missing, loose = split(tn, on)
            absent = []
        if missing or absent:
            gaps += 1
            print(f"  {key}: GAP: not taken {missing or ''} {('methods ' + str(absent)) if absent else ''}")
        elif loose:
            print(f"  {key}: ok (through **kwargs: {loose})")
        else:
            print(f"  {key}: ok")
    print(f"{peer}: {len(theirs) - gaps} of {len(theirs)} names take every peer parameter/field ({gaps} gaps)")
    return gaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for peer in NAMES:
        ap.add_argument(f"--{peer}", metavar="PYTHON", help=f"the interpreter of a venv with {peer} installed")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    importlib.invalidate_caches()
    ran = False
    for peer in NAMES:
        python = getattr(args, peer)
        if python:
            ran = True
            print(f"== {peer} ({python})")
            compare(peer, python)
    if not ran:
        print("give at least one peer interpreter, e.g. --deepeval /path/to/venv/bin/python")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shared by the benchmarks: HotpotQA cases, offline token counting, peer venvs, and running a tool on cases.

Each tool (contextjudge, DeepEval, Ragas) runs in a process of its own, against the loopback ``FaultServer`` that
the benchmark hosts; the server counts calls and tokens, so every tool is measured the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Peer venvs: what to install (the recipes that import and run here; see the README's benchmark section).
PEERS: dict[str, list[str]] = {
    "deepeval": ["deepeval"],
    # ragas 0.4.3 imports langchain_community.chat_models.vertexai, removed in langchain-community 0.4;
    # instructor>=1.17 avoids a resolver walk back to instructor 1.3 / openai 1.x; rapidfuzz: the TestsetGenerator's
    # entity-overlap step imports it (not a dependency of the ragas wheel).
    "ragas": ["ragas", "langchain-community<0.4", "instructor>=1.17", "rapidfuzz"],
}
TELEMETRY_OFF = {"DEEPEVAL_TELEMETRY_OPT_OUT": "1", "RAGAS_DO_NOT_TRACK": "true"}


def default_cache_dir() -> Path:
    return Path(os.environ.get("CONTEXTJUDGE_BENCH_CACHE", Path.home() / ".cache" / "contextjudge-bench"))


def tiktoken_cache() -> str:
    """The folder of tiktoken's cl100k_base and o200k_base files bundled in llama-index-core's wheel (offline)."""
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("token counting needs llama-index-core (it bundles tiktoken's o200k_base file): "
                         "pip install llama-index-core tiktoken")
    return str(Path(list(spec.submodule_search_locations)[0]) / "_static" / "tiktoken_cache")


def token_counter() -> Callable[[str], int]:
    """len(o200k_base tokens), offline: tiktoken reads the encoding bundled in llama-index-core's wheel."""
    os.environ["TIKTOKEN_CACHE_DIR"] = tiktoken_cache()
    import tiktoken  # noqa: PLC0415 - after TIKTOKEN_CACHE_DIR is set

    enc = tiktoken.get_encoding("o200k_base")
    return lambda text: len(enc.encode(text or "", disallowed_special=()))


def load_hotpot(data_dir: str | Path, n_cases: int, n_nodes: int) -> list[dict[str, Any]]:
    """The first ``n_cases`` HotpotQA dev questions with at least ``n_nodes`` passages, as plain dicts.

    The nodes are the first ``n_nodes`` passages in the file's order; the app's answer is a sentence that states the
    gold answer, so it differs from the expected output (precision and utilization cannot share verdicts).
    """
    path = Path(data_dir).expanduser() / "hotpotqa_dev.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} not found: pass --data-dir pointing at the folder with hotpotqa_dev.jsonl")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if len(r["passages"]) < n_nodes or not r.get("reference_answer"):
                continue
            answer = r["reference_answer"].strip()
            rows.append({
                "input": r["question"],
                "expected_output": answer if answer.endswith(".") else answer + ".",
                "actual_output": f"Based on the documents, the answer is {answer}.",
                "retrieval_context": [p["text"] for p in r["passages"][:n_nodes]],
            })
            if len(rows) == n_cases:
                break
    if len(rows) < n_cases:
        raise SystemExit(f"only {len(rows)} HotpotQA cases have {n_nodes} passages; asked for {n_cases}")
    return rows


def peer_python(tool: str, cache_dir: Path, log: Callable[[str], None] = print) -> Path:
    """The python of ``tool``'s venv under ``cache_dir``, created and installed on first use."""
    venv = cache_dir / tool
    py = venv / "bin" / "python"
    marker = venv / ".contextjudge-bench-ok"
    if py.exists() and marker.exists():
        return py
    cache_dir.mkdir(parents=True, exist_ok=True)
    log(f"creating the {tool} venv in {venv} (pip install {' '.join(PEERS[tool])}; about a minute)")
    t0 = time.perf_counter()
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEERS[tool]],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"installing {tool} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    marker.write_text(json.dumps({"packages": PEERS[tool], "seconds": round(time.perf_counter() - t0, 1)}))
    return py


def run_tool(tool: str, python: str | Path, cases_file: Path, base_url: str, metrics: str, workdir: Path,
             extra: list[str] | None = None, timeout: float = 3600) -> dict[str, Any]:
    """Run one tool's runner script on the cases; return its JSON summary (elapsed, scores, errors, peak RSS)."""
    out = workdir / f"{tool}-{metrics.replace(',', '+')}.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, **TELEMETRY_OFF, "OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": base_url,
           "DEEPEVAL_HOME": str(workdir / ".deepeval-home")}
    env.pop("TIKTOKEN_CACHE_DIR", None)  # the peers' own defaults (their token counters are not used here)
    cmd = [str(python), str(HERE / f"run_{tool}.py"), str(cases_file), str(out), "--base-url", base_url,
           "--metrics", metrics, *(extra or [])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    (workdir / f"{tool}-{metrics.replace(',', '+')}.log").write_text(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{tool} ({metrics}) failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}")
    summary = json.loads(out.read_text())
    summary["process_wall"] = wall
    return summary

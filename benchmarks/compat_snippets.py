"""How many of the peers' documented context-metric snippets run on contextjudge with only the import changed.

    python benchmarks/compat_snippets.py            # every snippet, with the embedded judge (model="local")
    python benchmarks/compat_snippets.py --peer ragas --verbose

The snippets are re-creations (same calls, our own example data) of the Python blocks on DeepEval's, Ragas' and
Opik's documentation pages for the context metrics, and of the dataset / @observe / pytest / evaluate-config flows
that use them: ``tests/compat_snippets/<peer>/*.py``. In each, the peer's import became
``contextjudge.compat.<peer>...`` and the judge became ``"local"`` (the embedded offline judge); nothing else
changed, except where the page's block does not run on the peer either (a missing comma, an unimported ``List``, a
``...`` placeholder): the snippet's header says so. ``tests/compat_snippets/known_failures.txt`` says why each
snippet known to need more than an import change does; any other failure is printed as "not a known gap".

Each snippet runs in fresh globals and an empty temporary directory, the plain ones of a peer one after another in
one interpreter (``benchmarks/_run_snippet.py``), each ``test_*.py`` one under pytest in its own, with
``CONTEXTJUDGE_MODEL=local`` and a dummy ``OPENAI_API_KEY`` (some pages build an OpenAI client they never call
here). Nothing reaches the network. A snippet counts as run only if it raised nothing and every metric it scored
has a score (a metric error recorded by ``evaluate``, a NaN row or an Opik ``scoring_failed`` fails it). Prints the
share that ran, and the list of what did not, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "compat_snippets"


def snippets(peer: str | None = None) -> list[Path]:
    peers = [peer] if peer else sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
    return [f for p in peers for f in sorted((CORPUS / p).glob("*.py"))]


def known_failures() -> dict[str, str]:
    """``peer/file.py`` -> why that documented snippet needs more than an import change."""
    out = {}
    for line in (CORPUS / "known_failures.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            what, why = (p.strip() for p in line.split("|", 1))
            out[what] = why
    return out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTJUDGE_", "OPENAI_"))}
    env.update(CONTEXTJUDGE_MODEL="local", OPENAI_API_KEY="sk-not-used", PYTHONPATH=str(ROOT / "src"),
               PYTHONWARNINGS="ignore")
    return env


def run_pytest(path: Path, timeout: float = 600.0) -> dict:
    """A ``test_*.py`` snippet under pytest, in an empty temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
                                  cwd=tmp, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"path": str(path), "ok": False, "error": f"timed out after {timeout:.0f}s", "output": ""}
        out = (done.stdout + done.stderr).strip()
        return {"path": str(path), "ok": done.returncode == 0, "output": out[-1500:],
                "error": out.splitlines()[-1] if out else "no output", "seconds": time.perf_counter() - t0}


def run_batch(paths: list[Path], timeout: float = 900.0) -> list[dict]:
    """Plain snippets, one after another in one fresh interpreter (``_run_snippet.py``)."""
    if not paths:
        return []
    try:
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "_run_snippet.py"), *map(str, paths)],
                              cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)
        lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    except subprocess.TimeoutExpired:
        lines = []
    got = {r["path"]: r for r in lines}
    return [got.get(str(p)) or {"path": str(p), "ok": False, "output": "",
                                "error": "the interpreter running it died or timed out"} for p in paths]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", choices=["deepeval", "ragas", "opik"])
    ap.add_argument("--jobs", type=int, default=2, help="snippets run at once (default 2)")
    ap.add_argument("--verbose", action="store_true", help="print each failing snippet's output")
    args = ap.parse_args()
    files = snippets(args.peer)
    plain = [f for f in files if not f.name.startswith("test_")]
    batches = [[f for f in plain if f.parent.name == p] for p in sorted({f.parent.name for f in plain})]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        jobs = [pool.submit(run_batch, b) for b in batches]
        jobs += [pool.submit(lambda f=f: [run_pytest(f)]) for f in files if f.name.startswith("test_")]
        by_path = {r["path"]: r for j in jobs for r in j.result()}
    results = [(by_path[str(f)]["ok"], by_path[str(f)].get("output", ""), by_path[str(f)].get("error") or "")
               for f in files]
    known = known_failures()
    by_peer: dict[str, list[int]] = {}
    failed = []
    for f, (ok, out, error) in zip(files, results, strict=True):
        row = by_peer.setdefault(f.parent.name, [0, 0])
        row[0] += ok
        row[1] += 1
        if not ok:
            failed.append((f.parent.name, f.name, error, out))
    ran = sum(r[0] for r in by_peer.values())
    total = sum(r[1] for r in by_peer.values())
    print(f"documented context-metric snippets that run with only the import changed: {ran} of {total} "
          f"({100.0 * ran / total:.1f}%)")
    for who, (ok, n) in sorted(by_peer.items()):
        print(f"  {who}: {ok} of {n} ({100.0 * ok / n:.1f}%)")
    if failed:
        print("\nstill needing more than an import change:")
        for who, what, error, out in failed:
            why = known.get(f"{who}/{what}")
            print(f"  {who}/{what}: {why or 'FAILED (not a known gap)'}\n      {error}")
            if args.verbose:
                print("    " + out.replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

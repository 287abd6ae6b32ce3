"""How many of the peers' documented context-metric snippets run on contextjudge with only the import changed.

    python benchmarks/compat_snippets.py            # every snippet, with the embedded judge (model="local")
    python benchmarks/compat_snippets.py --peer ragas --verbose

The snippets are re-creations (same calls, our own example data) of the Python blocks on DeepEval's, Ragas' and
Opik's documentation pages for the context metrics, and of the dataset / @observe / pytest / evaluate-config flows
that use them: ``tests/compat_snippets/<peer>/*.py``. In each, the peer's import became
``contextjudge.compat.<peer>...`` and the judge became ``"local"`` (the embedded offline judge); nothing else
changed, except where the page's block does not run on the peer either (a missing comma, an unimported ``List``, a
``...`` placeholder): the snippet's header says so. ``tests/compat_snippets/not_runnable.txt`` lists the documented
snippets that still need more than an import change, and why; they count as failures.

Each snippet runs in a fresh interpreter in an empty temporary directory (``test_*.py`` ones under pytest), with
``CONTEXTJUDGE_MODEL=local`` and a dummy ``OPENAI_API_KEY`` (some pages build an OpenAI client they never call
here). Nothing reaches the network. Prints the share that ran, and the list of what did not, with the reason.
"""

from __future__ import annotations

import argparse
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


def not_runnable(peer: str | None = None) -> list[tuple[str, str, str]]:
    """(peer, snippet, why) for the documented snippets that need more than an import change."""
    out = []
    for line in (CORPUS / "not_runnable.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        who, what, why = (p.strip() for p in line.split("|", 2))
        if peer is None or who == peer:
            out.append((who, what, why))
    return out


def run_one(path: Path, timeout: float = 300.0) -> tuple[bool, str, float]:
    """Run one snippet; (ran, the tail of its output, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTJUDGE_", "OPENAI_"))}
    env.update(CONTEXTJUDGE_MODEL="local", OPENAI_API_KEY="sk-not-used", PYTHONPATH=str(ROOT / "src"),
               PYTHONWARNINGS="ignore")
    with tempfile.TemporaryDirectory() as tmp:
        if path.name.startswith("test_"):
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        else:
            cmd = [sys.executable, str(ROOT / "benchmarks" / "_run_snippet.py"), str(path)]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout:.0f}s", time.perf_counter() - t0
        out = (done.stdout + done.stderr).strip()
        return done.returncode == 0, out[-1500:], time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", choices=["deepeval", "ragas", "opik"])
    ap.add_argument("--jobs", type=int, default=2, help="snippets run at once (default 2)")
    ap.add_argument("--verbose", action="store_true", help="print each failing snippet's output")
    args = ap.parse_args()
    files = snippets(args.peer)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(run_one, files))
    missing = not_runnable(args.peer)
    by_peer: dict[str, list[int]] = {}
    failed = []
    for f, (ok, out, secs) in zip(files, results):
        row = by_peer.setdefault(f.parent.name, [0, 0])
        row[0] += ok
        row[1] += 1
        if not ok:
            failed.append((f.parent.name, f.name, out.splitlines()[-1] if out else "no output", out))
    for who, what, _ in missing:
        by_peer.setdefault(who, [0, 0])[1] += 1
    ran = sum(r[0] for r in by_peer.values())
    total = sum(r[1] for r in by_peer.values())
    print(f"documented context-metric snippets that run with only the import changed: {ran} of {total} "
          f"({100.0 * ran / total:.1f}%)")
    for who, (ok, n) in sorted(by_peer.items()):
        print(f"  {who}: {ok} of {n} ({100.0 * ok / n:.1f}%)")
    if failed or missing:
        print("\nstill needing more than an import change:")
        for who, what, why, out in failed:
            print(f"  {who}/{what}: FAILED: {why}")
            if args.verbose:
                print("    " + out.replace("\n", "\n    "))
        for who, what, why in missing:
            print(f"  {who}: {what}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
